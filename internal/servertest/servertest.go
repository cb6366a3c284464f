package servertest

import (
	"context"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/gpucache/gpucache/api/wire"
	"github.com/gpucache/gpucache/internal/hot"
	"github.com/gpucache/gpucache/internal/server"
)

// Server is a running server. Stop it with Stop, or let the test's cleanup
// do it.
type Server struct {
	Addr  string
	Srv   *server.Server
	Store *hot.Store

	t      testing.TB
	served chan error
}

// Start runs a server on addr ("127.0.0.1:0" for any free port) with the
// given limits over a 64 MiB store of 16 KiB..1 MiB classes.
func Start(t testing.TB, addr string, limits wire.Limits) *Server {
	t.Helper()
	return StartWith(t, addr, limits, nil)
}

// StartWith is Start with a chance to change the server's config (hooks,
// timeouts) before it starts.
func StartWith(t testing.TB, addr string, limits wire.Limits, mod func(*server.Config)) *Server {
	t.Helper()
	store, err := hot.New(hot.Config{CapacityBytes: 64 << 20, SlabBytes: 4 << 20, MaxClass: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	cfg := server.Config{Store: store, Limits: limits, Name: "test", Logger: slog.New(slog.DiscardHandler)}
	if mod != nil {
		mod(&cfg)
	}
	srv, err := server.New(cfg)
	if err != nil {
		store.Close()
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		store.Close()
		t.Fatal(err)
	}
	s := &Server{Addr: ln.Addr().String(), Srv: srv, Store: store, t: t, served: make(chan error, 1)}
	go func() { s.served <- srv.Serve(ln) }()
	t.Cleanup(s.Stop)
	return s
}

// Stop drains the server and closes its store. It is idempotent.
func (s *Server) Stop() {
	if s.Srv == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Srv.Shutdown(ctx); err != nil {
		s.t.Errorf("shutdown: %v", err)
	}
	if err := <-s.served; err != nil {
		s.t.Errorf("serve: %v", err)
	}
	s.Store.Close()
	s.Srv = nil
}
