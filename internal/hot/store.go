package hot

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/gpucache/gpucache/internal/policy"
)

// entryState is the life-cycle state of an index entry.
type entryState uint8

const (
	stateFree      entryState = iota // on the free list; no key
	stateSentinel                    // LRU list head of one size class
	stateReserved                    // slot handed to a Reservation, not visible
	statePublished                   // committed, visible to Acquire and Lookup
)

// entry is one slot of the index. It holds no Go pointers (see
// TestEntryHasNoPointers): the entries slice is allocated noscan, so the GC
// never walks it however many blocks are cached. Everything an entry refers to
// is a uint32 index: into Store.mu.entries (LRU links), Store.mu.slabs and the
// slab's slots.
type entry struct {
	key    Key       // block key; the index maps it back to this entry
	ns     Namespace // namespace digest the block was written under
	parent Key       // parent block key; zero for the first block of a chain
	tick   uint64    // logical time of the last touch (Store.mu.tick)

	slab   uint32 // index into Store.mu.slabs
	slot   uint32 // slot number inside the slab
	length uint32 // payload bytes
	tokens uint32 // tokens covered by the block (kept for callers' stats)

	prev, next uint32 // LRU links (indices into entries); valid while linked
	// sibPrev, sibNext link the published children of one (parent, ns)
	// into the list headed in Store.mu.kids; 0 ends the list (entry 0 is
	// a sentinel, never a child).
	sibPrev, sibNext uint32
	children         uint32 // published entries whose parent is key, under ns
	pins             uint32 // Views outstanding
	leases           uint32 // leases holding this entry
	gen              uint32 // bumped when the entry is freed; stale refs mismatch
	mark             uint32 // scratch for slab reclaim planning (Store.mu.mark)
	tenant           uint32 // in flight: the charged tenant (Store.mu.tenants), 0 for none
	owner            uint32 // reserved or published: the tenant that wrote it (its DRAM quota), 0 for none

	class  uint8 // size class of the slot
	state  entryState
	linked bool // on the LRU list of its class (published && children == 0 && leases == 0)
}

// pinned reports whether a reader or a lease holds the entry.
func (e *entry) pinned() bool { return e.pins > 0 || e.leases > 0 }

// kidKey names a parent within a namespace, for tracking cached children.
type kidKey struct {
	parent Key
	ns     Namespace
}

// kidList heads the list of published children of one kidKey, linked
// through entry.sibPrev/sibNext. It exists whether or not the parent itself
// is cached, so a parent published after its children finds them.
type kidList struct {
	head uint32 // first child; 0 when none
	n    uint32 // number of children
}

