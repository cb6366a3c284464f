package hot

import (
	"fmt"
	"syscall"
)

// slab is one anonymous mapping carved into equal slots of one size class.
// The payload bytes live in mem, outside the Go heap; the GC sees one slice
// header per slab, never per block. A slab record is reused (mem == nil
// while unused).
type slab struct {
	mem      []byte   // the mapping; nil when the record is unused
	class    int      // size class of the slots
	slotSize int      // bytes per slot
	free     []uint32 // free slot numbers, a stack (slot 0 pops first)
	owner    []uint32 // entry index per slot; 0 when free (0 is a sentinel)
	inAvail  bool     // listed in Store.mu.avail[class]
	// newest bounds from above the ticks of the slab's blocks (raised on
	// publish and touch, reset when the slab is carved), so a slab holding
	// a recently used block is skipped without looking at its slots.
	newest uint64
}

// used returns the number of slots held by entries.
func (sl *slab) used() int { return len(sl.owner) - len(sl.free) }

// mapSlab maps size bytes of anonymous private memory and faults it in as
// mode says. The memory is not part of the Go heap.
func mapSlab(size int, mode Prefault) ([]byte, error) {
	flags := syscall.MAP_ANON | syscall.MAP_PRIVATE
	if mode == PrefaultPopulate {
		flags |= syscall.MAP_POPULATE
	}
	mem, err := syscall.Mmap(-1, 0, size, syscall.PROT_READ|syscall.PROT_WRITE, flags)
	if err != nil {
		return nil, fmt.Errorf("mmap %d bytes: %w", size, err)
	}
	if mode == PrefaultHugePage {
		// Best effort: THP may be disabled, which leaves 4 KiB pages. One
		// write per 4 KiB page is correct whatever the alignment of the
		// mapping; inside an aligned 2 MiB range the first write faults a
		// huge page and the other 511 are plain stores.
		_ = syscall.Madvise(mem, syscall.MADV_HUGEPAGE)
		for off := 0; off < len(mem); off += pageBytes {
			mem[off] = 0
		}
	}
	return mem, nil
}

// unmapSlab releases a mapping made by mapSlab.
func unmapSlab(mem []byte) error {
	if err := syscall.Munmap(mem); err != nil {
		return fmt.Errorf("gpucache/hot: munmap %d bytes: %w", len(mem), err)
	}
	return nil
}

// takeSlotLocked pops a free slot of class k.
func (s *Store) takeSlotLocked(k int) (sid, slot uint32, ok bool) {
	av := s.mu.avail[k]
	for len(av) > 0 {
		id := av[len(av)-1]
		sl := &s.mu.slabs[id]
		n := len(sl.free)
		if n == 0 {
			av = av[:len(av)-1]
			sl.inAvail = false
			continue
		}
		if sl.used() == 0 {
			s.mu.emptySlabs--
		}
		slot = sl.free[n-1]
		sl.free = sl.free[:n-1]
		s.mu.avail[k] = av
		return id, slot, true
	}
	s.mu.avail[k] = av
	return 0, 0, false
}

// freeSlotLocked returns a slot to its slab.
func (s *Store) freeSlotLocked(sid, slot uint32) {
	sl := &s.mu.slabs[sid]
	sl.owner[slot] = 0
	sl.free = append(sl.free, slot)
	if sl.used() == 0 {
		s.mu.emptySlabs++
	}
	if !sl.inAvail {
		sl.inAvail = true
		s.mu.avail[sl.class] = append(s.mu.avail[sl.class], sid)
	}
}

// carveLocked (re)initialises the empty slab sid as slots of class k and
// lists it as available.
func (s *Store) carveLocked(sid uint32, k int) {
	sl := &s.mu.slabs[sid]
	sl.class = k
	sl.slotSize = s.cl.size(k)
	sl.newest = 0
	n := len(sl.mem) / sl.slotSize
	if cap(sl.owner) >= n {
		sl.owner = sl.owner[:n]
		clear(sl.owner)
	} else {
		sl.owner = make([]uint32, n)
	}
	if cap(sl.free) >= n {
		sl.free = sl.free[:n]
	} else {
		sl.free = make([]uint32, n)
	}
	for i := range n {
		sl.free[i] = uint32(n - 1 - i)
	}
	sl.inAvail = true
	s.mu.avail[k] = append(s.mu.avail[k], sid)
}

