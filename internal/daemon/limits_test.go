package daemon

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gpucache/gpucache/internal/config"
)

// TestFDLimitRefusesMaxConns: a max_conns (plus the admin cap and the
// reserve) that RLIMIT_NOFILE cannot hold is refused with a message that
// names the settings, the count and the limit.
func TestFDLimitRefusesMaxConns(t *testing.T) {
	cfg := config.Default()
	err := checkFDLimit(cfg, 1024, 2048)
	if !errors.Is(err, ErrFDLimit) {
		t.Fatalf("max_conns 4096 under a 1024 limit: %v", err)
	}
	for _, want := range []string{"max_conns 4096", "admin_max_conns 64", "256 reserved", "need 4416 file descriptors",
		"RLIMIT_NOFILE is 1024 (hard limit 2048)", "ulimit -n"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("message lacks %q: %v", want, err)
		}
	}
	if err := checkFDLimit(cfg, 4416, 4416); err != nil {
		t.Fatalf("exactly enough descriptors refused: %v", err)
	}
	cfg.AdminListen = "off"
	if err := checkFDLimit(cfg, 4352, 4352); err != nil {
		t.Fatalf("admin off still counts admin connections: %v", err)
	}
	cfg.MaxConns = 700
	if err := checkFDLimit(cfg, 1000, 1000); err != nil {
		t.Fatalf("700 connections under a 1000 limit: %v", err)
	}
}

// TestRaiseFDLimit: the soft limit ends at the hard limit.
func TestRaiseFDLimit(t *testing.T) {
	soft, hard, err := raiseFDLimit()
	if err != nil {
		t.Fatal(err)
	}
	if soft != hard {
		t.Fatalf("soft limit %d not raised to the hard limit %d", soft, hard)
	}
}

// TestAdminConnectionsCapped runs a node with the default admin cap (64)
// and opens one connection more: it is closed at once, unserved, while
// the first 64 are served.
func TestAdminConnectionsCapped(t *testing.T) {
	cfg := testConfig()
	cfg.AdminIdleTimeout = time.Hour // held connections stay held however slow the machine
	n := mustStart(t, cfg, Options{})
	defer stopNode(t, n)
	a := n.Addrs()
	const capDefault = 64
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for range capDefault {
		c, err := net.Dial("tcp", a.Admin)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
		if code, err := healthz(c); err != nil || code != http.StatusOK {
			t.Fatalf("healthz on connection %d: %d %v", len(held), code, err)
		}
	}
	extra, err := net.Dial("tcp", a.Admin)
	if err != nil {
		t.Fatal(err)
	}
	defer extra.Close()
	if code, err := healthz(extra); err == nil {
		t.Fatalf("admin connection %d beyond the cap was served: %d", capDefault+1, code)
	}
	if code, err := healthz(held[0]); err != nil || code != http.StatusOK {
		t.Fatalf("healthz on a held connection: %d %v", code, err)
	}
}

// healthz sends GET /healthz on c (keep-alive) and returns the status.
func healthz(c net.Conn) (int, error) {
	if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: gpucached\r\n\r\n"); err != nil {
		return 0, err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

// pipeListener is an in-memory listener for tests in a synctest bubble.
type pipeListener struct {
	conns  chan net.Conn
	closed chan struct{}
	once   sync.Once
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error   { l.once.Do(func() { close(l.closed) }); return nil }
func (l *pipeListener) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 9401} }

func (l *pipeListener) dial() net.Conn {
	client, server := net.Pipe()
	l.conns <- server
	return client
}

// closedSoon reports, on the returned channel, when the server closes c.
func closedSoon(c net.Conn) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		var b [1]byte
		for {
			if _, err := c.Read(b[:]); err != nil {
				return
			}
		}
	}()
	return done
}

func closedNow(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// TestAdminServerCapAndIdle: the admin server closes connections beyond
// admin_max_conns at once, closes idle keep-alive connections after
// admin_idle_timeout, and gives their slots back.
func TestAdminServerCapAndIdle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := config.Default()
		cfg.AdminMaxConns, cfg.AdminIdleTimeout = 2, 30*time.Second
		mux := http.NewServeMux()
		mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok\n") })
		pl := &pipeListener{conns: make(chan net.Conn), closed: make(chan struct{})}
		cl := newCapListener(pl, cfg.AdminMaxConns)
		hs := newAdminServer(mux, cfg)
		served := make(chan error, 1)
		go func() { served <- hs.Serve(cl) }()

		a, b := pl.dial(), pl.dial()
		for _, c := range []net.Conn{a, b} {
			if code, err := healthz(c); err != nil || code != http.StatusOK {
				t.Fatalf("healthz %d %v", code, err)
			}
		}
		aClosed, bClosed := closedSoon(a), closedSoon(b)
		extra := pl.dial()
		extraClosed := closedSoon(extra)
		synctest.Wait()
		if !closedNow(extraClosed) {
			t.Fatal("a connection beyond admin_max_conns is open")
		}
		if cl.rejected.Load() != 1 {
			t.Fatalf("rejected %d, want 1", cl.rejected.Load())
		}
		time.Sleep(cfg.AdminIdleTimeout - time.Millisecond)
		synctest.Wait()
		if closedNow(aClosed) || closedNow(bClosed) {
			t.Fatal("closed before admin_idle_timeout")
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		if !closedNow(aClosed) || !closedNow(bClosed) {
			t.Fatal("idle keep-alive connections open after admin_idle_timeout")
		}
		c := pl.dial() // the slots came back
		if code, err := healthz(c); err != nil || code != http.StatusOK {
			t.Fatalf("healthz after idle close: %d %v", code, err)
		}
		c.Close()
		hs.Shutdown(context.Background())
		if err := <-served; !errors.Is(err, http.ErrServerClosed) {
			t.Fatalf("serve: %v", err)
		}
		for _, c := range []net.Conn{a, b, extra} {
			c.Close()
		}
	})
}