// Store is the hot tier: an off-heap slab arena with a pointer-free index,
// prefix-aware LRU eviction and leases. See the package comment for the
// design; all methods are safe for concurrent use.
type Store struct {
	cfg  Config    // immutable after New
	cl   classes   // immutable after New
	base time.Time // clock origin for lease deadlines; immutable

	mu struct {
		sync.Mutex

		closed bool // guarded by mu; set once by Close

		// The index. entries[0:cl.n] are the LRU sentinels of the size
		// classes; an LRU list holds only eviction candidates (published
		// entries without cached children), MRU at sentinel.next.
		entries     []entry            // guarded by mu
		freeEntries []uint32           // guarded by mu; free entry indices
		index       map[Key]uint32     // guarded by mu; key -> entry (reserved or published)
		kids        map[kidKey]kidList // guarded by mu; cached children per (parent, ns)
		tick        uint64             // guarded by mu; logical LRU clock

		// Slabs. A slab record is reused after its mapping is released.
		slabs      []slab     // guarded by mu
		freeSlabs  []uint32   // guarded by mu; unused slab records
		avail      [][]uint32 // guarded by mu; per class: slabs with free slots
		emptySlabs int        // guarded by mu; mapped slabs with no used slot
		mark       uint32     // guarded by mu; epoch of entry.mark
		plan       []uint32   // guarded by mu; best slab reclaim plan (scratch)
		spare      []uint32   // guarded by mu; scratch
		// budget is the bytes of installed slabs plus mappings in progress
		// plus released mappings not yet munmapped; it never exceeds
		// cfg.CapacityBytes. st.BytesMapped counts installed slabs only.
		budget int64 // guarded by mu
		// remaps counts the mmaps and munmaps in progress (the lock is
		// dropped around them): budget they hold will turn into slots or
		// come back, so a ReserveBlock that finds no space waits on room for
		// them rather than failing.
		remaps int // guarded by mu

		// Tenants holding leases or reservations (tenant.go).
		tenants tenantTable // guarded by mu

		// unpinned, when not nil, is closed (and cleared) by the Release
		// that unpins a block: DeleteWait waits on it for the readers of a
		// block it deletes.
		unpinned chan struct{} // guarded by mu

		// Leases.
		leases    map[LeaseID]leaseRec // guarded by mu
		deadlines leaseHeap            // guarded by mu; may hold released leases
		nextLease LeaseID              // guarded by mu

		st Stats // guarded by mu; counters and gauges

		// tags holds cfg.TagSize bytes per entry index; nil without tags.
		tags []byte // guarded by mu

		// meta holds the policy signals of each entry index (set by
		// ReserveBlock, read at publish); nil without cfg.Policy.
		meta []entryMeta // guarded by mu
		// victim is the state of one policy victim scan (policyhook.go).
		victim victimScan // guarded by mu

		// handed is, in the invariants build, the Views and
		// Reservations handed out and not yet taken back; empty in a
		// release build (invariants.go).
		handed tracker // guarded by mu
	}
	// yieldVictim is s.yieldVictimLocked bound once in New, so a policy
	// victim scan allocates no closure. Immutable after New.
	yieldVictim func(policy.ID) bool
	// room is signalled (with mu) when a remap ends and on Close.
	// Immutable after New.
	room *sync.Cond
	// hooks are test hooks, nil in production; set before first use.
	hooks testHooks
}

// testHooks let tests hold the store at points where it dropped its lock.
type testHooks struct {
	// beforeMap runs in growLocked, without the lock, before the mmap.
	beforeMap func()
	// waitRoom runs, with the lock held, before a ReserveBlock waits for a
	// remap in progress; it must not call into the Store.
	waitRoom func()
	// misuse, in the invariants build, receives a broken ownership
	// contract (errReleasedTwice, errSettledTwice) instead of a panic.
	misuse func(error)
}

// The ownership misuses the invariants build detects. A release build
// ignores a repeated Release, Commit or Abort (see each method).
var (
	errReleasedTwice = errors.New("gpucache/hot: View released twice")
	errSettledTwice  = errors.New("gpucache/hot: Reservation committed or aborted twice")
)

// maxReserveAttempts bounds the find-space loop of one ReserveBlock, on top of
// the slabs one slab of the reserved class replaces (attemptsFor).
const maxReserveAttempts = 64

// New validates cfg (after WithDefaults) and returns an empty store. No slab
// is mapped until a size class needs one.
func New(cfg Config) (*Store, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Store{cfg: cfg, cl: newClasses(cfg), base: time.Now()}
	n := s.cl.n
	s.mu.entries = make([]entry, n, n+1024)
	if cfg.TagSize > 0 {
		s.mu.tags = make([]byte, n*cfg.TagSize, (n+1024)*cfg.TagSize)
	}
	for k := range n {
		s.mu.entries[k] = entry{state: stateSentinel, prev: uint32(k), next: uint32(k), class: uint8(k)}
	}
	s.mu.index = make(map[Key]uint32)
	s.mu.kids = make(map[kidKey]kidList)
	s.mu.avail = make([][]uint32, n)
	s.mu.leases = make(map[LeaseID]leaseRec)
	s.mu.tenants.init(cfg.TenantHoldBytes, cfg.TenantLeases)
	s.mu.st.CapacityBytes = uint64(cfg.CapacityBytes)
	s.room = sync.NewCond(&s.mu.Mutex)
	if cfg.Policy != nil {
		s.mu.meta = make([]entryMeta, n, n+1024)
		s.yieldVictim = s.yieldVictimLocked
	}
	return s, nil
}

