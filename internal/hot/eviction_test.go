package hot

import (
	"errors"
	"testing"
)

// A 1 MiB store of 64 KiB blocks holds exactly 16 of them.
func oneSlabStore(t *testing.T) *Store {
	t.Helper()
	return newTestStore(t, testConfig(1*mib))
}

const blk = 64 * kib

// fillSlab puts blocks 1..16 of blk bytes, unchained: one slab's worth.
func fillSlab(t *testing.T, s *Store, ns Namespace) {
	t.Helper()
	for id := uint64(1); id <= 16; id++ {
		put(t, s, ns, id, 0, blk)
	}
}

// checkLRUOrder fills a one-slab store, touches 1 by Acquire and 2 by
// Lookup, and checks that 3 and then 4 are evicted first.
func checkLRUOrder(t *testing.T, s *Store, ns Namespace) {
	t.Helper()
	fillSlab(t, s, ns)
	has(t, s, ns, 1, blk)
	s.Lookup(ns, []Key{key(2)}, 0, false)
	put(t, s, ns, 17, 0, blk)
	if present(s, 3) || !present(s, 1) || !present(s, 2) {
		t.Fatalf("want 3 evicted first: 1 %v 2 %v 3 %v", present(s, 1), present(s, 2), present(s, 3))
	}
	put(t, s, ns, 18, 0, blk)
	if present(s, 4) {
		t.Fatal("want 4 evicted next")
	}
}

func TestLRUOrder(t *testing.T) {
	s := oneSlabStore(t)
	ns := nsOf(1)
	checkLRUOrder(t, s, ns)
	if st := s.Stats(); st.Evictions != 2 || st.Blocks != 16 {
		t.Fatalf("Stats = %+v", st)
	}
	mustInvariants(t, s)
}

func TestPrefixAwareEviction(t *testing.T) {
	s := oneSlabStore(t)
	ns := nsOf(1)
	// Chain 1 <- 2 <- 3 written oldest first, then 13 unrelated blocks.
	put(t, s, ns, 1, 0, blk)
	put(t, s, ns, 2, 1, blk)
	put(t, s, ns, 3, 2, blk)
	for id := uint64(10); id < 23; id++ {
		put(t, s, ns, id, 0, blk)
	}
	mustInvariants(t, s)
	// The chain is evicted leaf first, parents after their children, and
	// only then the next LRU block.
	for i, want := range []uint64{3, 2, 1, 10, 11} {
		put(t, s, ns, 100+uint64(i), 0, blk)
		if present(s, want) {
			t.Fatalf("step %d: block %d not evicted", i, want)
		}
		for _, id := range []uint64{1, 2, 3} {
			if id < want && want <= 3 && !present(s, id) {
				t.Fatalf("step %d: parent %d evicted before its child %d", i, id, want)
			}
		}
		mustInvariants(t, s)
	}
}

func TestPrefixAwareParentTouched(t *testing.T) {
	s := oneSlabStore(t)
	ns := nsOf(1)
	put(t, s, ns, 1, 0, blk)
	put(t, s, ns, 2, 1, blk)
	for id := uint64(10); id < 24; id++ {
		put(t, s, ns, id, 0, blk)
	}
	// Reading the parent alone makes it recent, though it is off the list.
	has(t, s, ns, 1, blk)
	put(t, s, ns, 100, 0, blk) // evicts the leaf 2 (LRU candidate)
	put(t, s, ns, 101, 0, blk) // parent 1 is recent now: 10 goes
	if present(s, 2) || !present(s, 1) || present(s, 10) {
		t.Fatalf("1 %v 2 %v 10 %v", present(s, 1), present(s, 2), present(s, 10))
	}
	mustInvariants(t, s)
}

func TestPrefixParentPublishedAfterChildren(t *testing.T) {
	s := oneSlabStore(t)
	ns := nsOf(1)
	put(t, s, ns, 3, 2, blk) // child first: its parent is absent
	put(t, s, ns, 2, 1, blk) // parent counts its cached child
	put(t, s, ns, 1, 0, blk)
	for id := uint64(10); id < 23; id++ {
		put(t, s, ns, id, 0, blk)
	}
	mustInvariants(t, s)
	for i, want := range []uint64{3, 2, 1} {
		put(t, s, ns, 100+uint64(i), 0, blk)
		if present(s, want) {
			t.Fatalf("step %d: block %d not evicted", i, want)
		}
	}
	// A child in another namespace does not protect a parent.
	put(t, s, nsOf(2), 200, 10, blk)
	s.mu.Lock()
	children := s.mu.entries[s.mu.index[key(10)]].children
	s.mu.Unlock()
	if children != 0 {
		t.Fatalf("foreign child counted: %d", children)
	}
	mustInvariants(t, s)
}

