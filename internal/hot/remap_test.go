package hot

import (
	"errors"
	"testing"
)

// holdMapping makes the first mmap of s wait until the returned release
// function is called; mapping is closed once that mmap has started (with
// the store's lock dropped and the budget taken). Each Reserve that then
// waits for room sends on waited.
func holdMapping(s *Store, waiters int) (mapping <-chan struct{}, waited <-chan struct{}, release func()) {
	started, gate := make(chan struct{}), make(chan struct{})
	w := make(chan struct{}, waiters)
	first := true
	s.hooks.beforeMap = func() {
		// Only growLocked calls this, and only one mmap can start while
		// the budget is one slab, so first needs no lock.
		if first {
			first = false
			close(started)
			<-gate
		}
	}
	s.hooks.waitRoom = func() { w <- struct{}{} }
	return started, w, func() { close(gate) }
}

// TestConcurrentReservesWaitForTheSlabBeingMapped: on an empty store whose
// budget is one slab, one writer maps the slab (held in the mmap by a
// hook) while fifteen more arrive. They find no free slot, no budget and
// nothing to evict; they must wait for the mapping and then all succeed,
// not answer ErrNoSpace (before the wait, 12 of 16 blocks failed).
func TestConcurrentReservesWaitForTheSlabBeingMapped(t *testing.T) {
	s := newTestStore(t, testConfig(1*mib)) // one 1 MiB slab of 64 16 KiB slots
	const writers = 16
	mapping, waited, release := holdMapping(s, writers)
	ns := nsOf(1)
	results := make(chan error, writers)
	write := func(id uint64) {
		r, err := s.ReserveBlock(ns, key(id), Key{}, BlockMeta{Tokens: 16}, 16*kib)
		if err == nil {
			fillPayload(r.Buf, id)
			s.Commit(r)
		}
		results <- err
	}
	go write(1)
	<-mapping // writer 1 holds the whole budget in its mmap
	for id := uint64(2); id <= writers; id++ {
		go write(id)
	}
	// Every later writer either waits for room or has answered already;
	// only then does the mapping end, so the race is forced every run.
	var early []error
	for range writers - 1 {
		select {
		case <-waited:
		case err := <-results:
			early = append(early, err)
		}
	}
	release()
	var failed []error
	for range writers - len(early) {
		if err := <-results; err != nil {
			failed = append(failed, err)
		}
	}
	for _, err := range early {
		if err != nil {
			failed = append(failed, err)
		}
	}
	if len(failed) > 0 {
		t.Fatalf("%d of %d concurrent writers failed on an empty store: %v", len(failed), writers, errors.Join(failed...))
	}
	for id := uint64(1); id <= writers; id++ {
		if !has(t, s, ns, id, 16*kib) {
			t.Fatalf("block %d missing", id)
		}
	}
	if st := s.Stats(); st.Slabs != 1 || st.PutRejects != 0 || st.Puts != writers {
		t.Fatalf("stats %+v", st)
	}
	mustInvariants(t, s)
}

// TestReserveWaitingForRoomSeesClose: a Reserve waiting for a mapping in
// progress returns ErrClosed when the store closes, and so does the
// writer whose mapping was in progress.
func TestReserveWaitingForRoomSeesClose(t *testing.T) {
	s, err := New(testConfig(1 * mib))
	if err != nil {
		t.Fatal(err)
	}
	mapping, waited, release := holdMapping(s, 1)
	results := make(chan error, 2)
	reserve := func(id uint64) {
		_, err := s.ReserveBlock(nsOf(1), key(id), Key{}, BlockMeta{Tokens: 16}, 16*kib)
		results <- err
	}
	go reserve(1)
	<-mapping
	go reserve(2)
	select {
	case <-waited:
	case err := <-results:
		release()
		<-results
		s.Close()
		t.Fatalf("Reserve during a mapping answered %v instead of waiting", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-results; !errors.Is(err, ErrClosed) {
		t.Fatalf("waiting Reserve after Close: %v, want ErrClosed", err)
	}
	release()
	if err := <-results; !errors.Is(err, ErrClosed) {
		t.Fatalf("mapping Reserve after Close: %v, want ErrClosed", err)
	}
}
