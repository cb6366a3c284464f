package client

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// testDeadline is a context that ends shortly before the test binary's
// own timeout: a dial that never returns fails the test with a message
// rather than a panic. It bounds nothing the test waits on by design.
func testDeadline(t *testing.T) context.Context {
	t.Helper()
	ctx := context.Background()
	if d, ok := t.Deadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, d.Add(-5*time.Second))
		t.Cleanup(cancel)
	}
	return ctx
}

// TestDialHTTPPort: --addr pointed at an HTTP server (a node's admin
// listener) fails at once with ErrNotDataPort and a message that says what
// the address is, instead of waiting for the dial timeout: HELLO's first
// line makes the HTTP server answer 400 at once. The dial timeout is an
// hour, so a client that waited for it would never return.
func TestDialHTTPPort(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	_, err := Dial(testDeadline(t), Config{Addr: addr, DialTimeout: time.Hour})
	if !errors.Is(err, ErrNotDataPort) || errors.Is(err, ErrTimeout) {
		t.Fatalf("Dial of an HTTP port: %v, want ErrNotDataPort", err)
	}
	for _, want := range []string{addr + " answered HTTP", "not a gpucache data port", ":9400", ":9401"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}

// TestDialSilentPeer: a peer that accepts the connection and never answers
// HELLO fails with ErrTimeout after the dial timeout, and the error says
// what the client expected there. The peer is an in-memory pipe that
// reads and never writes, so only HELLO can time out.
func TestDialSilentPeer(t *testing.T) {
	const addr = "10.9.9.9:9401"
	peer, local := net.Pipe()
	drained := make(chan struct{})
	go func() { defer close(drained); io.Copy(io.Discard, peer) }()
	defer func() { peer.Close(); <-drained }()
	cfg := Config{Addr: addr, DialTimeout: 50 * time.Millisecond}
	cfg.hooks = &hooks{dial: func(context.Context, string) (net.Conn, error) { return local, nil }}
	_, err := Dial(context.Background(), cfg)
	if !errors.Is(err, ErrTimeout) || errors.Is(err, ErrNotDataPort) {
		t.Fatalf("Dial of a silent peer: %v, want ErrTimeout", err)
	}
	for _, want := range []string{addr + " accepted the connection but did not answer the gpucache HELLO", "data port (usually :9400)"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}