func TestPinnedChildProtectsChain(t *testing.T) {
	s := oneSlabStore(t)
	ns := nsOf(1)
	put(t, s, ns, 1, 0, blk)
	put(t, s, ns, 2, 1, blk)
	put(t, s, ns, 3, 2, blk)
	v, ok := s.Acquire(ns, key(3))
	if !ok {
		t.Fatal("miss")
	}
	for id := uint64(10); id < 200; id++ {
		put(t, s, ns, id, 0, blk)
	}
	for _, id := range []uint64{1, 2, 3} {
		if !present(s, id) {
			t.Fatalf("block %d of a pinned chain evicted", id)
		}
	}
	s.Release(v)
	mustInvariants(t, s)
}

func TestCycleRejected(t *testing.T) {
	s := oneSlabStore(t)
	ns := nsOf(1)
	put(t, s, ns, 1, 1, blk) // its own parent
	put(t, s, ns, 2, 3, blk)
	put(t, s, ns, 3, 2, blk) // closes 2 <- 3 <- 2
	if present(s, 1) || present(s, 3) || !present(s, 2) {
		t.Fatalf("1 %v 2 %v 3 %v", present(s, 1), present(s, 2), present(s, 3))
	}
	if st := s.Stats(); st.PutRejects != 2 || st.Puts != 1 {
		t.Fatalf("Stats = %+v", st)
	}
	mustInvariants(t, s)
}

// TestLongChainEviction writes a chain far longer than EvictScan: only its
// leaf is an eviction candidate, so eviction never scans the interior, and
// what stays cached is always a prefix of the chain.
func TestLongChainEviction(t *testing.T) {
	cfg := testConfig(4 * mib)
	cfg.EvictScan = 8
	s := newTestStore(t, cfg)
	ns := nsOf(1)
	const n = 256 // 4 MiB of 16 KiB blocks
	for id := uint64(1); id <= n; id++ {
		put(t, s, ns, id, id-1, 16*kib)
	}
	for i := uint64(0); i < 200; i++ {
		put(t, s, ns, 1000+i, 0, 16*kib)
		cached := uint64(0)
		for present(s, cached+1) {
			cached++
		}
		if cached != n-1-i {
			t.Fatalf("after %d puts the chain keeps %d blocks, want %d", i+1, cached, n-1-i)
		}
		for id := cached + 1; id <= n; id++ {
			if present(s, id) {
				t.Fatalf("block %d cached after its parent %d was evicted", id, cached+1)
			}
		}
	}
	mustInvariants(t, s)
}

func TestNoSpaceWhenAllPinned(t *testing.T) {
	s := oneSlabStore(t)
	ns := nsOf(1)
	var views []View
	for id := uint64(1); id <= 16; id++ {
		put(t, s, ns, id, 0, blk)
		v, _ := s.Acquire(ns, key(id))
		views = append(views, v)
	}
	for _, size := range []int{blk, 16 * kib, 1 * mib} {
		if _, err := s.ReserveBlock(ns, key(100), Key{}, BlockMeta{Tokens: 16}, size); !errors.Is(err, ErrNoSpace) {
			t.Fatalf("Reserve %d with all pinned: %v", size, err)
		}
	}
	if st := s.Stats(); st.PutRejects != 3 || st.Evictions != 0 || st.Pinned != 16 {
		t.Fatalf("Stats = %+v", st)
	}
	s.Release(views[5])
	put(t, s, ns, 100, 0, blk)
	if present(s, 6) || !has(t, s, ns, 100, blk) {
		t.Fatal("want the released block evicted")
	}
	for i, v := range views {
		if i != 5 {
			s.Release(v)
		}
	}
	mustInvariants(t, s)
}

func TestNoSpaceWhenAllInFlight(t *testing.T) {
	s := oneSlabStore(t)
	ns := nsOf(1)
	var rs []Reservation
	for id := uint64(1); id <= 16; id++ {
		r, err := s.ReserveBlock(ns, key(id), Key{}, BlockMeta{Tokens: 16}, blk)
		if err != nil {
			t.Fatal(err)
		}
		rs = append(rs, r)
	}
	if _, err := s.ReserveBlock(ns, key(100), Key{}, BlockMeta{Tokens: 16}, 16*kib); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("Reserve with all in flight: %v", err)
	}
	for _, r := range rs {
		s.Abort(r)
	}
	mustInvariants(t, s)
}

