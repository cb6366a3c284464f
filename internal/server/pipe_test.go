package server

import (
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"syscall"
	"testing"

	"github.com/gpucache/gpucache/api/wire"
	"github.com/gpucache/gpucache/internal/hot"
)

// pipeListener is an in-memory net.Listener for tests that run inside a
// testing/synctest bubble (real sockets cannot): Dial hands the server one
// end of a net.Pipe, and Fail makes the next Accept return an error.
type pipeListener struct {
	accepts chan acceptResult
	closed  chan struct{}
	once    sync.Once
}

type acceptResult struct {
	c   net.Conn
	err error
}

func newPipeListener() *pipeListener {
	return &pipeListener{accepts: make(chan acceptResult), closed: make(chan struct{})}
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case r := <-l.accepts:
		return r.c, r.err
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

func (l *pipeListener) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 9400} }

// Dial connects from the source address ip (the server sees it as the
// remote address) and returns the client's end.
func (l *pipeListener) Dial(t *testing.T, ip net.IP) net.Conn {
	t.Helper()
	client, server := net.Pipe()
	select {
	case l.accepts <- acceptResult{c: addrConn{Conn: server, remote: &net.TCPAddr{IP: ip, Port: 40000}}}:
	case <-l.closed:
		t.Fatal("dial: listener closed")
	}
	t.Cleanup(func() { client.Close() })
	return client
}

// Fail makes one Accept return err.
func (l *pipeListener) Fail(err error) { l.accepts <- acceptResult{err: err} }

// addrConn gives a pipe end a TCP remote address.
type addrConn struct {
	net.Conn
	remote net.Addr
}

func (c addrConn) RemoteAddr() net.Addr { return c.remote }

// bubbleServer is a server on a pipeListener, for tests inside a synctest
// bubble. Stop shuts it down; call it before the bubble ends.
type bubbleServer struct {
	srv    *Server
	store  *hot.Store
	ln     *pipeListener
	served chan error
}

func startBubble(t *testing.T, mod func(*Config)) *bubbleServer {
	t.Helper()
	store, err := hot.New(hot.Config{CapacityBytes: 32 << 20, MinClass: 16 << 10, MaxClass: 1 << 20, SlabBytes: 2 << 20})
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Store: store, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if mod != nil {
		mod(&cfg)
	}
	srv, err := New(cfg)
	if err != nil {
		store.Close()
		t.Fatal(err)
	}
	b := &bubbleServer{srv: srv, store: store, ln: newPipeListener(), served: make(chan error, 1)}
	go func() { b.served <- srv.Serve(b.ln) }()
	return b
}

// Stop shuts the server down and checks Serve ended cleanly.
func (b *bubbleServer) Stop(t *testing.T) {
	t.Helper()
	if err := b.srv.Shutdown(t.Context()); err != nil {
		t.Errorf("shutdown: %v", err)
	}
	if err := <-b.served; err != nil {
		t.Errorf("serve: %v", err)
	}
	b.store.Close()
}

// pipeRaw wraps the client end of a pipe in a rawConn. Pipes are
// synchronous: a write returns once the server has read it.
func pipeRaw(t *testing.T, nc net.Conn) *rawConn { return &rawConn{t: t, nc: nc} }

// pipeHello opens a session for tenant over a new pipe from ip.
func (b *bubbleServer) pipeHello(t *testing.T, ip net.IP, tenant string) *rawConn {
	t.Helper()
	c := pipeRaw(t, b.ln.Dial(t, ip))
	req := wire.HelloRequest{MinVersion: 1, MaxVersion: 1, Tenant: tenant, Client: "test"}
	h, body := c.roundTrip(wire.OpHello, req.AppendTo(nil))
	if h.Flags&wire.FlagError != 0 {
		t.Fatalf("hello failed: %v", decodeErr(t, body))
	}
	return c
}

// closedByServer reports whether the server has closed the client end c:
// it reads in the background and reports on the returned channel, which
// is closed when the read fails (EOF or closed pipe).
func closedByServer(c net.Conn) <-chan struct{} {
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

// isClosed reports whether ch is closed now.
func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// errEMFILE is the error accept returns when the process is out of file
// descriptors: not timeout-like.
var errEMFILE = &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", syscall.EMFILE)}
