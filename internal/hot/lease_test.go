package hot

import (
	"testing"
	"testing/synctest"
	"time"
)

// storm writes blocks of mixed size classes, about rounds times the
// capacity in bytes, with fresh ids from *next. Every Reserve must succeed.
func storm(t *testing.T, s *Store, ns Namespace, next *uint64, rounds int) {
	t.Helper()
	sizes := []int{64 * kib, 16 * kib, 256 * kib, 64 * kib, 1 * mib, 40 * kib}
	var written int64
	for i := 0; written < int64(rounds)*s.cfg.CapacityBytes; i++ {
		size := sizes[i%len(sizes)]
		id := *next
		*next++
		if err := tryPut(s, ns, id, 0, size); err != nil {
			t.Fatalf("storm put %d (%d bytes): %v", id, size, err)
		}
		written += int64(size)
		if i%64 == 0 {
			mustInvariants(t, s)
		}
	}
	mustInvariants(t, s)
}

func chainKeys(ids ...uint64) []Key {
	keys := make([]Key, len(ids))
	for i, id := range ids {
		keys[i] = key(id)
	}
	return keys
}

func TestLeaseSurvivesCapacityStorm(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newTestStore(t, testConfig(8*mib))
		ns := nsOf(1)
		chain := []uint64{1, 2, 3, 4, 5, 6, 7, 8}
		putChain := func() {
			for i, id := range chain {
				parent := uint64(0)
				if i > 0 {
					parent = chain[i-1]
				}
				put(t, s, ns, id, parent, blk)
			}
		}
		putChain()
		next := uint64(1000)
		for range 120 { // fill the store
			put(t, s, ns, next, 0, blk)
			next++
		}

		hits, id, granted := s.Lookup(ns, chainKeys(chain...), 10*time.Second, true)
		if hits != len(chain) || id == 0 || granted != 10*time.Second {
			t.Fatalf("Lookup = %d, %d, %v", hits, id, granted)
		}
		storm(t, s, ns, &next, 10)
		st := s.Stats()
		if st.Evictions == 0 || st.SlabReclaims == 0 || st.Pinned != uint64(len(chain)) || st.LeasesActive != 1 {
			t.Fatalf("Stats after storm = %+v", st)
		}
		for _, id := range chain {
			if !has(t, s, ns, id, blk) {
				t.Fatalf("leased block %d evicted", id)
			}
		}

		// Released, the chain is ordinary LRU data again.
		if !s.ReleaseLease(id) || s.ReleaseLease(id) {
			t.Fatal("ReleaseLease")
		}
		storm(t, s, ns, &next, 3)
		for _, id := range chain {
			if present(s, id) {
				t.Fatalf("block %d survived after its lease was released", id)
			}
		}

		// An expired lease protects nothing, even before anyone calls
		// ExpireLeases: Reserve reclaims it lazily.
		putChain()
		if _, id, _ = s.Lookup(ns, chainKeys(chain...), time.Second, true); id == 0 {
			t.Fatal("no lease")
		}
		storm(t, s, ns, &next, 3)
		for _, id := range chain {
			if !present(s, id) {
				t.Fatalf("leased block %d evicted", id)
			}
		}
		time.Sleep(time.Second) // synctest: the fake clock moves at once
		storm(t, s, ns, &next, 3)
		for _, id := range chain {
			if present(s, id) {
				t.Fatalf("block %d survived after its lease expired", id)
			}
		}
		if st := s.Stats(); st.LeasesExpired != 1 || st.LeasesActive != 0 || st.LeasesGranted != 2 || st.Pinned != 0 {
			t.Fatalf("Stats = %+v", st)
		}
	})
}

func TestPinnedViewSurvivesStorm(t *testing.T) {
	s := newTestStore(t, testConfig(8*mib))
	ns := nsOf(1)
	put(t, s, ns, 1, 0, 300*kib)
	v, ok := s.Acquire(ns, key(1))
	if !ok {
		t.Fatal("miss")
	}
	next := uint64(1000)
	storm(t, s, ns, &next, 10)
	if string(v.Bytes) != string(payload(1, 300*kib)) {
		t.Fatal("pinned bytes changed")
	}
	s.Release(v)
	storm(t, s, ns, &next, 2)
	if present(s, 1) {
		t.Fatal("released block never evicted")
	}
}

