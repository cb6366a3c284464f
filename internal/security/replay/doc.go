// Package replay rejects replayed mutating requests.
//
// # Contract
//
// Every mutating request carries a Stamp: a timestamp and a 16-byte random
// nonce, covered by the request's authentication (the caller's job: an
// unauthenticated stamp protects nothing). Window.Check(tenant, ts, nonce)
// accepts a request only if
//
//  1. now-Window ≤ ts ≤ now+Window (else ErrStale / ErrFuture); Window is
//     5 minutes by default and also bounds the clock skew tolerated between
//     client and server, either way;
//  2. the tenant has not used the nonce inside the window (else ErrReplay);
//     nonces are per tenant, so two tenants may use the same one;
//  3. bounded memory can still vouch for ts (else ErrWindowFull, below).
//
// An accepted nonce is remembered with its timestamp until that timestamp is
// older than now-Window. After that a replay fails rule 1, so forgetting is
// safe: there is no moment at which a replay is accepted.
//
// # Bounded memory
//
// At most MaxNonces nonces are remembered across all tenants (default
// 1<<20). When full, a request whose ts is not newer than every remembered
// nonce is rejected with ErrWindowFull; otherwise the nonce with the oldest
// timestamp is evicted and that timestamp becomes a floor: requests with
// ts ≤ floor get ErrWindowFull until now-Window passes the floor. Invariant:
// every accepted nonce with a timestamp above the floor and inside the window
// is remembered. The effective window shrinks under a flood; it never lets a
// replay through. The cost is availability: honest requests with old (but
// in-window) timestamps are refused and should be retried with a fresh stamp.
// The floor is global, so one tenant flooding shrinks the window for all;
// the per-tenant rate limiter (internal/security/ratelimit) is the defence.
//
// # Wire encoding
//
//	u64be timestamp, unix nanoseconds, top bit clear
//	16    nonce
//
// Exactly 24 bytes (StampSize). ParseStamp is canonical and reports
// ErrMalformed; FuzzParseStamp covers it.
//
// # Threat model
//
// Protects against: an on-path or logging party re-sending a captured,
// validly authenticated mutating request, within or after the window;
// requests with a far-off clock.
//
// Does not protect against: anyone who can mint authenticated requests;
// reordering or delay of a request inside the window (the first delivery
// wins); replay across server processes or restarts (the nonce memory is
// in-process; a fleet needs a shared store or per-node request
// authentication, and a restart should refuse stamps older than its start
// plus the window, which this package does not do); reads, which carry no
// stamp.
package replay
