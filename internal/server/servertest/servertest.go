package servertest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/gpucache/gpucache/api/wire"
	"github.com/gpucache/gpucache/internal/hot"
	"github.com/gpucache/gpucache/internal/server"
)

// Server is a running server. Stop it with Stop, or let the test's cleanup
// do it (Close for one started by Launch).
type Server struct {
	Addr  string
	Srv   *server.Server
	Store *hot.Store
	// Unix is the path of the Unix-socket listener ListenUnix opened; "" until then.
	Unix string

	t      testing.TB // nil when started by Launch
	served chan error
	unix   chan error // ListenUnix's Serve result; nil without one
}

// ListenUnix also serves on a Unix socket at path (registered regions,
// ADR 0026) and records the path in Unix.
func (s *Server) ListenUnix(path string) error {
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return err
	}
	s.Unix, s.unix = path, make(chan error, 1)
	go func() { s.unix <- s.Srv.ServeUnix(ln) }()
	return nil
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
	s, err := Launch(addr, limits, mod)
	if err != nil {
		t.Fatal(err)
	}
	s.t = t
	t.Cleanup(s.Stop)
	return s
}

// Launch is StartWith for code without a testing.TB (a TestMain, for the
// servers Example functions talk to): it returns its error, and the caller
// stops the server with Close.
func Launch(addr string, limits wire.Limits, mod func(*server.Config)) (*Server, error) {
	store, err := hot.New(hot.Config{CapacityBytes: 64 << 20, SlabBytes: 4 << 20, MaxClass: 1 << 20})
	if err != nil {
		return nil, err
	}
	cfg := server.Config{Store: store, Limits: limits, Name: "test", Logger: slog.New(slog.DiscardHandler)}
	if mod != nil {
		mod(&cfg)
	}
	srv, err := server.New(cfg)
	if err != nil {
		store.Close()
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		store.Close()
		return nil, err
	}
	s := &Server{Addr: ln.Addr().String(), Srv: srv, Store: store, served: make(chan error, 1)}
	go func() { s.served <- srv.Serve(ln) }()
	return s, nil
}

// Stop drains the server and closes its store, reporting a failure to the
// test. It is idempotent.
func (s *Server) Stop() {
	if err := s.Close(); err != nil {
		s.t.Error(err)
	}
}

// Close drains the server and closes its store. It is idempotent.
func (s *Server) Close() error {
	if s.Srv == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var errs []error
	if err := s.Srv.Shutdown(ctx); err != nil {
		errs = append(errs, fmt.Errorf("shutdown: %w", err))
	}
	// ErrClosed: Shutdown came before Serve started (a Stop right after
	// Start), as the unix listener's below.
	if err := <-s.served; err != nil && !errors.Is(err, server.ErrClosed) {
		errs = append(errs, fmt.Errorf("serve: %w", err))
	}
	if s.unix != nil {
		if err := <-s.unix; err != nil && !errors.Is(err, server.ErrClosed) {
			errs = append(errs, fmt.Errorf("serve unix: %w", err))
		}
	}
	s.Store.Close()
	s.Srv = nil
	return errors.Join(errs...)
}
