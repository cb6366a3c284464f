package server

import (
	"bufio"
	"io"
	"log/slog"
	"net"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"

	"go.uber.org/goleak"

	"github.com/gpucache/gpucache/api/wire"
	"github.com/gpucache/gpucache/internal/admin"
)

// TestConnPanicClosesOnlyThatConnection: a panic injected in the native
// reader (a handler, or a response it writes itself), the native writer
// or the RESP loop closes that connection only: conn_panics is 1 in STAT and on /metrics, the log has
// the panic with its stack, another client is served, and nothing is left
// running.
func TestConnPanicClosesOnlyThatConnection(t *testing.T) {
	defer goleak.VerifyNone(t)
	for where, goroutine := range map[string]string{"reader": "reader", "inline-write": "reader", "writer": "writer", "resp": "resp"} {
		t.Run(where, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var armed atomic.Bool
				boom := func() {
					if armed.CompareAndSwap(true, false) {
						panic("injected for the test")
					}
				}
				log := &syncBuffer{}
				b := startBubble(t, func(c *Config) {
					c.Logger = slog.New(slog.NewTextHandler(log, nil))
					c.Hooks = &Hooks{}
					switch where {
					case "reader", "resp":
						c.Hooks.Handling = func(string) { boom() }
					case "writer", "inline-write":
						c.Hooks.BeforeWrite = boom
					}
				})
				respLn := newPipeListener()
				respServed := make(chan error, 1)
				go func() { respServed <- b.srv.ServeRESP(respLn) }()
				defer func() {
					if err := <-respServed; err != nil {
						t.Errorf("ServeRESP: %v", err)
					}
				}()
				defer b.Stop(t) // closes respLn too

				var victim net.Conn
				switch where {
				case "reader":
					c := b.pipeHello(t, srcA, "acme")
					armed.Store(true)
					c.send(wire.OpPing, []byte("boom"))
					victim = c.nc
				case "inline-write":
					// One request alone: the reader writes its response.
					c := b.pipeHello(t, srcA, "acme")
					armed.Store(true)
					c.send(wire.OpPing, []byte("boom"))
					victim = c.nc
				case "writer":
					c := b.pipeHello(t, srcA, "acme")
					armed.Store(true)
					// Two requests in one write: the first response is
					// queued behind the second request, so the writer
					// goroutine writes it (and panics).
					ping := nativeFrame(wire.OpPing, 0, []byte("one"))
					c.writeRaw(append(ping, nativeFrame(wire.OpPing, 0, []byte("two"))...))
					victim = c.nc
				case "resp":
					victim = respLn.Dial(t, srcA)
					armed.Store(true)
					victim.Write(command(strs("PING")...))
				}
				if rest, err := io.ReadAll(victim); err != nil && err != io.ErrClosedPipe || len(rest) != 0 {
					t.Fatalf("the panicking connection: read %q, %v; want it closed with nothing written", rest, err)
				}

				if n := statValue(b.srv, "conn_panics"); n != 1 {
					t.Fatalf("STAT conn_panics %d, want 1", n)
				}
				rec := httptest.NewRecorder()
				admin.New(b.srv.Stats).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
				if !strings.Contains(rec.Body.String(), "\ngpucache_conn_panics_total 1\n") {
					t.Fatalf("/metrics has no gpucache_conn_panics_total 1:\n%s", grepLines(rec.Body.String(), "panic"))
				}
				out := log.String()
				if !strings.Contains(out, "goroutine="+goroutine) || !strings.Contains(out, "injected for the test") || !strings.Contains(out, "stack=") {
					t.Fatalf("log: %s", out)
				}

				// Another client is served, on both listeners.
				other := b.pipeHello(t, srcB, "beta")
				if h, body := other.roundTrip(wire.OpPing, []byte("still serving")); h.Flags&wire.FlagError != 0 || string(body) != "still serving" {
					t.Fatalf("another client's PING: %v %q", h, body)
				}
				rc := respLn.Dial(t, srcB)
				go rc.Write(command(strs("PING")...))
				if line, err := bufio.NewReader(rc).ReadString('\n'); err != nil || line != "+PONG\r\n" {
					t.Fatalf("another RESP client's PING: %q %v", line, err)
				}
				if n := statValue(b.srv, "conn_panics"); n != 1 {
					t.Fatalf("conn_panics %d after other clients, want 1", n)
				}
			})
		})
	}
}

// grepLines returns the lines of s that contain substr.
func grepLines(s, substr string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