func TestInFlightSurvivesStorm(t *testing.T) {
	s := newTestStore(t, testConfig(8*mib))
	ns := nsOf(1)
	r, err := s.ReserveBlock(ns, key(1), Key{}, BlockMeta{Tokens: 16}, 700*kib)
	if err != nil {
		t.Fatal(err)
	}
	fillPayload(r.Buf, 1)
	next := uint64(1000)
	storm(t, s, ns, &next, 10)
	s.Commit(r)
	if !has(t, s, ns, 1, 700*kib) {
		t.Fatal("in-flight block lost")
	}
	mustInvariants(t, s)
}

func TestLeaseLimits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := testConfig(2 * mib)
		cfg.MaxLeases = 2
		cfg.DefaultLeaseTTL = 2 * time.Second
		cfg.MaxLeaseTTL = 10 * time.Second
		s := newTestStore(t, cfg)
		ns := nsOf(1)
		for id := uint64(1); id <= 3; id++ {
			put(t, s, ns, id, id-1, 100)
		}
		keys := chainKeys(1, 2, 99, 3)

		if hits, id, _ := s.Lookup(ns, keys, 0, false); hits != 2 || id != 0 {
			t.Fatalf("no-lease Lookup = %d, %d", hits, id)
		}
		if hits, id, _ := s.Lookup(ns, chainKeys(99, 1), 0, true); hits != 0 || id != 0 {
			t.Fatalf("zero-hit Lookup = %d, %d", hits, id)
		}
		h1, id1, g1 := s.Lookup(ns, keys, 0, true)
		h2, id2, g2 := s.Lookup(ns, chainKeys(3, 3), time.Hour, true)
		h3, id3, g3 := s.Lookup(ns, keys, 0, true)
		if h1 != 2 || id1 == 0 || g1 != 2*time.Second {
			t.Fatalf("lease 1 = %d, %d, %v", h1, id1, g1)
		}
		if h2 != 2 || id2 == 0 || id2 == id1 || g2 != 10*time.Second {
			t.Fatalf("lease 2 = %d, %d, %v", h2, id2, g2)
		}
		if h3 != 2 || id3 != 0 || g3 != 0 {
			t.Fatalf("lease over MaxLeases = %d, %d, %v", h3, id3, g3)
		}
		mustInvariants(t, s)
		s.mu.Lock()
		if n := s.mu.entries[s.mu.index[key(3)]].leases; n != 2 {
			t.Errorf("block 3 held %d times by one lease, want 2", n)
		}
		s.mu.Unlock()

		time.Sleep(2 * time.Second) // synctest: the fake clock moves at once
		if n := s.ExpireLeases(); n != 1 {
			t.Fatalf("ExpireLeases = %d, want 1", n)
		}
		if s.ReleaseLease(id1) {
			t.Fatal("released an expired lease")
		}
		if !s.ReleaseLease(id2) || s.ReleaseLease(id2) || s.ReleaseLease(12345) {
			t.Fatal("ReleaseLease")
		}
		st := s.Stats()
		if st.LeasesGranted != 2 || st.LeasesExpired != 1 || st.LeasesActive != 0 || st.Pinned != 0 ||
			st.Lookups != 5 || st.LookupHits != 8 {
			t.Fatalf("Stats = %+v", st)
		}
		if n := s.ExpireLeases(); n != 0 {
			t.Fatalf("ExpireLeases = %d", n)
		}

		// Released leases do not pile up in the deadline heap.
		for range 500 {
			_, id, _ := s.Lookup(ns, keys, 0, true)
			s.ReleaseLease(id)
		}
		s.mu.Lock()
		garbage := len(s.mu.deadlines)
		s.mu.Unlock()
		if garbage > 130 {
			t.Fatalf("deadline heap holds %d elements", garbage)
		}
		mustInvariants(t, s)
	})
}

func TestLeaseHeapOrder(t *testing.T) {
	var h leaseHeap
	for i, d := range []int64{50, 10, 40, 10, 30, 20, 60, 0} {
		h.push(leaseDeadline{deadline: d, id: LeaseID(i + 1)})
	}
	prev := int64(-1)
	for len(h) > 0 {
		d := h.pop()
		if d.deadline < prev {
			t.Fatalf("popped %d after %d", d.deadline, prev)
		}
		prev = d.deadline
	}
}