// TestCrossClassReclaimRecarve fills the store with 16 KiB blocks, then asks
// for 1 MiB slots: slabs of the same size are re-carved in place.
func TestCrossClassReclaimRecarve(t *testing.T) {
	s := newTestStore(t, testConfig(4*mib))
	ns := nsOf(1)
	for id := uint64(1); id <= 256; id++ {
		put(t, s, ns, id, 0, 16*kib)
	}
	if st := s.Stats(); st.BytesMapped != 4*mib || st.Slabs != 4 {
		t.Fatalf("Stats = %+v", st)
	}
	for id := uint64(1000); id < 1004; id++ {
		put(t, s, ns, id, 0, 1*mib)
		mustInvariants(t, s)
	}
	for id := uint64(1000); id < 1004; id++ {
		if !has(t, s, ns, id, 1*mib) {
			t.Fatalf("block %d missing", id)
		}
	}
	st := s.Stats()
	if st.Evictions != 256 || st.SlabReclaims != 4 || st.BytesMapped != 4*mib || st.Blocks != 4 {
		t.Fatalf("Stats = %+v", st)
	}
	// And back: small blocks take over a slab freed by Delete without
	// evicting anything (an empty slab is handed over first).
	s.Delete(ns, key(1000))
	put(t, s, ns, 1, 0, 16*kib)
	if st := s.Stats(); st.Evictions != 256 || st.SlabReclaims != 5 {
		t.Fatalf("Stats = %+v", st)
	}
	mustInvariants(t, s)
}

// TestCrossClassReclaimRemap fills 1 MiB slabs with 16 KiB blocks, then asks
// for 4 MiB blocks, whose slabs are 4 MiB: four small slabs are munmapped
// per large slab mapped, and the budget is never exceeded.
func TestCrossClassReclaimRemap(t *testing.T) {
	cfg := testConfig(8 * mib)
	cfg.MaxClass = 4 * mib
	s := newTestStore(t, cfg)
	ns := nsOf(1)
	for id := uint64(1); id <= 512; id++ {
		put(t, s, ns, id, 0, 16*kib)
	}
	for id := uint64(1000); id < 1002; id++ {
		put(t, s, ns, id, 0, 4*mib)
		mustInvariants(t, s)
	}
	st := s.Stats()
	if st.Evictions != 512 || st.SlabReclaims != 8 || st.BytesMapped != 8*mib || st.Slabs != 2 {
		t.Fatalf("Stats = %+v", st)
	}
	if !has(t, s, ns, 1000, 4*mib) || !has(t, s, ns, 1001, 4*mib) {
		t.Fatal("large blocks missing")
	}
}

// TestReclaimCascadesToDescendants: emptying a slab evicts the cached
// descendants of its blocks that live in other slabs first, and a pinned
// descendant makes the slab unreclaimable.
func TestReclaimCascadesToDescendants(t *testing.T) {
	for _, pin := range []bool{true, false} {
		s := newTestStore(t, testConfig(2*mib))
		ns := nsOf(1)
		// Slab A (16 KiB class): chain 1..63 and the unrelated block 99.
		put(t, s, ns, 99, 0, 16*kib)
		for id := uint64(1); id <= 63; id++ {
			put(t, s, ns, id, id-1, 16*kib)
		}
		// Slab B (1 MiB class): block 500, a child of 63.
		put(t, s, ns, 500, 63, 1*mib)
		mustInvariants(t, s)
		var v View
		if pin {
			v, _ = s.Acquire(ns, key(500))
		}
		// A 64 KiB block needs a slab: slab A is the oldest.
		err := tryPut(s, ns, 600, 0, blk)
		if pin {
			if !errors.Is(err, ErrNoSpace) {
				t.Fatalf("pinned descendant: %v, want ErrNoSpace", err)
			}
			for id := uint64(1); id <= 63; id++ {
				if !present(s, id) {
					t.Fatalf("block %d evicted", id)
				}
			}
			s.Release(v)
			mustInvariants(t, s)
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if present(s, 500) || present(s, 1) || present(s, 99) || !has(t, s, ns, 600, blk) {
			t.Fatal("want slab A and the descendant 500 evicted")
		}
		if st := s.Stats(); st.Evictions != 65 || st.SlabReclaims != 1 || st.Slabs != 2 {
			t.Fatalf("Stats = %+v", st)
		}
		mustInvariants(t, s)
	}
}