// growLocked maps a new slab for class k. The budget is taken before the
// lock is dropped for the mmap, so concurrent growth never exceeds
// CapacityBytes; the lock is held again on return. While the mmap runs it
// counts in s.mu.remaps, so a concurrent ReserveBlock that finds no room waits
// for it instead of failing. After a concurrent Close the new mapping is
// released and the caller sees s.mu.closed.
func (s *Store) growLocked(k int) error {
	sz := s.cl.slabSize(k)
	s.mu.budget += int64(sz)
	s.mu.remaps++
	s.mu.Unlock()
	if h := s.hooks.beforeMap; h != nil {
		h()
	}
	mem, err := mapSlab(sz, s.cfg.Prefault)
	s.mu.Lock()
	defer s.remapDoneLocked()
	if err != nil {
		s.mu.budget -= int64(sz)
		return fmt.Errorf("%w: %v", ErrNoSpace, err)
	}
	if s.mu.closed {
		s.mu.Unlock()
		_ = unmapSlab(mem)
		s.mu.Lock()
		return nil
	}
	var sid uint32
	if n := len(s.mu.freeSlabs); n > 0 {
		sid = s.mu.freeSlabs[n-1]
		s.mu.freeSlabs = s.mu.freeSlabs[:n-1]
	} else {
		s.mu.slabs = append(s.mu.slabs, slab{})
		sid = uint32(len(s.mu.slabs) - 1)
	}
	s.mu.slabs[sid].mem = mem
	s.carveLocked(sid, k)
	s.mu.emptySlabs++
	s.mu.st.BytesMapped += uint64(sz)
	s.mu.st.Slabs++
	return nil
}

// findEmptySlabLocked returns a mapped slab of another class than k with no
// used slot.
func (s *Store) findEmptySlabLocked(k int) (uint32, bool) {
	for i := range s.mu.slabs {
		sl := &s.mu.slabs[i]
		if sl.mem != nil && sl.class != k && sl.used() == 0 {
			return uint32(i), true
		}
	}
	return 0, false
}

// convertSlabLocked hands the empty slab sid over to class k. When the
// mapping has the size class k needs it is re-carved in place (no munmap, no
// fresh page faults). Otherwise it is munmapped with the lock dropped, and
// its budget is returned, so the caller's next growLocked can map a slab of
// the right size.
func (s *Store) convertSlabLocked(sid uint32, k int) {
	sl := &s.mu.slabs[sid]
	if sl.inAvail {
		av := s.mu.avail[sl.class]
		for i, id := range av {
			if id == sid {
				av = append(av[:i], av[i+1:]...)
				break
			}
		}
		s.mu.avail[sl.class] = av
		sl.inAvail = false
	}
	s.mu.st.SlabReclaims++
	if len(sl.mem) == s.cl.slabSize(k) {
		s.carveLocked(sid, k)
		return
	}
	mem := sl.mem
	sl.mem, sl.owner, sl.free = nil, nil, nil
	s.mu.freeSlabs = append(s.mu.freeSlabs, sid)
	s.mu.emptySlabs--
	s.mu.st.BytesMapped -= uint64(len(mem))
	s.mu.st.Slabs--
	s.mu.remaps++
	s.mu.Unlock()
	err := unmapSlab(mem)
	s.mu.Lock()
	if err == nil {
		s.mu.budget -= int64(len(mem))
	}
	s.remapDoneLocked()
}

// remapDoneLocked ends a remap (an mmap or munmap done with the lock
// dropped) and wakes the Reserves waiting for room.
func (s *Store) remapDoneLocked() {
	s.mu.remaps--
	s.room.Broadcast()
}

// victimSlabsPerClass bounds the slabs pickVictimSlabLocked examines per
// size class.
const victimSlabsPerClass = 2

// reclaimExtra bounds the cached descendants outside a slab that one slab
// reclaim may evict (besides the slab's own blocks).
const reclaimExtra = 4096

