package server

import (
	"strconv"
	"strings"
	"testing"
)

// healthy checks that another client is served normally.
func (f *respFixture) healthy(t *testing.T) {
	t.Helper()
	c := dialRESP(t, f.addr)
	authAs(t, c, "acme", secretA)
	k := mpKey(999)
	if got := c.do("SET", k, "ok"); got != "+OK\r\n" {
		t.Fatalf("another client SET: %q", got)
	}
	if got := c.do("GET", k); got != "$2\r\nok\r\n" {
		t.Fatalf("another client GET: %q", got)
	}
}

func startBad(t *testing.T) *respFixture {
	store := bigStore(t, 64<<20)
	return startRESP(t, store, true, func(c *Config) {
		c.RESPProfiles = map[string]RESPProfile{"acme": respProfile(0)}
	})
}

// TestRESPBadFramesClose: an oversized bulk, negative and garbage lengths
// and an inline command get one -ERR and a close; other clients are
// unaffected.
func TestRESPBadFramesClose(t *testing.T) {
	f := startBad(t)
	for name, in := range map[string]string{
		"oversized bulk":  "*3\r\n$3\r\nSET\r\n$3\r\nkey\r\n$" + strconv.Itoa(64<<20+1) + "\r\n",
		"negative length": "*2\r\n$3\r\nGET\r\n$-5\r\n",
		"garbage length":  "*2\r\n$3\r\nGET\r\n$1x\r\nk\r\n",
		"garbage array":   "*zz\r\n",
		"huge array":      "*100000000\r\n",
		"inline":          "GET key\r\n",
	} {
		t.Run(name, func(t *testing.T) {
			c := dialRESP(t, f.addr)
			authAs(t, c, "acme", secretA)
			c.write([]byte(in))
			if got := c.reply(); !strings.HasPrefix(got, "-ERR Protocol error: ") {
				t.Fatalf("%q: %q", in, got)
			}
			c.expectClosed()
			f.healthy(t)
		})
	}
}

// TestRESPTruncatedFrame: a SET whose value stops short reserves the
// value's slot, is aborted at EOF and leaves nothing behind.
func TestRESPTruncatedFrame(t *testing.T) {
	f := startBad(t)
	c := dialRESP(t, f.addr)
	authAs(t, c, "acme", secretA)
	before := f.stat(t, "resp_commands")
	c.write([]byte("*3\r\n$3\r\nSET\r\n$" + strconv.Itoa(len(mpKey(5))) + "\r\n" + mpKey(5) + "\r\n$100000\r\nabc"))
	c.nc.(interface{ CloseWrite() error }).CloseWrite()
	c.expectClosed()
	<-f.closed
	if got := f.stat(t, "resp_commands"); got != before+1 {
		t.Fatalf("resp_commands %d, want %d", got, before+1)
	}
	if r := f.stat(t, "hot_bytes_reserved"); r != 0 {
		t.Fatalf("%d bytes still reserved after the truncated SET", r)
	}
	if n := f.stat(t, "hot_blocks"); n != 0 {
		t.Fatalf("%d blocks stored", n)
	}
	f.healthy(t)
}

// TestRESPUnknownCommandKeepsConnection: an unknown command (also one
// with a large last argument, skipped unread) answers -ERR and the
// connection stays in sync.
func TestRESPUnknownCommandKeepsConnection(t *testing.T) {
	f := startBad(t)
	c := dialRESP(t, f.addr)
	authAs(t, c, "acme", secretA)
	if got := c.do("FLUSHALL"); got != "-ERR unknown command 'FLUSHALL'\r\n" {
		t.Fatalf("FLUSHALL: %q", got)
	}
	if got := c.do("ECHO", strings.Repeat("e", 100000)); got != "-ERR unknown command 'ECHO'\r\n" {
		t.Fatalf("ECHO: %q", got)
	}
	if got := c.do("GET", mpKey(1), "extra"); !strings.HasPrefix(got, "-ERR wrong number of arguments") {
		t.Fatalf("GET with two keys: %q", got)
	}
	if got := c.do("PING"); got != "+PONG\r\n" {
		t.Fatalf("PING after errors: %q", got)
	}
}

