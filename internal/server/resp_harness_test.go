package server

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/gpucache/gpucache/internal/hot"
	"github.com/gpucache/gpucache/internal/security"
	"github.com/gpucache/gpucache/internal/security/antireplay"
	"github.com/gpucache/gpucache/internal/security/audit"
)

// respModel is the model of the test profiles, as LMCache names it.
const respModel = "meta-llama/Llama-3.1-8B"

// respProfile is a test profile: testNamespace's model, values of exactly
// chunk bytes (0: variable length), LMCache keys only.
func respProfile(chunk int) RESPProfile {
	ns := testNamespace("")
	ns.ModelID = respModel
	return RESPProfile{Namespace: ns, ChunkBytes: chunk, VariableLength: chunk == 0}
}

// bigStore is a hot tier that holds 64 MiB blocks (the "large" helper
// raises the default; until then tests set it).
func bigStore(t *testing.T, capacity int64) *hot.Store {
	t.Helper()
	s, err := hot.New(hot.Config{CapacityBytes: capacity, MinClass: 16 << 10, MaxClass: 64 << 20, SlabBytes: 64 << 20,
		TagSize: HotTagSize, TenantHoldBytes: capacity})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

type respFixture struct {
	srv    *Server
	addr   string
	audit  *syncBuffer
	log    *syncBuffer
	closed chan struct{} // one send per connection closed
}

// startRESP runs a RESP listener over store. secure turns on the test
// tenants (acme, beta, ...) with their secrets; mod may change the config.
func startRESP(t *testing.T, store *hot.Store, secure bool, mod func(*Config)) *respFixture {
	t.Helper()
	f := &respFixture{audit: &syncBuffer{}, log: &syncBuffer{}, closed: make(chan struct{}, 64)}
	cfg := Config{Store: store, Logger: slog.New(slog.NewTextHandler(f.log, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Hooks: &Hooks{ConnClosed: func() {
			select {
			case f.closed <- struct{}{}:
			default:
			}
		}}}
	if secure {
		w, err := antireplay.New(antireplay.Config{Window: 5 * time.Minute, MaxNonces: 1024, TenantNonces: 256})
		if err != nil {
			t.Fatal(err)
		}
		g, err := security.NewGuard(testPolicy(t, testTenants(), nil), w, audit.New(f.audit), nil)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Guard = g
	}
	if mod != nil {
		mod(&cfg)
	}
	srv, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f.srv, f.addr = srv, ln.Addr().String()
	served := make(chan error, 1)
	go func() { served <- srv.ServeRESP(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		// A test that ends before the Serve goroutine ran shuts the
		// server down first: Serve then answers ErrClosed at once.
		if err := <-served; err != nil && !errors.Is(err, ErrClosed) {
			t.Errorf("serve: %v", err)
		}
	})
	return f
}

// stat returns one of the server's counters.
func (f *respFixture) stat(t *testing.T, name string) uint64 {
	t.Helper()
	for _, e := range f.srv.Stats() {
		if e.Name == name {
			return e.Value
		}
	}
	t.Fatalf("no stat %q", name)
	return 0
}

// respClient speaks raw RESP.
type respClient struct {
	t  *testing.T
	nc net.Conn
	br *bufio.Reader
}

func dialRESP(t *testing.T, addr string) *respClient {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	nc.SetDeadline(time.Now().Add(60 * time.Second))
	return &respClient{t: t, nc: nc, br: bufio.NewReaderSize(nc, 64<<10)}
}

// command encodes a RESP array of bulk strings, as the C++ client does.
func command(args ...[]byte) []byte {
	var b []byte
	b = append(b, '*')
	b = strconv.AppendInt(b, int64(len(args)), 10)
	b = append(b, "\r\n"...)
	for _, a := range args {
		b = append(b, '$')
		b = strconv.AppendInt(b, int64(len(a)), 10)
		b = append(b, "\r\n"...)
		b = append(b, a...)
		b = append(b, "\r\n"...)
	}
	return b
}

func strs(ss ...string) [][]byte {
	out := make([][]byte, len(ss))
	for i, s := range ss {
		out[i] = []byte(s)
	}
	return out
}

func (c *respClient) write(b []byte) {
	c.t.Helper()
	if _, err := c.nc.Write(b); err != nil {
		c.t.Fatalf("write: %v", err)
	}
}

// do sends one command and reads its whole reply, raw.
func (c *respClient) do(args ...string) string {
	c.t.Helper()
	c.write(command(strs(args...)...))
	return c.reply()
}

// reply reads one reply, raw bytes.
func (c *respClient) reply() string {
	c.t.Helper()
	r, err := c.replyErr()
	if err != nil {
		c.t.Fatal(err)
	}
	return r
}

// replyErr reads one reply; for goroutines other than the test's.
func (c *respClient) replyErr() (string, error) {
	var out bytes.Buffer
	if err := readReply(c.br, &out); err != nil {
		return "", fmt.Errorf("read reply: %v (so far %q)", err, out.String())
	}
	return out.String(), nil
}

func readReply(br *bufio.Reader, out *bytes.Buffer) error {
	line, err := br.ReadSlice('\n')
	if err != nil {
		return err
	}
	out.Write(line)
	if len(line) < 3 || line[len(line)-2] != '\r' {
		return fmt.Errorf("bad reply line %q", line)
	}
	n, _ := strconv.Atoi(string(line[1 : len(line)-2]))
	switch line[0] {
	case '+', '-', ':':
		return nil
	case '$':
		if n < 0 {
			return nil
		}
		_, err := io.CopyN(out, br, int64(n)+2)
		return err
	case '*':
		for range n {
			if err := readReply(br, out); err != nil {
				return err
			}
		}
		return nil
	}
	return fmt.Errorf("bad reply type %q", line[0])
}

// expectClosed reads until the server closes the connection.
func (c *respClient) expectClosed() {
	c.t.Helper()
	if b, err := io.ReadAll(c.br); err != nil {
		c.t.Fatalf("want close, got %v after %q", err, b)
	} else if len(b) != 0 {
		c.t.Fatalf("want close, got %q", b)
	}
}
