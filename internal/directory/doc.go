// Package directory coordinates fills within one shard: when many callers
// miss on the same block at once, exactly one of them (the leader) computes
// it and the others (the waiters) wait for a payload-free notice, then read
// the block from the hot tier or recompute it. It is a pure in-memory state
// machine; the server drives it and owns all I/O.
//
// # Flights
//
// A flight is identified by (tenant, namespace digest, block key). The tenant
// is part of the identity on purpose: a caller of another tenant never joins,
// even for an equal key, and gets a fill of its own. A Directory owns exactly
// one shard (a single-node cluster is one shard); every Token carries the
// shard, and a token of another shard is refused with ErrWrongShard, so two
// shards never share a flight.
//
// # State machine of a fill
//
//	none    ── Acquire, miss ──────────────────────▶ live(1); the caller leads
//	live(t) ── Acquire, same tenant ───────────────▶ live(t); waiter appended (FIFO), 1 credit
//	live(t) ── Finish, Publish ────────────────────▶ removed; every waiter: Finished
//	live(t) ── epoch advanced ─────────────────────▶ removed; every waiter: Fenced
//	live(t) ── Fail, Expire, LeaveOwner(leader),
//	           Cancel of an unread Promoted ───────▶ live(t+1); head waiter: Promoted (if a
//	                                                 waiter is left and t < MaxTurns)
//	                                               ▶ removed; every waiter: Failed (otherwise)
//	live(t) ── Close ──────────────────────────────▶ removed; every waiter: Failed
//
// "Epoch advanced" is AdvanceEpoch's sweep, or Acquire, Finish or Fail
// finding the fill older than the current epoch before the sweep does. A
// promoted waiter does not inherit the failure: it is simply the next one to
// try (groupcache's load, pebble's readShard).
//
// A Waiter is in one of three states: waiting (in its fill's FIFO, holding a
// credit), promoted (it got Promoted and leads, or led, a turn) or done. The
// move out of waiting happens exactly once and is exactly when its single
// notice is sent, so every waiter gets exactly one notice (Finished, Failed,
// Fenced or Promoted) and nothing waits forever. Cancel and LeaveOwner
// withdraw a waiting waiter with a Failed notice, so a goroutine blocked on
// C() is released too. Notices never block the directory: the channel has a
// buffer of one and receives exactly one send.
//
// Cancel of a promoted waiter whose Promoted notice is still unread takes
// the notice back (the reader then sees Failed instead) and passes the turn
// on as Fail would. Once the notice has been read the caller is a leader and
// Cancel is a no-op, so `defer w.Cancel()` is always safe.
//
// Tokens are checked against the live fill: the shard, then the epoch (older
// than the current one: ErrStaleEpoch, and a fill still found live under an
// older epoch is fenced on the spot), then fill id, epoch and turn
// (otherwise ErrNotLeader). Turns only grow, so a failed-over leader's token
// can never finish the fill it lost. A token is neither secret nor bound to
// a tenant or session: the caller must accept from a session only tokens it
// handed to that session.
//
// Close fails every waiter and removes every fill; a leader learns of it
// from the ErrClosed of its Finish or Fail, and Acquire answers Denied.
//
// # Credits
//
// Each tenant may have at most JoinCredits waiting waiters in the shard. A
// credit is charged once, when Acquire answers Joined, and released exactly
// once, at the moment the waiter leaves the waiting state: on its notice
// (including Promoted: a leader holds no credit), on Cancel, on LeaveOwner or
// on a fence. So at every instant credits in use == live waiters, per
// tenant. Remaining waiters are never re-charged when their fill is handed
// to a new leader. A tenant out of credits gets Denied; the leader and the
// fill are untouched. Too many live fills (MaxFills) also answers Denied.
//
// # Fills per tenant
//
// A tenant may have at most TenantFills live fills in the shard (default
// half of MaxFills; the daemon sets a fair share of the configured
// tenants). A fill counts for its tenant from the Acquire that starts it
// until it is removed (finished, failed, fenced or closed), once, whatever
// turn it is at: a promotion does not charge it again. Past the cap,
// Acquire of a new fill answers Denied to that tenant only; joining a live
// fill is not a new fill. So one tenant can never deny another tenant's
// fills (or the cold-tier refills that go through them) by filling the
// table: whatever it does, MaxFills - TenantFills slots stay for the others.
//
// # Epochs
//
// The current epoch only grows. AdvanceEpoch(to) requires to > current; it
// stores the new epoch and then fences every fill started under an older
// one. At math.MaxUint64 the epoch cannot advance: ErrEpochOverflow, and
// nothing changes (in-flight fills are kept).
//
// # Deadlines
//
// Each leader's turn has a deadline (FillDeadline from the turn's start, by
// Config.Now). Expire fails over every turn past its deadline; NextDeadline
// tells the caller when to call it, so nothing polls.
//
// # Locks
//
// Fills are striped by key hash over Config.Stripes stripes. Each stripe's
// mu guards its fills map, its deadline heap and every mutable field of the
// fills and waiters in it (a waiter lives in its fill's stripe). The lock
// order is
//
//	Directory.admin (AdvanceEpoch, Close) → stripe.mu → credits.mu (join credits, or fills per tenant)
//
// and no stripe lock is held while taking another. The present callback of
// Acquire runs under the stripe lock (that is what makes the re-check
// atomic with the join), so it must not call back into the Directory. The
// current epoch and the closed flag are atomics written under admin and read
// under the stripe lock, so that a fill is either created before an epoch
// change (and fenced by its sweep) or sees the new epoch. Fill ids are
// allocated from one atomic counter and never reused; a sync.Map from id to
// fill lets a token find its stripe. Counters in Stats are atomics.
package directory
