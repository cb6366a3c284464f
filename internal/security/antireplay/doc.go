// Package antireplay rejects replayed mutating requests.
//
// # Contract
//
// Every mutating request carries a Stamp: a timestamp and a 16-byte random
// nonce, covered by the request's authentication (the caller's job: an
// unauthenticated stamp protects nothing). Window.CheckStamp(tenant, stamp)
// accepts a request only if
//
//  1. now-Window ≤ ts ≤ now+MaxFuture (else ErrStale / ErrFuture). Window
//     (default 5 minutes) bounds delivery delay plus the skew of a client
//     clock that runs behind; MaxFuture (default 5 seconds) bounds the skew
//     of one that runs ahead. The future bound is short because a future
//     stamp is remembered longer (until ts < now-Window) and, being newer
//     than every honest stamp, is what a flood would use;
//  2. the tenant has not used the nonce inside the window (else ErrReplay);
//     nonces are per tenant, so two tenants may use the same one;
//  3. the tenant's bounded memory can still vouch for ts (else
//     ErrWindowFull, below).
//
// An accepted nonce is remembered with its timestamp until that timestamp is
// older than now-Window. After that a replay fails rule 1, so forgetting is
// safe: there is no moment at which a replay is accepted.
//
// # Bounded memory, per tenant
//
// Each tenant has its own nonce memory of at most TenantNonces (default
// 1<<16) and its own floor. When a tenant's memory is full, a request of
// that tenant whose ts is not newer than every nonce it remembers is
// rejected with ErrWindowFull; otherwise its nonce with the oldest timestamp
// is evicted and that timestamp becomes the tenant's floor: that tenant's
// requests with ts ≤ floor get ErrWindowFull until now-Window passes the
// floor. Invariant, per tenant: every accepted nonce with a timestamp above
// the tenant's floor and inside the window is remembered. A flood shrinks
// the flooding tenant's effective window and nobody else's; it never lets a
// replay through. Its cost is that tenant's availability: its honest
// requests with old (but in-window) timestamps are refused and should be
// retried with a fresh stamp.
//
// The total is bounded too: at most MaxTenants = MaxNonces/TenantNonces
// tenants hold nonces at a time (MaxNonces default 1<<20, so 16 tenants and
// about 100 MiB at worst). A tenant's memory is dropped only once it vouches
// for nothing (every nonce aged out and its floor passed); a tenant that
// finds every slot held gets ErrWindowFull. With authentication the daemon
// refuses to start, or to reload, with more tenants than MaxTenants, so that
// never happens to a configured tenant. In open mode (no authentication)
// tenants name themselves, so there is no isolation to keep; the slots bound
// memory only.
//
// # Wire encoding
//
//	u64 timestamp, unix nanoseconds, little-endian, top bit clear
//	16  nonce, as is
//
// Exactly 24 bytes (StampSize). The timestamp is little-endian like every
// integer of the wire protocol (api/wire/doc.go); until ADR 0012 this
// package wrote it big-endian, against the spec. testdata/stamp_golden.json
// pins the bytes. ParseStamp is canonical and reports ErrMalformed;
// FuzzParseStamp covers it. A stamp refused as stale or future whose
// timestamp, read byte-reversed, would have been inside the window also
// wraps ErrByteOrder, so an old client's refusal says why.
//
// # Threat model
//
// Protects against: an on-path or logging party re-sending a captured,
// validly authenticated mutating request, within or after the window;
// requests with a far-off clock; one tenant's stamps (a flood, or stamps
// dated in the future) making another tenant's fresh requests fail.
//
// Does not protect against: anyone who can mint authenticated requests;
// reordering or delay of a request inside the window (the first delivery
// wins); replay across server processes or restarts (the nonce memory is
// in-process; a fleet needs a shared store or per-node request
// authentication, and a restart should refuse stamps older than its start
// plus the window, which this package does not do); reads, which carry no
// stamp.
package antireplay
