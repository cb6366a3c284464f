// Package server serves the gpucache wire protocol (api/wire) from the hot
// tier.
//
// Each connection has two goroutines. The reader decodes one request at a
// time, executes it against the store and queues its response; the writer
// writes queued responses with vectored writes (net.Buffers → writev) and
// releases what they pinned. A semaphore of MaxInFlight slots, taken by the
// reader before it reads a body and returned by the writer after the
// response is on the socket, bounds work in flight per connection: when it is
// full the reader stops reading, which is the backpressure a slow client
// feels. Every read and write has a deadline, so a slow or dead client costs
// only its own goroutines.
//
// Hostile connections (conn.go, connbuf.go, internal/reqbuf): a
// connection must complete HELLO within Config.HelloTimeout, and at most
// Config.MaxUnauthPerAddr connections per source IP may be waiting to;
// from a frame's first byte its header and body must arrive within
// Config.ReadTimeout. Request buffers grow as bytes arrive, never to a
// declared size; the namespace
// and rights of a PUT or FILL_COMMIT are checked before its table is
// read; and what a connection holds above 16 KiB (large bodies and
// tables, large queued GET responses, parked WAITs) comes from one
// server-wide budget, Config.RequestBuffers, of which one tenant holds at
// most its share, Config.TenantRequestBuffers, and connections without a
// session a small pre-session bucket. Accept errors other than a
// closed listener (EMFILE, ENFILE) back off and Serve goes on.
//
// One host copy at most: a PUT payload is read from the socket straight into
// a reserved slab slot, and a GET payload is written from slab memory; the
// pinned views are released only after the write returns.
//
// Errors that leave the stream in sync (unknown opcode or version, malformed
// body, batch too large, identity errors) get a typed error response and the
// connection carries on; the body is skipped. Bad magic and an oversized
// frame close the connection after the error response, because the stream
// cannot be resynchronised without trusting an attacker-chosen length.
//
// HELLO negotiates the session's protocol version: the highest that both
// the client and the server (Config.MaxVersion) speak. Operations of a
// later version than the session's answer UNKNOWN_OPCODE. With
// Config.Cluster the server is a cluster member (cluster.go): version-2
// sessions get WRONG_EPOCH for keys the current view gives to another
// member, MEMBERS answers the view, and the control mode limits what every
// session is served.
//
// ServeRESP accepts RESP2 connections as connections of the server's (the
// same limits and timeouts apply) and hands each to package respserve,
// which runs the RESP session over respserve.Conn (resp.go): the
// connection's waits and request buffers, its session under the guard,
// and the blocks of the hot tier and Config.Lower.
//
// Shutdown stops accepting, lets each connection finish the request it is
// reading and write every queued response, then releases all leases.
package server
