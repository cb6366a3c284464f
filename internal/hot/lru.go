package hot

// This file holds the eviction order: one intrusive, index-linked LRU list
// per size class, plus the bookkeeping of the prefix-aware rule.
//
// A list holds only eviction candidates: published entries with no cached
// child and no lease. A parent whose child is cached is off the list, so an
// eviction scan never walks over the interior of a long chain; when its last
// cached child goes, the parent is put back at the place its own last touch
// (tick) earns. A leased entry is off the list too, until its last lease
// ends, so leases (however many blocks one tenant leases) never make a scan
// give up. Entries pinned by a View (a read being answered) stay on the
// list and are skipped by the scan.

// orderedInsertWalk bounds the walk that re-inserts a parent by its tick.
const orderedInsertWalk = 64

// linkAfterLocked puts idx on its class list right after at (at may be the
// sentinel, which makes idx the MRU).
func (s *Store) linkAfterLocked(idx, at uint32) {
	es := s.mu.entries
	e := &es[idx]
	nx := es[at].next
	e.prev, e.next, e.linked = at, nx, true
	es[at].next = idx
	es[nx].prev = idx
}

// unlinkLocked takes idx off its class list.
func (s *Store) unlinkLocked(idx uint32) {
	es := s.mu.entries
	e := &es[idx]
	es[e.prev].next = e.next
	es[e.next].prev = e.prev
	e.prev, e.next, e.linked = 0, 0, false
}

// linkOrderedLocked links idx by its tick: it walks from the LRU tail towards
// the head past older entries and stops at the first newer one. When the walk
// exceeds orderedInsertWalk the entry goes to the head: protecting a block a
// little too long is better than evicting a recently used one.
func (s *Store) linkOrderedLocked(idx uint32) {
	es := s.mu.entries
	sent := uint32(es[idx].class)
	tick := es[idx].tick
	p := es[sent].prev
	for range orderedInsertWalk {
		if p == sent || es[p].tick >= tick {
			s.linkAfterLocked(idx, p)
			return
		}
		p = es[p].prev
	}
	s.linkAfterLocked(idx, sent)
}

// touchLocked records a use of idx: a new tick and, when it is an eviction
// candidate, the head of its list.
func (s *Store) touchLocked(idx uint32) {
	s.mu.tick++
	e := &s.mu.entries[idx]
	e.tick = s.mu.tick
	s.noteSlabTickLocked(e)
	if e.linked {
		s.unlinkLocked(idx)
		s.linkAfterLocked(idx, uint32(e.class))
	}
	if p := s.cfg.Policy; p != nil {
		p.Touch(idx)
	}
}

// noteSlabTickLocked raises the newest-tick bound of e's slab.
func (s *Store) noteSlabTickLocked(e *entry) {
	if sl := &s.mu.slabs[e.slab]; sl.newest < e.tick {
		sl.newest = e.tick
	}
}

// parentLocked returns the entry index of e's parent when it is published
// under the same namespace.
func (s *Store) parentLocked(e *entry) (uint32, bool) {
	if e.parent.IsZero() {
		return 0, false
	}
	p, ok := s.mu.index[e.parent]
	if !ok {
		return 0, false
	}
	pe := &s.mu.entries[p]
	if pe.state != statePublished || pe.ns != e.ns {
		return 0, false
	}
	return p, true
}