// MaxPayload returns the largest payload a Reservation can hold (MaxClass).
func (s *Store) MaxPayload() int { return s.cfg.MaxClass }

// now returns the clock as nanoseconds since s.base.
func (s *Store) now() int64 { return int64(time.Since(s.base)) }

// Close unmaps every slab and drops the index and all leases. Afterwards
// ReserveBlock returns ErrClosed and reads miss. The caller guarantees that no
// View or Reservation is still in use. A second Close returns ErrClosed.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.mu.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	s.mu.closed = true
	var mems [][]byte
	for i := range s.mu.slabs {
		if s.mu.slabs[i].mem != nil {
			mems = append(mems, s.mu.slabs[i].mem)
		}
	}
	s.mu.entries, s.mu.freeEntries, s.mu.index, s.mu.kids, s.mu.meta = nil, nil, nil, nil, nil
	s.mu.slabs, s.mu.freeSlabs, s.mu.avail, s.mu.emptySlabs = nil, nil, nil, 0
	s.mu.leases, s.mu.deadlines, s.mu.budget = nil, nil, 0
	s.mu.tenants.reset()
	st := &s.mu.st
	st.Blocks, st.BytesCached, st.BytesReserved, st.BytesMapped = 0, 0, 0, 0
	st.LeasesActive, st.Pinned, st.InFlight, st.Slabs = 0, 0, 0, 0
	s.room.Broadcast() // a ReserveBlock waiting for a remap sees closed
	s.mu.Unlock()

	var first error
	for _, m := range mems {
		if err := unmapSlab(m); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// bytesLocked returns the payload of e as a slice of slab memory with
// len == cap == e.length.
func (s *Store) bytesLocked(e *entry) []byte {
	sl := &s.mu.slabs[e.slab]
	off := int(e.slot) * sl.slotSize
	end := off + int(e.length)
	return sl.mem[off:end:end]
}

// newEntryLocked returns a free entry index, growing the slice if needed.
// It may move s.mu.entries: callers must not hold an *entry across it.
func (s *Store) newEntryLocked() uint32 {
	if n := len(s.mu.freeEntries); n > 0 {
		idx := s.mu.freeEntries[n-1]
		s.mu.freeEntries = s.mu.freeEntries[:n-1]
		return idx
	}
	s.mu.entries = append(s.mu.entries, entry{})
	if s.mu.meta != nil {
		s.mu.meta = append(s.mu.meta, entryMeta{})
	}
	if t := s.cfg.TagSize; t > 0 {
		s.mu.tags = append(s.mu.tags, make([]byte, t)...)
	}
	return uint32(len(s.mu.entries) - 1)
}

// freeEntryLocked releases the slot and the entry of idx (which must already
// be out of the index and the LRU) and bumps its generation.
func (s *Store) freeEntryLocked(idx uint32) {
	e := &s.mu.entries[idx]
	s.freeSlotLocked(e.slab, e.slot)
	s.mu.st.BytesReserved -= uint64(s.cl.size(int(e.class)))
	s.mu.tenants.disown(e.owner, int64(s.cl.size(int(e.class))))
	gen := e.gen + 1
	*e = entry{gen: gen, state: stateFree}
	if t := s.cfg.TagSize; t > 0 {
		clear(s.mu.tags[int(idx)*t : int(idx+1)*t])
	}
	s.mu.freeEntries = append(s.mu.freeEntries, idx)
}

// lookupRefLocked resolves r to an entry index in state want.
func (s *Store) lookupRefLocked(r ref, want entryState) (uint32, bool) {
	if s.mu.closed || int(r.idx) < s.cl.n || int(r.idx) >= len(s.mu.entries) {
		return 0, false
	}
	e := &s.mu.entries[r.idx]
	if e.gen != r.gen || e.state != want {
		return 0, false
	}
	return r.idx, true
}

// Commit publishes a reserved block: it becomes visible to Acquire and
// Lookup and an eviction candidate. A stale or repeated Commit (or one after
// Abort or Close) is ignored; the invariants build reports a repeated one,
// or one after Abort, as a misuse (a panic). A block whose parent chain would loop back to
// its own key is dropped instead (counted as a PutReject): a cycle would make
// every block on it unevictable.
func (s *Store) Commit(r Reservation) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.settleTicketLocked(r.tk, r.ref, "Commit") {
		return
	}
	idx, ok := s.lookupRefLocked(r.ref, stateReserved)
	if !ok {
		return
	}
	s.mu.st.InFlight--
	s.unholdReservedLocked(idx)
	if s.closesCycleLocked(idx) {
		e := &s.mu.entries[idx]
		delete(s.mu.index, e.key)
		s.mu.st.PutRejects++
		s.freeEntryLocked(idx)
		return
	}
	s.publishLocked(idx)
}

