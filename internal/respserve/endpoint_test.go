package respserve

import (
	"bufio"
	"errors"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/gpucache/gpucache/api/identity"
	"github.com/gpucache/gpucache/internal/reqbuf"
	"github.com/gpucache/gpucache/internal/security/acl"
	"github.com/gpucache/gpucache/internal/security/auth"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeConn is the server's side of a RESP connection, in memory: one
// tenant "acme" with secret "s3cret", blocks in a map.
type fakeConn struct {
	br      *bufio.Reader
	open    bool
	tenant  string
	hello   bool
	fails   int
	blocks  map[identity.BlockKey][]byte
	hits    int
	misses  int
	denied  bool // Allowed refuses
	limited bool // Admit refuses
}

var errTooMany = errors.New("too many")

func (f *fakeConn) Await() (bool, error) {
	if _, err := f.br.Peek(1); err != nil {
		return false, err
	}
	return true, nil
}
func (f *fakeConn) ReadFailed(error)     {}
func (f *fakeConn) Panicked(v any) error { panic(v) }
func (f *fakeConn) ReadBuffered(n int, src io.Reader) ([]byte, error) {
	b := make([]byte, n)
	_, err := io.ReadFull(src, b)
	return b, err
}
func (f *fakeConn) ReleaseBuffers() {}
func (f *fakeConn) Open() bool      { return f.open }
func (f *fakeConn) Authenticate(user string, secret []byte) (auth.Session, error, error) {
	if string(secret) == "s3cret" && (user == "" || user == "acme") {
		return auth.Session{Tenant: "acme", Method: auth.MethodBearer}, nil, nil
	}
	f.fails++
	if f.fails >= 3 {
		return auth.Session{}, auth.ErrUnauthenticated, errTooMany
	}
	return auth.Session{}, auth.ErrUnauthenticated, nil
}
func (f *fakeConn) Login(s auth.Session, ns *identity.Namespace) {
	f.tenant, f.hello, f.fails = s.Tenant, true, 0
}
func (f *fakeConn) Tenant() (string, bool) { return f.tenant, f.hello }
func (f *fakeConn) Admit() Admission {
	if f.limited {
		return RateLimited
	}
	return Admitted
}
func (f *fakeConn) Allowed(op, model string, need acl.Right) bool { return !f.denied }
func (f *fakeConn) AllowBytes(int64) bool                         { return true }
func (f *fakeConn) Store(b Block, n int, fill func([]byte) error) (StoreResult, string, error) {
	if _, ok := f.blocks[b.Key]; ok {
		return Exists, "", nil
	}
	buf := make([]byte, n)
	if err := fill(buf); err != nil {
		return 0, "", err
	}
	f.blocks[b.Key] = buf
	return Stored, "", nil
}
func (f *fakeConn) Load(b Block, write func([]byte) error) (bool, error) {
	v, ok := f.blocks[b.Key]
	if !ok {
		return false, nil
	}
	return true, write(v)
}
func (f *fakeConn) Present(b Block) bool { _, ok := f.blocks[b.Key]; return ok }
func (f *fakeConn) Delete(b Block) bool {
	_, ok := f.blocks[b.Key]
	delete(f.blocks, b.Key)
	return ok
}
func (f *fakeConn) Hit(int, bool)      { f.hits++ }
func (f *fakeConn) Miss()              { f.misses++ }
func (f *fakeConn) StoredRemote(int64) {}
func (f *fakeConn) Begin(Timed)        {}
func (f *fakeConn) End(bool)           {}

// serve runs one connection over a pipe: it writes in, reads every reply
// until the endpoint closes the connection, and returns them.
func serve(t *testing.T, e *Endpoint, f *fakeConn, in string) string {
	t.Helper()
	client, server := net.Pipe()
	f.br = bufio.NewReader(server)
	if f.blocks == nil {
		f.blocks = make(map[identity.BlockKey][]byte)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.Serve(server, f.br, f)
	}()
	wrote := make(chan struct{})
	go func() {
		defer close(wrote)
		client.Write([]byte(in)) // fails once the endpoint closed the connection
	}()
	out, _ := io.ReadAll(client)
	client.Close()
	<-done
	<-wrote
	return string(out)
}

func testEndpoint() *Endpoint {
	ns := identity.Namespace{TrustDomain: "cluster-a", ModelID: "m", ConfigRevision: "rev1", TokenizerRevision: "tok1",
		RoPE: "rope:theta=500000", DType: "fp16", Quantization: "none",
		Layout: identity.Layout{Format: "vllm-nhd", TPSize: 1, PPSize: 1, LayerCount: 32, KVHeads: 8, HeadDim: 128, BlockTokens: 16}}
	return New(Config{
		Profiles: map[string]Profile{"acme": {Namespace: ns, VariableLength: true, AnyKey: true},
			"default": {Namespace: ns, VariableLength: true, AnyKey: true}},
		MaxValue: 1 << 20, WriteTimeout: time.Minute,
		Buffers: reqbuf.New(1<<20, 1<<10, 1<<19),
		Logger:  slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
}

func cmd(args ...string) string {
	s := "*" + itoa(len(args)) + "\r\n"
	for _, a := range args {
		s += "$" + itoa(len(a)) + "\r\n" + a + "\r\n"
	}
	return s
}

func itoa(n int) string {
	if n < 10 {
		return string(rune('0' + n))
	}
	return itoa(n/10) + string(rune('0'+n%10))
}

func stat(e *Endpoint, name string) uint64 {
	for _, s := range e.Stats() {
		if s.Name == name {
			return s.Value
		}
	}
	return 1 << 63
}

// TestAuthThenData: data commands need AUTH; a wrong secret is
// -WRONGPASS; after AUTH, SET, GET, EXISTS and DEL act on the blocks the
// Conn holds; QUIT closes.
func TestAuthThenData(t *testing.T) {
	e := testEndpoint()
	f := &fakeConn{}
	got := serve(t, e, f, cmd("GET", "k")+cmd("AUTH", "nope")+cmd("AUTH", "acme", "s3cret")+
		cmd("SET", "k", "value")+cmd("SET", "k", "other")+cmd("GET", "k")+cmd("EXISTS", "k", "j")+
		cmd("DEL", "k")+cmd("GET", "k")+cmd("PING")+cmd("QUIT"))
	want := "-NOAUTH Authentication required.\r\n" +
		"-WRONGPASS invalid username-password pair or user is disabled.\r\n" +
		"+OK\r\n" + "+OK\r\n" + "+OK\r\n" + "$5\r\nvalue\r\n" + ":1\r\n" + ":1\r\n" + "$-1\r\n" + "+PONG\r\n" + "+OK\r\n"
	if got != want {
		t.Fatalf("replies\n%q\nwant\n%q", got, want)
	}
	if f.hits != 1 || f.misses != 1 {
		t.Errorf("%d hits, %d misses", f.hits, f.misses)
	}
	for name, want := range map[string]uint64{"resp_conns_accepted": 1, "resp_commands": 11, "resp_set_exists": 1,
		"resp_errors": 2, "resp_auth_failures": 1} {
		if got := stat(e, name); got != want {
			t.Errorf("%s = %d, want %d", name, got, want)
		}
	}
}

// TestThirdAuthFailureCloses: the error Authenticate returns as end closes
// the connection after its -WRONGPASS.
func TestThirdAuthFailureCloses(t *testing.T) {
	f := &fakeConn{}
	got := serve(t, testEndpoint(), f, cmd("AUTH", "a")+cmd("AUTH", "b")+cmd("AUTH", "c")+cmd("PING"))
	const wp = "-WRONGPASS invalid username-password pair or user is disabled.\r\n"
	if got != wp+wp+wp {
		t.Fatalf("replies %q", got)
	}
}

// TestOpenModeRefusals: in open mode the connection has a session from the
// start; a denied right, a rate-limited read and an unknown command
// answer as documented.
func TestOpenModeRefusals(t *testing.T) {
	f := &fakeConn{open: true, denied: true}
	got := serve(t, testEndpoint(), f, cmd("AUTH", "x")+cmd("SET", "k", "v")+cmd("HELLO", "3")+cmd("QUIT"))
	want := "+OK\r\n" + "-ERR tenant \"default\" lacks write on model \"m\"\r\n" + "-ERR unknown command 'HELLO'\r\n" + "+OK\r\n"
	if got != want {
		t.Fatalf("replies\n%q\nwant\n%q", got, want)
	}
	f = &fakeConn{open: true, limited: true}
	if got := serve(t, testEndpoint(), f, cmd("GET", "k")+cmd("QUIT")); got != "$-1\r\n+OK\r\n" {
		t.Fatalf("rate-limited GET: %q", got)
	}
}
