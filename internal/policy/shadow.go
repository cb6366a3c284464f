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

// shadow is one miniature cache: the sampled keys it holds, under its own
// instance of a candidate policy.
type shadow struct {
	pol   Policy
	index keyTable
	keys  []uint64 // by shadow ID
	free  []ID
	n     int

	take   func(ID) bool // bound once: records the first victim
	victim ID
	found  bool
}

func newShadow(p Policy) *shadow {
	s := &shadow{pol: p}
	s.take = func(id ID) bool { s.victim, s.found = id, true; return false }
	return s
}

// lookup returns the shadow ID of key.
func (s *shadow) lookup(key uint64) (ID, bool) { return s.index.get(key) }

// access records a use of a sampled block: a Touch when it is cached, an
// Insert (under the shadow ID parent, or NoParent) when not; then it
// evicts down to capacity (capacity < 0: no bound). It returns the block's
// shadow ID and whether it was cached, or ok=false when the policy evicted
// the block itself.
func (s *shadow) access(b Block, parent ID, capacity int) (id ID, hit, ok bool) {
	if id, hit := s.index.get(b.Key); hit {
		s.pol.Touch(id)
		return id, true, true
	}
	if k := len(s.free); k > 0 {
		id = s.free[k-1]
		s.free = s.free[:k-1]
	} else {
		id = ID(len(s.keys))
		s.keys = append(s.keys, 0)
	}
	s.keys[id] = b.Key
	s.index.put(b.Key, id)
	s.n++
	b.ID, b.Parent = id, parent
	s.pol.Insert(b)
	s.shrink(capacity)
	_, ok = s.index.get(b.Key)
	return id, false, ok
}

// shrink evicts the policy's first victims until at most capacity blocks
// are cached (capacity < 0: no bound).
func (s *shadow) shrink(capacity int) {
	for capacity >= 0 && s.n > capacity {
		s.found = false
		s.pol.Victims(s.take)
		if !s.found {
			return
		}
		s.remove(s.victim)
	}
}

// remove drops the block with shadow ID id.
func (s *shadow) remove(id ID) {
	s.pol.Remove(id)
	s.index.del(s.keys[id])
	s.keys[id] = 0
	s.free = append(s.free, id)
	s.n--
}

// purge drops every block whose key keep rejects (the sample shrank).
func (s *shadow) purge(keep func(uint64) bool) {
	for id, k := range s.keys {
		if k != 0 && !keep(k) {
			s.remove(ID(id))
		}
	}
}
