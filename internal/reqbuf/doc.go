// Package reqbuf is the request-buffer budget (ADR 0013): the bytes the
// server's connections may hold, above what each keeps for itself, to
// read request bodies, decode request tables, queue large responses and
// park WAITs.
//
// A connection reads every request body it must hold (control bodies, and
// the tables of PUT and FILL_COMMIT, whose payloads go straight into slab
// memory) into one scratch buffer. The buffer grows as bytes arrive,
// doubling from what it holds up to the declared size, never sized by a
// length the client merely declares. The first Keep bytes of it are the
// connection's own (part of its fixed cost); every byte above that
// (BufCost), and the decoded form of a table larger than Keep
// (TableDecodeCost), is charged to one server-wide Budget before it is
// allocated. A GET response of many keys (ResponseCost) and a parked WAIT
// (WaitCost) are charged to the same budget until they are answered. The
// server's connections charge it (internal/server, reqbuf.go); this
// package holds the budget and the cost of each thing charged.
//
// # Totals and shares
//
// Within the total, Budget.Limit, each owner has a share: a tenant's
// sessions together may hold at most the tenant share (Budget.Share,
// Config.TenantRequestBuffers), and connections that have no session yet
// (owner PreSession: HELLO and PING bodies before HELLO succeeds) at most
// the pre-session bucket, PreSessionBuffers: a few of the largest bodies
// such a connection may send. (A bucket of its own, rather than the
// per-address cap on unauthenticated connections, bounds them: source
// addresses are many, so that cap bounds no total. A HELLO is too small
// to need budget, so a full bucket delays no session.) A charge must fit
// its owner's share and the total. The default tenant share, FairShare,
// is what the pre-session bucket leaves of the total divided among the
// tenants (by 2 in open mode), and never less than MaxRequestCost, so
// every tenant can always make its largest request. Shares that sum to at
// most the total make it unexhaustable by one tenant: a tenant at its
// share leaves the others theirs.
//
// # Waiting
//
// A charge that does not fit (its owner at its share, or the total spent)
// waits, in Budget.Acquire, up to a bounded wait (Config.BufferWait) for
// bytes to be given back, then is refused; the server answers the request
// RATE_LIMITED (retry after that wait) and skips the rest of its body, so
// the stream stays in sync. A charge larger than its owner's share or the
// total is refused at once. A waiter whose wait is over is refused even
// when bytes come back at the same instant, so waiters due together are
// all refused rather than some taking what the others give back. The
// budget thus bounds the memory all request buffers take, whatever the
// clients declare or how slowly they send, and a tenant's share bounds
// what it can take from the others.
package reqbuf