// Abort frees a reserved slot. A stale or repeated Abort is ignored; the
// invariants build reports a repeated one, or one after Commit, as a
// misuse (a panic).
func (s *Store) Abort(r Reservation) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.settleTicketLocked(r.tk, r.ref, "Abort") {
		return
	}
	idx, ok := s.lookupRefLocked(r.ref, stateReserved)
	if !ok {
		return
	}
	s.mu.st.InFlight--
	s.unholdReservedLocked(idx)
	delete(s.mu.index, s.mu.entries[idx].key)
	s.freeEntryLocked(idx)
}

// CommitAcquire publishes a reserved block and pins it in one step, so no
// eviction can come between the two (a refill that must serve what it just
// stored). It reports false if r is stale or the block was dropped.
func (s *Store) CommitAcquire(r Reservation) (View, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.settleTicketLocked(r.tk, r.ref, "CommitAcquire") {
		return View{}, false
	}
	idx, ok := s.lookupRefLocked(r.ref, stateReserved)
	if !ok {
		return View{}, false
	}
	s.mu.st.InFlight--
	s.unholdReservedLocked(idx)
	if s.closesCycleLocked(idx) {
		e := &s.mu.entries[idx]
		delete(s.mu.index, e.key)
		s.mu.st.PutRejects++
		s.freeEntryLocked(idx)
		return View{}, false
	}
	s.publishLocked(idx)
	e := &s.mu.entries[idx]
	if !e.pinned() {
		s.mu.st.Pinned++
	}
	e.pins++
	s.mu.st.Hits++
	v := ref{idx: idx, gen: e.gen}
	return View{Bytes: s.bytesLocked(e), tk: s.viewTicketLocked(v), ref: v}, true
}

// Acquire pins the published block key and returns its bytes. It misses
// (false, no bytes) when the key is absent, in flight, or was written under
// another namespace digest (also counted in IdentityMismatches). A hit
// touches the LRU. The caller must Release the View exactly once.
func (s *Store) Acquire(ns Namespace, key Key) (View, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.closed {
		return View{}, false
	}
	idx, ok := s.mu.index[key]
	if !ok || s.mu.entries[idx].state != statePublished {
		s.mu.st.Misses++
		return View{}, false
	}
	e := &s.mu.entries[idx]
	if e.ns != ns {
		s.mu.st.Misses++
		s.mu.st.IdentityMismatches++
		return View{}, false
	}
	if !e.pinned() {
		s.mu.st.Pinned++
	}
	e.pins++
	s.touchLocked(idx)
	s.mu.st.Hits++
	v := ref{idx: idx, gen: e.gen}
	return View{Bytes: s.bytesLocked(e), tk: s.viewTicketLocked(v), ref: v}, true
}