// TestRESPTransactionsSayWhatToUse: MULTI, EXEC and the other transaction
// commands answer an error that names the non-transactional pipeline
// (redis-py's default pipeline() sends MULTI ... EXEC); the commands between
// them run, and the connection stays in sync.
func TestRESPTransactionsSayWhatToUse(t *testing.T) {
	f := startBad(t)
	c := dialRESP(t, f.addr)
	authAs(t, c, "acme", secretA)
	for _, cmd := range [][]string{{"MULTI"}, {"exec"}, {"DISCARD"}, {"WATCH", mpKey(1)}, {"UNWATCH"}} {
		want := "-ERR " + strings.ToUpper(cmd[0]) + " is not supported: gpucache's RESP endpoint has no transactions, so commands sent between MULTI and EXEC run one by one; " +
			"send them without MULTI/EXEC (redis-py: pipeline(transaction=False))\r\n"
		if got := c.do(cmd...); got != want {
			t.Fatalf("%s: %q\nwant %q", cmd[0], got, want)
		}
	}
	if got := c.do("EXISTS", mpKey(1)); got != ":0\r\n" {
		t.Fatalf("EXISTS after the refusals: %q", got)
	}
}

// TestRESPBeforeAuth: nothing but AUTH, PING, QUIT and HELLO before AUTH.
func TestRESPBeforeAuth(t *testing.T) {
	f := startBad(t)
	c := dialRESP(t, f.addr)
	for _, cmd := range [][]string{{"GET", mpKey(1)}, {"SET", mpKey(1), "v"}, {"EXISTS", mpKey(1)}, {"DEL", mpKey(1)}, {"SELECT", "0"}} {
		if got := c.do(cmd...); got != "-NOAUTH Authentication required.\r\n" {
			t.Fatalf("%s before AUTH: %q", cmd[0], got)
		}
	}
	if got := c.do("PING"); got != "+PONG\r\n" {
		t.Fatalf("PING before AUTH: %q", got)
	}
	if got := c.do("HELLO", "3"); got != "-ERR unknown command 'HELLO'\r\n" {
		t.Fatalf("HELLO before AUTH: %q", got)
	}
	authAs(t, c, "acme", secretA)
	if got := c.do("GET", mpKey(1)); got != "$-1\r\n" {
		t.Fatalf("GET after AUTH: %q", got)
	}
	// The one-argument form: the tenant is the secret's.
	d := dialRESP(t, f.addr)
	d.write(command([]byte("AUTH"), secretA))
	if got := d.reply(); got != "+OK\r\n" {
		t.Fatalf("AUTH <secret>: %q", got)
	}
}

// TestRESPWrongPassword: -WRONGPASS, audited without the secret, the
// third failure closes; a tenant's secret under another tenant's name
// fails too.
func TestRESPWrongPassword(t *testing.T) {
	f := startBad(t)
	c := dialRESP(t, f.addr)
	wrong := "not-the-secret-0123456789"
	const wp = "-WRONGPASS invalid username-password pair or user is disabled.\r\n"
	if got := c.do("AUTH", "acme", wrong); got != wp {
		t.Fatalf("wrong password: %q", got)
	}
	c.write(command([]byte("AUTH"), []byte("beta"), secretA)) // acme's secret as beta
	if got := c.reply(); got != wp {
		t.Fatalf("another tenant's secret: %q", got)
	}
	if got := c.do("GET", mpKey(1)); got != "-NOAUTH Authentication required.\r\n" {
		t.Fatalf("GET after failed AUTHs: %q", got)
	}
	if got := c.do("AUTH", wrong); got != wp {
		t.Fatalf("third failure: %q", got)
	}
	c.expectClosed()
	ev := f.audit.events(t, "auth_failure")
	if len(ev) != 3 {
		t.Fatalf("%d auth_failure events, want 3: %s", len(ev), f.audit.String())
	}
	if ev[0]["tenant"] != "acme" || ev[1]["tenant"] != "beta" {
		t.Fatalf("audited tenants: %v, %v", ev[0]["tenant"], ev[1]["tenant"])
	}
	for _, out := range []string{f.audit.String(), f.log.String()} {
		for _, secret := range []string{wrong, string(secretA)} {
			if strings.Contains(out, secret) {
				t.Fatalf("a secret is in the audit or log output: %s", out)
			}
		}
	}
	if n := f.stat(t, "resp_auth_failures"); n != 3 {
		t.Fatalf("resp_auth_failures %d", n)
	}
	f.healthy(t)
}
