package policy

// This file holds Adaptive's miniature caches: metadata-only replicas of
// the cache under one candidate policy, fed a spatially sampled subset of
// the block keys (SHARDS, Waldspurger et al., FAST '15 and ATC '17: a key
// is in the sample when a hash of it falls below a threshold, so a block is
// either always or never sampled, and a cache of r·C blocks fed the sample
// behaves like a cache of C blocks fed everything).

// keyTable maps block keys to shadow IDs: open addressing with linear
// probing and backward-shift deletion. Key 0 is the empty slot (Adaptive
// never samples key 0, "unknown"). It grows while it is more than half
// full and never shrinks, so a shadow that has reached its size no longer
// allocates.
type keyTable struct {
	keys []uint64
	ids  []ID
	n    int
}

func (t *keyTable) slot(k uint64) int { return int(mix64(k) & uint64(len(t.keys)-1)) }

func (t *keyTable) get(k uint64) (ID, bool) {
	if len(t.keys) == 0 {
		return 0, false
	}
	m := len(t.keys) - 1
	for i := t.slot(k); ; i = (i + 1) & m {
		switch t.keys[i] {
		case k:
			return t.ids[i], true
		case 0:
			return 0, false
		}
	}
}

func (t *keyTable) put(k uint64, id ID) {
	if 2*(t.n+1) > len(t.keys) {
		t.rehash(max(64, 2*len(t.keys)))
	}
	m := len(t.keys) - 1
	for i := t.slot(k); ; i = (i + 1) & m {
		switch t.keys[i] {
		case k:
			t.ids[i] = id
			return
		case 0:
			t.keys[i], t.ids[i] = k, id
			t.n++
			return
		}
	}
}

func (t *keyTable) del(k uint64) {
	if len(t.keys) == 0 {
		return
	}
	m := len(t.keys) - 1
	i := t.slot(k)
	for t.keys[i] != k {
		if t.keys[i] == 0 {
			return
		}
		i = (i + 1) & m
	}
	// Backward shift: move later entries of the probe run into the hole.
	for j := (i + 1) & m; t.keys[j] != 0; j = (j + 1) & m {
		if home := t.slot(t.keys[j]); (j-home)&m >= (j-i)&m {
			t.keys[i], t.ids[i] = t.keys[j], t.ids[j]
			i = j
		}
	}
	t.keys[i] = 0
	t.n--
}

func (t *keyTable) rehash(size int) {
	old, oldIDs := t.keys, t.ids
	t.keys, t.ids, t.n = make([]uint64, size), make([]ID, size), 0
	for i, k := range old {
		if k != 0 {
			t.put(k, oldIDs[i])
		}
	}
}

// mix64 is a 64-bit finaliser (splitmix64): trace hash ids are small
// consecutive integers, so the sample and the table slots hash them first.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// shadowSet is Adaptive's miniature caches: one per candidate, each a
// candidate policy over the sampled keys it holds. The caches share one
// key table and one ID space — a sampled key has one slot, the ID it has
// in every shadow's policy, with one bit per shadow saying which hold it —
// so an access costs one hash probe for the block and one for its parent,
// whatever the number of candidates. A slot is freed when no shadow holds
// its key.
type shadowSet struct {
	index   keyTable
	keys    []uint64 // by slot
	in      []uint8  // by slot: bit i set while shadow i holds the key
	free    []ID
	shadows []*shadow
}

// shadow is one miniature cache: the number of sampled keys it holds,
// under its own instance of a candidate policy.
type shadow struct {
	pol Policy
	n   int

	take   func(ID) bool // bound once: records the first victim
	victim ID
	found  bool
}

func (ss *shadowSet) add(p Policy) {
	s := &shadow{pol: p}
	s.take = func(id ID) bool { s.victim, s.found = id, true; return false }
	ss.shadows = append(ss.shadows, s)
}

// access records a use of a sampled block in every shadow: a Touch where
// it is cached, an Insert (under its parent's slot, parentKey, where that
// shadow holds it) where not; then each shadow evicts down to capacity
// (capacity < 0: no bound). It returns, by shadow, whether the block was
// cached there.
func (ss *shadowSet) access(b Block, parentKey uint64, capacity int) (hit uint8) {
	slot, ok := ss.index.get(b.Key)
	if !ok {
		if k := len(ss.free); k > 0 {
			slot = ss.free[k-1]
			ss.free = ss.free[:k-1]
		} else {
			slot = ID(len(ss.keys))
			ss.keys = append(ss.keys, 0)
			ss.in = append(ss.in, 0)
		}
		ss.keys[slot], ss.in[slot] = b.Key, 0
		ss.index.put(b.Key, slot)
	}
	parent, hasParent := none, false
	if parentKey != 0 {
		parent, hasParent = ss.index.get(parentKey)
	}
	b.ID = slot
	for i, s := range ss.shadows {
		bit := uint8(1) << i
		if ss.in[slot]&bit != 0 {
			s.pol.Touch(slot)
			hit |= bit
			continue
		}
		b.Parent = none
		if hasParent && ss.in[parent]&bit != 0 {
			b.Parent = parent
		}
		ss.in[slot] |= bit
		s.n++
		s.pol.Insert(b)
		ss.shrink(i, capacity, slot)
	}
	if ss.in[slot] == 0 {
		ss.release(slot) // every shadow evicted it at once
	}
	return hit
}

// shrink evicts shadow i's first victims until it holds at most capacity
// blocks (capacity < 0: no bound). The slot keep is not released here
// when it empties: access still uses it.
func (ss *shadowSet) shrink(i, capacity int, keep ID) {
	s := ss.shadows[i]
	for capacity >= 0 && s.n > capacity {
		s.found = false
		s.pol.Victims(s.take)
		if !s.found {
			return
		}
		ss.drop(i, s.victim, keep)
	}
}

// drop removes slot from shadow i, releasing it when no shadow holds it
// any more (unless it is keep).
func (ss *shadowSet) drop(i int, slot, keep ID) {
	s := ss.shadows[i]
	s.pol.Remove(slot)
	s.n--
	ss.in[slot] &^= 1 << i
	if ss.in[slot] == 0 && slot != keep {
		ss.release(slot)
	}
}

// release frees an empty slot.
func (ss *shadowSet) release(slot ID) {
	ss.index.del(ss.keys[slot])
	ss.keys[slot] = 0
	ss.free = append(ss.free, slot)
}

// purge drops every key that keep rejects (the sample shrank) from every
// shadow.
func (ss *shadowSet) purge(keep func(uint64) bool) {
	for slot, k := range ss.keys {
		if k == 0 || keep(k) {
			continue
		}
		for i := range ss.shadows {
			if ss.in[slot]&(1<<i) != 0 {
				ss.drop(i, ID(slot), none)
			}
		}
	}
}
