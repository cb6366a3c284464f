package server

import (
	"errors"
	"fmt"
	"runtime/debug"
)

// A panic in a connection's goroutine (the native reader or writer, the
// RESP loop) ends that connection, not the process (ADR 0022): the
// goroutine recovers it at its top, counts it in conn_panics, logs it (the
// first with its stack), closes the socket, and the connection's usual
// teardown releases what it holds. The invariants build re-panics, so a
// test or soak built with -tags invariants stops at the first one.

// errConnPanic ends a connection whose goroutine panicked.
var errConnPanic = errors.New("gpucache/server: connection ended by a panic (conn_panics)")

// panicked handles the panic v recovered at the top of a connection
// goroutine (where names it): it counts and logs it, closes the socket and
// returns errConnPanic to end the connection. The invariants build
// re-panics instead of returning.
func (c *conn) panicked(where string, v any) error {
	s := c.s
	n := s.stats.connPanics.Add(1)
	attrs := []any{"goroutine", where, "remote", c.nc.RemoteAddr(), "tenant", c.tenant,
		"panic", fmt.Sprint(v), "conn_panics", n}
	if s.panicLogged.CompareAndSwap(false, true) {
		attrs = append(attrs, "stack", string(debug.Stack())) // still the panicking goroutine's stack
	}
	s.log.Error("a connection goroutine panicked; closing that connection and serving the others (a bug: report it with the first such log line's stack)", attrs...)
	c.nc.Close()
	if repanicConnPanics {
		panic(v)
	}
	return errConnPanic
}
