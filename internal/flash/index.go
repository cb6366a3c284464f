package flash

// The in-memory index: one entry per block the tier holds, on flash or
// queued, threaded on its tenant's list (oldest first, for quotas) and,
// once written, on its segment's list (for reclaim).

import (
	"strings"

	"github.com/gpucache/gpucache/api/identity"
)

// blockID is a block's identity in the index.
type blockID struct {
	d   identity.NamespaceDigest
	key identity.BlockKey
}

// state is where an entry's bytes are.
type state uint8

const (
	stQueued  state = iota // in buf, waiting for the writer
	stWriting              // in buf and being written (the writer owns the header block of buf)
	stOnDisk               // at (seg, off); buf is nil
)

// entry is a block the tier holds. Every field is guarded by Tier.mu,
// but for buf's bytes: the payload part is immutable once Evicted has
// filled it, and the header part is the writer's while stWriting.
type entry struct {
	id     blockID
	parent identity.BlockKey
	tokens uint32
	tenant string
	n      int64 // payload bytes
	sum    uint32
	state  state
	// dropped: the entry left the index; the writer skips a queued one and
	// forgets a written one.
	dropped bool
	// buf is the record as it will be written: a header block, then the
	// payload padded to align. Set while stQueued or stWriting.
	buf []byte
	seg *segment // stOnDisk: the segment, and the record's offset in it
	off int64
	// wseq is the segment the writer put (or is putting) the record in;
	// a tombstone written after it names it as its target.
	wseq uint64

	tprev, tnext *entry // the tenant's list, oldest first
	sprev, snext *entry // the segment's list
}

// payload is a queued entry's payload.
func (e *entry) payload() []byte { return e.buf[recHeaderSize : recHeaderSize+e.n] }

// header is the entry's record header (its sum as written).
func (e *entry) header() recHeader {
	return recHeader{kind: kindBlock, digest: e.id.d, key: e.id.key, parent: e.parent, tokens: e.tokens,
		length: e.n, sum: e.sum, tenant: e.tenant}
}

// tenantUse is a tenant's live bytes and its entries, oldest first.
type tenantUse struct {
	live       int64
	head, tail *entry
}

func (u *tenantUse) push(e *entry) {
	e.tprev, e.tnext = u.tail, nil
	if u.tail != nil {
		u.tail.tnext = e
	} else {
		u.head = e
	}
	u.tail = e
	u.live += e.n
}

func (u *tenantUse) remove(e *entry) {
	if e.tprev != nil {
		e.tprev.tnext = e.tnext
	} else {
		u.head = e.tnext
	}
	if e.tnext != nil {
		e.tnext.tprev = e.tprev
	} else {
		u.tail = e.tprev
	}
	e.tprev, e.tnext = nil, nil
	u.live -= e.n
}

// item is one thing the writer appends: a block record or a tombstone.
type item struct {
	ticket uint64 // its place in the write order (Flush waits on it)
	rec    *entry // a block record, or nil for a tombstone
	// A tombstone: the block it kills, and the segment holding the
	// record it kills (target), or the entry whose record the writer is
	// writing (victim: its wseq is the target once written).
	id     blockID
	tenant string
	target uint64
	victim *entry

	off int64 // where the writer put it, while a batch is in flight
	sum uint32
}

// size is the bytes the item takes on disk.
func (it *item) size() int64 {
	if it.rec != nil {
		return recHeaderSize + roundUp(it.rec.n)
	}
	return recHeaderSize
}

// dropWhy is why an entry leaves the index.
type dropWhy int

const (
	dropDelete    dropWhy = iota // Delete: tombstone
	dropOverwrite                // Stored of an opaque key held: tombstone
	dropQuota                    // its tenant's quota: tombstone
	dropCorrupt                  // a payload that does not verify: tombstone
	dropReadError                // a read that failed: tombstone
	dropReclaim                  // its segment was reclaimed: the file goes
	dropLost                     // its segment file is gone
	dropShadowed                 // a later record of the same block (restart)
)

// tombstones reports whether a drop for why appends a tombstone, so that
// a restart agrees with the index.
func (w dropWhy) tombstones() bool { return w <= dropReadError }

// insertLocked adds e to the index and its tenant's list.
func (t *Tier) insertLocked(e *entry) {
	t.mu.index[e.id] = e
	u := t.mu.tenantUse[e.tenant]
	if u == nil {
		u = &tenantUse{}
		t.mu.tenantUse[e.tenant] = u
	}
	u.push(e)
	t.mu.live += e.n
}

// dropLocked removes e from the index, releases what it holds and, when
// why calls for it and the record is (or is being) written, queues a
// tombstone. It reports whether it queued one.
func (t *Tier) dropLocked(e *entry, why dropWhy) bool {
	delete(t.mu.index, e.id)
	e.dropped = true
	if u := t.mu.tenantUse[e.tenant]; u != nil {
		u.remove(e)
		if u.head == nil && u.live == 0 {
			delete(t.mu.tenantUse, e.tenant)
		}
	}
	t.mu.live -= e.n
	it := &item{id: e.id, tenant: e.tenant}
	switch e.state {
	case stQueued:
		// Never written: nothing on disk to kill. The writer skips it.
		t.mu.staged -= e.n
		e.buf = nil
		return false
	case stWriting:
		it.victim = e // the writer releases buf once the write ends
	case stOnDisk:
		e.seg.unlink(e)
		it.target = e.seg.seq
	}
	if !why.tombstones() {
		return false
	}
	t.enqueueLocked(it)
	return true
}

// enqueueLocked appends it to the write queue.
func (t *Tier) enqueueLocked(it *item) {
	t.mu.ticket++
	it.ticket = t.mu.ticket
	t.mu.queue = append(t.mu.queue, it)
}

// learnLocked records tenant as d's owner, bounded by maxNamespaces (a
// full map forgets an arbitrary namespace: its next eviction is declined
// as unknown until it is learned again).
func (t *Tier) learnLocked(d identity.NamespaceDigest, tenant string) {
	if tenant == "" || len(tenant) > MaxTenantLen {
		return
	}
	if old, ok := t.mu.tenants[d]; ok && old == tenant {
		return
	}
	if len(t.mu.tenants) >= maxNamespaces {
		for k := range t.mu.tenants {
			delete(t.mu.tenants, k)
			break
		}
	}
	t.mu.tenants[d] = strings.Clone(tenant) // the caller's string may alias its buffer
}

// fitQuotaLocked drops tenant's own oldest blocks until extra more bytes
// fit its quota, and reports how many it dropped.
func (t *Tier) fitQuotaLocked(tenant string, extra int64) int {
	q := t.mu.quotas[tenant]
	u := t.mu.tenantUse[tenant]
	if q <= 0 || u == nil {
		return 0
	}
	n := 0
	for u.head != nil && u.live+extra > q {
		t.dropLocked(u.head, dropQuota)
		n++
	}
	t.st.quotaEvictions.Add(uint64(n))
	return n
}
