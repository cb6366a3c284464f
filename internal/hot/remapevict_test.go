package hot

import "testing"

// TestReserveDuringMappingEvictsNothing: on a store with one full slab and
// budget for one more, one writer maps the second slab (held in its mmap
// by a hook) and a second writer arrives. It finds no free slot and no
// budget; it must wait for the slab being mapped, which brings 64 free
// slots, rather than evict a cached block. (1,000 PUTs whose tables
// completed together on a node still mapping its slabs evicted another
// tenant's blocks with three quarters of the tier about to be free.)
func TestReserveDuringMappingEvictsNothing(t *testing.T) {
	s := newTestStore(t, testConfig(2*mib)) // two 1 MiB slabs of 64 16 KiB slots
	ns := nsOf(1)
	for id := uint64(1); id <= 64; id++ {
		put(t, s, ns, id, 0, 16*kib)
	}
	if st := s.Stats(); st.Slabs != 1 || st.Blocks != 64 {
		t.Fatalf("setup: %d slabs, %d blocks; want one full slab", st.Slabs, st.Blocks)
	}
	mapping, waited, release := holdMapping(s, 1)
	results := make(chan error, 2)
	go func() { results <- tryPut(s, ns, 100, 0, 16*kib) }()
	<-mapping // the first writer holds the rest of the budget in its mmap
	go func() { results <- tryPut(s, ns, 101, 0, 16*kib) }()
	select {
	case <-waited:
	case err := <-results:
		release()
		<-results
		t.Fatalf("a reserve during a mapping answered (%v) without waiting for it: %d cached blocks evicted", err, s.Stats().Evictions)
	}
	release()
	for range 2 {
		if err := <-results; err != nil {
			t.Fatal(err)
		}
	}
	if st := s.Stats(); st.Evictions != 0 || st.Slabs != 2 {
		t.Fatalf("%d blocks evicted, %d slabs; want none evicted, 2 slabs", st.Evictions, st.Slabs)
	}
	for _, id := range []uint64{1, 64, 100, 101} {
		if !has(t, s, ns, id, 16*kib) {
			t.Fatalf("block %d missing", id)
		}
	}
	mustInvariants(t, s)
}
