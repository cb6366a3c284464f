package server

import (
	"strings"
	"testing"
)

func authAs(t *testing.T, c *respClient, tenant string, secret []byte) {
	t.Helper()
	c.write(command([]byte("AUTH"), []byte(tenant), secret))
	if got := c.reply(); got != "+OK\r\n" {
		t.Fatalf("AUTH %s: %q", tenant, got)
	}
}

// TestRESPPairedIdentity: tenant A's key hits for A from another
// connection, misses for tenant B with the same key, and misses under a
// profile that differs in one field (dtype), on the same hot tier.
func TestRESPPairedIdentity(t *testing.T) {
	store := bigStore(t, 64<<20)
	profiles := map[string]RESPProfile{"acme": respProfile(0), "beta": respProfile(0)}
	f := startRESP(t, store, true, func(c *Config) { c.RESPProfiles = profiles })
	key := mpKey(7)
	a1 := dialRESP(t, f.addr)
	authAs(t, a1, "acme", secretA)
	if got := a1.do("SET", key, "chunk-of-acme"); got != "+OK\r\n" {
		t.Fatalf("SET: %q", got)
	}
	a2 := dialRESP(t, f.addr)
	authAs(t, a2, "acme", secretA)
	if got := a2.do("GET", key); got != "$13\r\nchunk-of-acme\r\n" {
		t.Fatalf("A from a second connection: %q", got)
	}
	b := dialRESP(t, f.addr)
	authAs(t, b, "beta", secretB)
	if got := b.do("GET", key); got != "$-1\r\n" {
		t.Fatalf("B GET: %q", got)
	}
	if got := b.do("EXISTS", key); got != ":0\r\n" {
		t.Fatalf("B EXISTS: %q", got)
	}
	if got := b.do("DEL", key); got != ":0\r\n" {
		t.Fatalf("B DEL: %q", got)
	}
	// The same tenant under a profile with another dtype (a second server
	// over the same hot tier, as after a profile change and restart).
	other := respProfile(0)
	other.Namespace.DType = "bf16"
	g := startRESP(t, store, true, func(c *Config) { c.RESPProfiles = map[string]RESPProfile{"acme": other} })
	a3 := dialRESP(t, g.addr)
	authAs(t, a3, "acme", secretA)
	if got := a3.do("GET", key); got != "$-1\r\n" {
		t.Fatalf("another dtype GET: %q", got)
	}
	if got := a3.do("EXISTS", key); got != ":0\r\n" {
		t.Fatalf("another dtype EXISTS: %q", got)
	}
	// And A still hits: B's DEL removed nothing.
	if got := a2.do("EXISTS", key); got != ":1\r\n" {
		t.Fatalf("A after B's DEL: %q", got)
	}
}

// TestRESPSetSemantics: chunks are immutable; the profile's length and
// model rules; the in-process two-key layout.
func TestRESPSetSemantics(t *testing.T) {
	store := bigStore(t, 64<<20)
	f := startRESP(t, store, true, func(c *Config) {
		c.RESPProfiles = map[string]RESPProfile{"acme": respProfile(16)}
	})
	c := dialRESP(t, f.addr)
	authAs(t, c, "acme", secretA)
	key := mpKey(1)
	if got := c.do("SET", key, "0123456789abcdef"); got != "+OK\r\n" {
		t.Fatalf("SET: %q", got)
	}
	if got := c.do("SET", key, "XXXXXXXXXXXXXXXX"); got != "+OK\r\n" {
		t.Fatalf("SET of an existing key: %q", got)
	}
	if got := c.do("GET", key); got != "$16\r\n0123456789abcdef\r\n" {
		t.Fatalf("GET after the second SET: %q", got)
	}
	if n := f.stat(t, "resp_set_exists"); n != 1 {
		t.Fatalf("resp_set_exists %d, want 1", n)
	}
	if got := c.do("SET", mpKey(2), "short"); !strings.HasPrefix(got, "-ERR value of 5 bytes") || !strings.Contains(got, "16") {
		t.Fatalf("SET of the wrong length: %q", got)
	}
	if got := c.do("GET", mpKey(2)); got != "$-1\r\n" {
		t.Fatalf("refused SET stored something: %q", got)
	}
	wrong := "Qwen/Qwen3-8B@00000000@0@abcd"
	if got := c.do("SET", wrong, "0123456789abcdef"); !strings.Contains(got, `"Qwen/Qwen3-8B"`) || !strings.Contains(got, `"`+respModel+`"`) {
		t.Fatalf("SET of another model's key: %q", got)
	}
	if got := c.do("SET", "key:000000000042", "0123456789abcdef"); !strings.HasPrefix(got, "-ERR key \"key:000000000042\" is not an LMCache key") {
		t.Fatalf("SET of a non-LMCache key: %q", got)
	}
	// In-process layout: <key>kv_bytes holds a chunk (chunk_bytes), and
	// <key>metadata 28 bytes, which the length rule exempts.
	base := respModel + "@1@0@1f2e3d@bfloat16"
	meta := strings.Repeat("m", 28)
	if got := c.do("SET", base+"kv_bytes", "0123456789abcdef"); got != "+OK\r\n" {
		t.Fatalf("SET kv_bytes: %q", got)
	}
	if got := c.do("SET", base+"metadata", meta); got != "+OK\r\n" {
		t.Fatalf("SET metadata: %q", got)
	}
	if got := c.do("EXISTS", base+"metadata"); got != ":1\r\n" {
		t.Fatalf("EXISTS metadata: %q", got)
	}
	if got := c.do("GET", base+"metadata"); got != "$28\r\n"+meta+"\r\n" {
		t.Fatalf("GET metadata: %q", got)
	}
	if got := c.do("GET", base+"kv_bytes"); got != "$16\r\n0123456789abcdef\r\n" {
		t.Fatalf("GET kv_bytes: %q", got)
	}
	if got := c.do("EXISTS", base+"metadata", base+"kv_bytes", base+"nonemetadata"); got != ":2\r\n" {
		t.Fatalf("EXISTS of three: %q", got)
	}
	if got := c.do("DEL", base+"metadata", base+"kv_bytes"); got != ":2\r\n" {
		t.Fatalf("DEL: %q", got)
	}
	if got := c.do("GET", base+"kv_bytes"); got != "$-1\r\n" {
		t.Fatalf("GET after DEL: %q", got)
	}
	// Pipelined: every reply, in order.
	c.write(append(append(command(strs("PING")...), command(strs("SELECT", "0")...)...), command(strs("GET", key)...)...))
	for _, want := range []string{"+PONG\r\n", "+OK\r\n", "$16\r\n0123456789abcdef\r\n"} {
		if got := c.reply(); got != want {
			t.Fatalf("pipelined: %q, want %q", got, want)
		}
	}
}