// publishLocked makes the reserved entry idx visible and links it into the
// prefix bookkeeping: it counts as a cached child of its parent (taking the
// parent off the LRU list), and it inherits the count of its own children
// published before it.
func (s *Store) publishLocked(idx uint32) {
	e := &s.mu.entries[idx]
	e.state = statePublished
	s.mu.tick++
	e.tick = s.mu.tick
	s.noteSlabTickLocked(e)
	if !e.parent.IsZero() {
		kk := kidKey{e.parent, e.ns}
		kl := s.mu.kids[kk]
		e.sibPrev, e.sibNext = 0, kl.head
		if kl.head != 0 {
			s.mu.entries[kl.head].sibPrev = idx
		}
		kl.head = idx
		kl.n++
		s.mu.kids[kk] = kl
		if p, ok := s.parentLocked(e); ok {
			pe := &s.mu.entries[p]
			pe.children++
			if pe.linked {
				s.unlinkLocked(p)
			}
		}
	}
	e.children = s.mu.kids[kidKey{e.key, e.ns}].n
	if e.children == 0 {
		s.linkAfterLocked(idx, uint32(e.class))
	}
	s.mu.st.Puts++
	s.mu.st.Blocks++
	s.mu.st.BytesCached += uint64(e.length)
	if p := s.cfg.Policy; p != nil {
		s.policyInsertLocked(p, idx)
	}
}

// removeLocked unpublishes idx (evicted or deleted) and frees its slot. Its
// parent loses a cached child and may become an eviction candidate again.
func (s *Store) removeLocked(idx uint32) {
	if p := s.cfg.Policy; p != nil {
		p.Remove(idx)
	}
	e := &s.mu.entries[idx]
	if e.linked {
		s.unlinkLocked(idx)
	}
	delete(s.mu.index, e.key)
	if !e.parent.IsZero() {
		kk := kidKey{e.parent, e.ns}
		kl := s.mu.kids[kk]
		if e.sibPrev != 0 {
			s.mu.entries[e.sibPrev].sibNext = e.sibNext
		} else {
			kl.head = e.sibNext
		}
		if e.sibNext != 0 {
			s.mu.entries[e.sibNext].sibPrev = e.sibPrev
		}
		if kl.n--; kl.n == 0 {
			delete(s.mu.kids, kk)
		} else {
			s.mu.kids[kk] = kl
		}
		if p, ok := s.parentLocked(e); ok {
			pe := &s.mu.entries[p]
			pe.children--
			if pe.children == 0 && pe.leases == 0 {
				s.linkOrderedLocked(p)
			}
		}
	}
	s.mu.st.Blocks--
	s.mu.st.BytesCached -= uint64(e.length)
	s.freeEntryLocked(idx)
}

// candidateLocked returns the least recently used unpinned, unleased
// eviction candidate of class k, inspecting at most cfg.EvictScan list
// entries. With cfg.Policy, policyCandidateLocked takes its place.
func (s *Store) candidateLocked(k int) (uint32, bool) {
	es := s.mu.entries
	sent := uint32(k)
	p := es[sent].prev
	for i := 0; p != sent && i < s.cfg.EvictScan; i++ {
		if !es[p].pinned() {
			return p, true
		}
		p = es[p].prev
	}
	return 0, false
}

// evictLocked evicts the candidate idx for space.
func (s *Store) evictLocked(idx uint32) {
	if s.cfg.OnEvict != nil {
		e := &s.mu.entries[idx]
		s.cfg.OnEvict(e.ns, e.key, e.parent, e.tokens, s.bytesLocked(e))
	}
	s.removeLocked(idx)
	s.mu.st.Evictions++
}

// closesCycleLocked reports whether publishing the reserved entry idx would
// close a loop in the parent chain (a key that is its own ancestor). Only an
// entry that already has cached children can close one, so the walk up its
// ancestors runs only in that case (a parent re-published after its
// children), and it is bounded by the number of entries.
func (s *Store) closesCycleLocked(idx uint32) bool {
	e := &s.mu.entries[idx]
	if e.parent == e.key {
		return true
	}
	if s.mu.kids[kidKey{e.key, e.ns}].n == 0 {
		return false
	}
	key, ns := e.key, e.ns
	cur := e
	for range len(s.mu.entries) {
		if cur.parent == key && cur.ns == ns {
			return true
		}
		p, ok := s.parentLocked(cur)
		if !ok {
			return false
		}
		cur = &s.mu.entries[p]
	}
	return true
}