// pickVictimSlabLocked chooses a slab of another class than k to empty for
// class k, and leaves its eviction plan in s.mu.plan. For each other class it
// walks the LRU list from the tail over the unpinned candidates touched
// before olderThan and examines their slabs (up to victimSlabsPerClass
// distinct slabs within EvictScan entries). A slab qualifies when its whole
// plan (see planSlabLocked) is evictable and older than olderThan; among
// those it keeps the one reached through the oldest candidate, so slabs move
// between classes in roughly global LRU order and a reclaim never evicts a
// block more recent than the one class k would evict itself. The work is
// bounded by the number of classes times (EvictScan + victimSlabsPerClass *
// (slots per slab + reclaimExtra)).
func (s *Store) pickVictimSlabLocked(k int, olderThan uint64) (uint32, bool) {
	es := s.mu.entries
	best, bestTick, found := uint32(0), olderThan, false
	var seen [victimSlabsPerClass]uint32
	for c := range s.cl.n {
		if c == k {
			continue
		}
		nseen := 0
		sent := uint32(c)
		p := es[sent].prev
	scan:
		for i := 0; p != sent && i < s.cfg.EvictScan && nseen < len(seen); i, p = i+1, es[p].prev {
			if es[p].pinned() {
				continue
			}
			tick := es[p].tick
			if tick >= bestTick {
				break // the rest of this list is newer
			}
			sid := es[p].slab
			for _, id := range seen[:nseen] {
				if id == sid {
					continue scan
				}
			}
			seen[nseen] = sid
			nseen++
			if s.mu.slabs[sid].newest >= olderThan {
				continue
			}
			plan, ok := s.planSlabLocked(sid, olderThan, s.mu.spare[:0])
			if ok {
				s.mu.spare, s.mu.plan = s.mu.plan, plan
				best, bestTick, found = sid, tick, true
			} else {
				s.mu.spare = plan
			}
		}
	}
	return best, found
}

// nextMarkLocked starts a new entry.mark epoch.
func (s *Store) nextMarkLocked() uint32 {
	s.mu.mark++
	if s.mu.mark == 0 { // wrapped: forget every old mark
		for i := range s.mu.entries {
			s.mu.entries[i].mark = 0
		}
		s.mu.mark = 1
	}
	return s.mu.mark
}

// planSlabLocked lists (into out) the blocks of slab sid and all of their
// cached descendants, wherever those live: evicting the slab's blocks
// without orphaning a cached child means evicting those first. ok is false
// when any of them is in flight, pinned, leased or touched at or after
// olderThan, or when the descendants outside the slab exceed reclaimExtra.
func (s *Store) planSlabLocked(sid uint32, olderThan uint64, out []uint32) ([]uint32, bool) {
	sl := &s.mu.slabs[sid]
	es := s.mu.entries
	m := s.nextMarkLocked()
	evictable := func(idx uint32) bool {
		e := &es[idx]
		return e.state == statePublished && !e.pinned() && e.tick < olderThan
	}
	for _, idx := range sl.owner {
		if idx == 0 {
			continue
		}
		if !evictable(idx) {
			return out, false
		}
		es[idx].mark = m
		out = append(out, idx)
	}
	budget := len(out) + reclaimExtra
	for i := 0; i < len(out); i++ {
		e := &es[out[i]]
		if e.children == 0 {
			continue
		}
		for c := s.mu.kids[kidKey{e.key, e.ns}].head; c != 0; c = es[c].sibNext {
			if es[c].mark == m {
				continue
			}
			if len(out) >= budget || !evictable(c) {
				return out, false
			}
			es[c].mark = m
			out = append(out, c)
		}
	}
	return out, true
}

// reclaimSlabLocked evicts the plan left by pickVictimSlabLocked for slab
// sid, children before parents (a plan is closed under "child of"), and
// reports whether the slab ended up empty.
func (s *Store) reclaimSlabLocked(sid uint32) bool {
	es := s.mu.entries
	m := s.nextMarkLocked()
	work := s.mu.spare[:0]
	for _, idx := range s.mu.plan {
		es[idx].mark = m
		if es[idx].children == 0 {
			work = append(work, idx)
		}
	}
	for len(work) > 0 {
		idx := work[len(work)-1]
		work = work[:len(work)-1]
		p, hasParent := s.parentLocked(&es[idx])
		s.evictLocked(idx)
		if hasParent && es[p].mark == m && es[p].children == 0 {
			work = append(work, p)
		}
	}
	s.mu.spare, s.mu.plan = work, s.mu.plan[:0]
	return s.mu.slabs[sid].used() == 0
}
