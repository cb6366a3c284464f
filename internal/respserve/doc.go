// Package respserve serves the RESP2 endpoint (docs/RESP.md; ADR 0016):
// the Redis protocol subset LMCache's remote tiers use, over the same hot
// tier, cold tier, directory, guard, seals and statistics as the native
// protocol. Package resp holds the wire parser and reply writer; this
// package holds the per-connection session: command dispatch, AUTH,
// profiles, the semantics of GET, SET, EXISTS and DEL, replies, and the
// endpoint's STAT figures.
//
// The server (internal/server) accepts RESP connections, keeps them as
// connections of its own (so MaxConns, MaxUnauthPerAddr, HelloTimeout as
// the AUTH timeout, IdleTimeout, ReadTimeout, WriteTimeout and Shutdown
// apply to them unchanged) and hands each to Endpoint.Serve with a Conn:
// what RESP needs from the core (the connection's waits and request
// buffers, its session and the guard's checks, and the blocks of the hot
// tier and the tiers below it). One goroutine reads a command, executes it
// and writes its reply; replies of pipelined commands are gathered and
// written when nothing more is buffered.
//
// A key K of tenant T is the opaque-key block {Namespace: T's profile
// namespace, Opaque: K}, stored under identity.OpaqueKey(digest, K). A key
// another member of the cluster owns is served by Config.Forwarder.
//
// AUTH binds a RESP connection to a tenant, as HELLO's bearer path does:
// AUTH <tenant> <secret> (the secret must be the named tenant's) or AUTH
// <secret> (the tenant is the secret's). In open mode the connection is
// the default tenant's from the start and AUTH is accepted and ignored.
// A wrong credential answers -WRONGPASS and is audited (tenant named,
// reason, remote address; never the secret or a fingerprint of it); the
// third failure closes the connection.
package respserve