// TestRESPOpenMode: no tenants, the default tenant's profile, AUTH
// accepted and ignored, redis-benchmark's start-up CONFIG GETs quiet.
func TestRESPOpenMode(t *testing.T) {
	store := bigStore(t, 64<<20)
	p := respProfile(0)
	p.AnyKey = true
	f := startRESP(t, store, false, func(c *Config) { c.RESPProfiles = map[string]RESPProfile{"default": p} })
	c := dialRESP(t, f.addr)
	for _, step := range [][2]string{
		{"CLIENT SETINFO LIB-NAME redis-py", "+OK\r\n"},
		{"CONFIG GET save", "*2\r\n$4\r\nsave\r\n$0\r\n\r\n"},
		{"CONFIG GET appendonly", "*2\r\n$10\r\nappendonly\r\n$2\r\nno\r\n"},
		{"SET key:000000000042 v", "+OK\r\n"},
		{"AUTH anything", "+OK\r\n"},
		{"GET key:000000000042", "$1\r\nv\r\n"},
		{"HELLO 3", "-ERR unknown command 'HELLO'\r\n"},
	} {
		if got := c.do(strings.Fields(step[0])...); got != step[1] {
			t.Fatalf("%s: %q, want %q", step[0], got, step[1])
		}
	}
}

// TestRESPTransientWriteFaultsDrop: a SET that a transient fault keeps
// from being stored (here the node is read-only: etcd unreachable; also
// no space, the tenant's share or rate) answers exactly +OK, as LMCache's
// MP-mode client needs (it reads five bytes and never resynchronises),
// counts resp_set_dropped, and a later GET misses. The connection stays
// in sync: the next command is answered normally.
func TestRESPTransientWriteFaultsDrop(t *testing.T) {
	store := bigStore(t, 64<<20)
	v := testView(t, 1)
	cl := NewCluster("n1", v)
	f := startRESP(t, store, false, func(c *Config) {
		c.RESPProfiles = map[string]RESPProfile{"default": respProfile(0)}
		c.Cluster = cl
	})
	c := dialRESP(t, f.addr)
	key := mpKey(3)
	cl.SetMode(ControlReadOnly)
	if got := c.do("SET", key, "chunk"); got != "+OK\r\n" {
		t.Fatalf("SET on a read-only node: %q, want exactly +OK", got)
	}
	if n := f.stat(t, "resp_set_dropped"); n != 1 {
		t.Fatalf("resp_set_dropped = %d, want 1", n)
	}
	if got := c.do("GET", key); got != "$-1\r\n" {
		t.Fatalf("GET of a dropped SET: %q", got)
	}
	cl.SetMode(ControlLive)
	if got := c.do("SET", key, "chunk"); got != "+OK\r\n" {
		t.Fatalf("SET once live: %q", got)
	}
	if got := c.do("GET", key); got != "$5\r\nchunk\r\n" {
		t.Fatalf("GET once live: %q", got)
	}
	if n := f.stat(t, "resp_set_dropped"); n != 1 {
		t.Fatalf("resp_set_dropped = %d after a stored SET", n)
	}
}