// Release unpins a View. A zero or stale Release is ignored. A repeated
// Release of one View is a misuse: a release build cannot tell it from
// another reader's and drops that reader's pin; the invariants build
// reports it (a panic) and ignores it.
func (s *Store) Release(v View) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.releaseTicketLocked(v.tk, v.ref) {
		return
	}
	idx, ok := s.lookupRefLocked(v.ref, statePublished)
	if !ok {
		return
	}
	e := &s.mu.entries[idx]
	if e.pins == 0 {
		return
	}
	e.pins--
	if !e.pinned() {
		s.mu.st.Pinned--
		if s.mu.unpinned != nil {
			close(s.mu.unpinned)
			s.mu.unpinned = nil
		}
	}
}

// Delete removes the published block key. busy reports a block that exists
// under ns but is pinned, leased or in flight; it is not removed. A key
// stored under another namespace is reported as absent (false, false).
func (s *Store) Delete(ns Namespace, key Key) (deleted, busy bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.closed {
		return false, false
	}
	idx, ok := s.mu.index[key]
	if !ok {
		return false, false
	}
	e := &s.mu.entries[idx]
	if e.ns != ns {
		return false, false
	}
	if e.state != statePublished || e.pinned() {
		return false, true
	}
	s.removeLocked(idx)
	s.mu.st.Deletes++
	return true, false
}

// DeleteWait is Delete for a block that readers still hold only through
// Views (no lease, no reservation): it waits, until ctx ends, for those
// Views to be released, then deletes it. A server writes a GET's bytes
// straight from the View and releases it just after the write, so a
// client's DELETE right after its GET can otherwise find the block
// pinned. A leased or in-flight block is busy at once, as for Delete.
func (s *Store) DeleteWait(ctx context.Context, ns Namespace, key Key) (deleted, busy bool) {
	for {
		s.mu.Lock()
		if s.mu.closed {
			s.mu.Unlock()
			return false, false
		}
		idx, ok := s.mu.index[key]
		if !ok || s.mu.entries[idx].ns != ns {
			s.mu.Unlock()
			return false, false
		}
		e := &s.mu.entries[idx]
		if e.state != statePublished || e.leases > 0 {
			s.mu.Unlock()
			return false, true
		}
		if e.pins == 0 {
			s.removeLocked(idx)
			s.mu.st.Deletes++
			s.mu.Unlock()
			return true, false
		}
		if s.mu.unpinned == nil {
			s.mu.unpinned = make(chan struct{})
		}
		ch := s.mu.unpinned
		s.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return false, true
		}
	}
}

// Stats returns a snapshot of the counters.
func (s *Store) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.mu.st
	st.LeasesActive = uint64(len(s.mu.leases))
	return st
}

// SetTag sets the tag of a reserved block (Config.TagSize bytes; a shorter
// tag is zero-padded). It reports false for a stale reservation or a store
// without tags.
func (s *Store) SetTag(r Reservation, tag []byte) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.cfg.TagSize
	idx, ok := s.lookupRefLocked(r.ref, stateReserved)
	if !ok || t == 0 || len(tag) > t {
		return false
	}
	dst := s.mu.tags[int(idx)*t : int(idx+1)*t]
	clear(dst[copy(dst, tag):])
	return true
}

// Tag appends the tag of a pinned block to dst. It returns dst unchanged
// for a stale view or a store without tags.
func (s *Store) Tag(v View, dst []byte) []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.cfg.TagSize
	idx, ok := s.lookupRefLocked(v.ref, statePublished)
	if !ok || t == 0 {
		return dst
	}
	return append(dst, s.mu.tags[int(idx)*t:int(idx+1)*t]...)
}

// TagSize returns the configured tag size (0: no tags).
func (s *Store) TagSize() int { return s.cfg.TagSize }
