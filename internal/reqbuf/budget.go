package reqbuf

import (
	"sync"
	"sync/atomic"
	"time"
)

// PreSession is the owner of the charges of a connection without a
// session. A session's tenant is never empty (open mode names
// security.DefaultTenant; authenticated tenants have names).
const PreSession = ""

// Budget is a byte budget shared by every connection's request buffers,
// and within it a share for each owner (a tenant's sessions together, or
// the connections without a session, PreSession). Taking and giving back
// lock one mutex; only requests above Keep do either. Its methods are safe
// for concurrent use.
type Budget struct {
	limit    int64        // the total
	preLimit int64        // the pre-session bucket
	share    atomic.Int64 // one tenant's share
	used     atomic.Int64 // bytes taken by all owners; written under mu
	waiting  atomic.Int32 // requests waiting for bytes
	mu       struct {
		sync.Mutex
		freed chan struct{} // closed (and replaced) when bytes are given back while some wait
		// owners holds the bytes each owner has taken. An owner is removed
		// when it holds none, so the map holds at most one entry per
		// connection holding budget.
		owners map[string]int64
	}
	refused      atomic.Uint64 // requests refused for want of budget
	shareRefused atomic.Uint64 // of them, refused at their owner's share
	waits        atomic.Uint64 // requests that had to wait for budget
}

// New returns a budget of limit bytes in total, preLimit of them for
// PreSession, and share for each tenant.
func New(limit, preLimit, share int64) *Budget {
	b := &Budget{limit: limit, preLimit: preLimit}
	b.share.Store(share)
	b.mu.freed = make(chan struct{})
	b.mu.owners = make(map[string]int64)
	return b
}

// ownerLimit is the share of owner.
func (b *Budget) ownerLimit(owner string) int64 {
	if owner == PreSession {
		return b.preLimit
	}
	return b.share.Load()
}

// tryLocked takes n bytes for owner if they fit both its share and the
// total. atShare reports that the owner's share is what they did not fit.
// Caller holds mu.
func (b *Budget) tryLocked(owner string, n int64) (ok, atShare bool) {
	held := b.mu.owners[owner]
	if held+n > b.ownerLimit(owner) {
		return false, true
	}
	if b.used.Load()+n > b.limit {
		return false, false
	}
	b.mu.owners[owner] = held + n
	b.used.Add(n)
	return true, false
}

// Acquire takes n bytes for owner, waiting up to wait (or until done
// closes) for them. It reports whether it got them and, if not, whether
// the owner's share (rather than the total) was what was short. A charge
// that had to wait is counted in Stats.Waits; a refusal is not counted
// here (see Refused).
func (b *Budget) Acquire(owner string, n int64, wait time.Duration, done <-chan struct{}) (ok, atShare bool) {
	b.mu.Lock()
	ok, atShare = b.tryLocked(owner, n)
	b.mu.Unlock()
	if ok {
		return true, false
	}
	if n > b.ownerLimit(owner) {
		return false, true
	}
	if n > b.limit {
		return false, false
	}
	b.waits.Add(1)
	b.waiting.Add(1)
	defer b.waiting.Add(-1)
	deadline := time.Now().Add(wait)
	t := time.NewTimer(wait)
	defer t.Stop()
	for {
		// Take the channel with the try: bytes given back after it close
		// this channel, since waiting is already counted.
		b.mu.Lock()
		ok, atShare = b.tryLocked(owner, n)
		freed := b.mu.freed
		b.mu.Unlock()
		if ok {
			return true, false
		}
		select {
		case <-freed:
			// A waiter whose wait is over is refused even when bytes
			// came back at the same moment: otherwise which of the
			// waiters due together keeps waiting (and takes what the
			// refused ones give back) would be up to select's coin.
			if !time.Now().Before(deadline) {
				return false, atShare
			}
		case <-t.C:
			return false, atShare
		case <-done:
			return false, atShare
		}
	}
}

// Refused counts a request refused for want of budget, and whether its
// owner's share was what was short.
func (b *Budget) Refused(atShare bool) {
	b.refused.Add(1)
	if atShare {
		b.shareRefused.Add(1)
	}
}

// Release gives n bytes of owner back and wakes the waiters, if any.
func (b *Budget) Release(owner string, n int64) {
	if n <= 0 {
		return
	}
	b.mu.Lock()
	if held := b.mu.owners[owner] - n; held > 0 {
		b.mu.owners[owner] = held
	} else {
		delete(b.mu.owners, owner)
	}
	b.used.Add(-n)
	b.wakeLocked()
	b.mu.Unlock()
}

// wakeLocked wakes the waiters, if any, to try again. Caller holds mu.
func (b *Budget) wakeLocked() {
	if b.waiting.Load() > 0 {
		close(b.mu.freed)
		b.mu.freed = make(chan struct{})
	}
}

// SetShare sets one tenant's share. What tenants hold already is kept;
// the share applies to what they take next. Waiters try again, since a
// larger share may let one through. The caller checks the share
// (CheckShare).
func (b *Budget) SetShare(share int64) {
	b.share.Store(share)
	b.mu.Lock()
	b.wakeLocked()
	b.mu.Unlock()
}

// HeldBy returns the bytes owner holds.
func (b *Budget) HeldBy(owner string) int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.mu.owners[owner]
}

// InUse returns the bytes taken by all owners.
func (b *Budget) InUse() int64 { return b.used.Load() }

// Limit returns the total.
func (b *Budget) Limit() int64 { return b.limit }

// Share returns one tenant's share.
func (b *Budget) Share() int64 { return b.share.Load() }

// Stats are a budget's figures.
type Stats struct {
	InUse           int64  // bytes taken by all owners
	Limit           int64  // the total
	Share           int64  // one tenant's share
	PreSessionHeld  int64  // bytes taken by PreSession
	PreSessionLimit int64  // the pre-session bucket
	Waits           uint64 // charges that had to wait
	Refused         uint64 // requests refused (Refused)
	ShareRefused    uint64 // of them, refused at their owner's share
}

// Stats returns the budget's figures.
func (b *Budget) Stats() Stats {
	return Stats{
		InUse:           b.InUse(),
		Limit:           b.limit,
		Share:           b.share.Load(),
		PreSessionHeld:  b.HeldBy(PreSession),
		PreSessionLimit: b.preLimit,
		Waits:           b.waits.Load(),
		Refused:         b.refused.Load(),
		ShareRefused:    b.shareRefused.Load(),
	}
}
