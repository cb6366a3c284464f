//go:build invariants || race

package hot

import (
	"errors"
	"testing"
)

// mustPanicWith runs f and checks that it panics with an error matching want.
func mustPanicWith(t *testing.T, want error, f func()) {
	t.Helper()
	defer func() {
		t.Helper()
		r := recover()
		err, _ := r.(error)
		if !errors.Is(err, want) {
			t.Fatalf("panic %v, want %q", r, want)
		}
	}()
	f()
}

// TestDoubleReleasePanics: in the invariants build a second Release of one
// View panics, and the store stays usable and consistent.
func TestDoubleReleasePanics(t *testing.T) {
	s := newTestStore(t, testConfig(2*mib))
	ns := nsOf(1)
	put(t, s, ns, 1, 0, 100)
	v, ok := s.Acquire(ns, key(1))
	if !ok {
		t.Fatal("miss")
	}
	s.Release(v)
	mustPanicWith(t, errReleasedTwice, func() { s.Release(v) })
	mustInvariants(t, s)
	if deleted, busy := s.Delete(ns, key(1)); !deleted || busy {
		t.Fatalf("Delete = %v, %v after the panic; want the store unlocked and the block free", deleted, busy)
	}
}

// TestDoubleReleaseKeepsOtherPin: a second Release of one reader's View
// does not drop another reader's pin on the same block (a release build
// cannot tell the two apart and does).
func TestDoubleReleaseKeepsOtherPin(t *testing.T) {
	s := newTestStore(t, testConfig(2*mib))
	misused := catchMisuse(s)
	ns := nsOf(1)
	put(t, s, ns, 1, 0, 100)
	mine, ok1 := s.Acquire(ns, key(1))
	theirs, ok2 := s.Acquire(ns, key(1))
	if !ok1 || !ok2 {
		t.Fatal("miss")
	}
	s.Release(mine)
	s.Release(mine)
	misused.expect(t, errReleasedTwice, 1)
	mustInvariants(t, s)
	if st := s.Stats(); st.Pinned != 1 {
		t.Fatalf("Pinned = %d after a double Release, want 1 (the other reader's)", st.Pinned)
	}
	if deleted, busy := s.Delete(ns, key(1)); deleted || !busy {
		t.Fatalf("Delete = %v, %v: the other reader's block must stay pinned", deleted, busy)
	}
	if string(theirs.Bytes) != string(payload(1, 100)) {
		t.Fatal("the other reader's bytes changed")
	}
	s.Release(theirs)
	misused.expect(t, errReleasedTwice, 0)
	if deleted, busy := s.Delete(ns, key(1)); !deleted || busy {
		t.Fatalf("Delete = %v, %v after the last Release", deleted, busy)
	}
	mustInvariants(t, s)
}

// TestDoubleSettlePanics: a second Commit, an Abort after Commit, a second
// Abort, and a Commit or CommitAcquire after Abort each panic in the
// invariants build and change nothing.
func TestDoubleSettlePanics(t *testing.T) {
	s := newTestStore(t, testConfig(2*mib))
	ns := nsOf(1)
	committed, err := s.ReserveBlock(ns, key(1), Key{}, BlockMeta{Tokens: 16}, 100)
	if err != nil {
		t.Fatal(err)
	}
	fillPayload(committed.Buf, 1)
	s.Commit(committed)
	aborted, err := s.ReserveBlock(ns, key(2), Key{}, BlockMeta{Tokens: 16}, 100)
	if err != nil {
		t.Fatal(err)
	}
	s.Abort(aborted)
	before := s.Stats()
	for _, tc := range []struct {
		name string
		f    func()
	}{
		{"Commit after Commit", func() { s.Commit(committed) }},
		{"Abort after Commit", func() { s.Abort(committed) }},
		{"CommitAcquire after Commit", func() { s.CommitAcquire(committed) }},
		{"Abort after Abort", func() { s.Abort(aborted) }},
		{"Commit after Abort", func() { s.Commit(aborted) }},
		{"CommitAcquire after Abort", func() { s.CommitAcquire(aborted) }},
	} {
		t.Run(tc.name, func(t *testing.T) { mustPanicWith(t, errSettledTwice, tc.f) })
	}
	if st := s.Stats(); st != before {
		t.Fatalf("Stats changed by the misuses:\n%+v\nwant %+v", st, before)
	}
	mustInvariants(t, s)
	if !has(t, s, ns, 1, 100) || present(s, 2) {
		t.Fatal("block 1 lost or block 2 published")
	}
}

// TestCommitAcquireViewTracked: the View CommitAcquire returns is tracked
// like an Acquire's, and its Reservation is settled.
func TestCommitAcquireViewTracked(t *testing.T) {
	s := newTestStore(t, testConfig(2*mib))
	ns := nsOf(1)
	r, err := s.ReserveBlock(ns, key(1), Key{}, BlockMeta{Tokens: 16}, 100)
	if err != nil {
		t.Fatal(err)
	}
	v, ok := s.CommitAcquire(r)
	if !ok {
		t.Fatal("CommitAcquire failed")
	}
	mustInvariants(t, s)
	s.Release(v)
	mustPanicWith(t, errReleasedTwice, func() { s.Release(v) })
	mustPanicWith(t, errSettledTwice, func() { s.Abort(r) })
	mustInvariants(t, s)
}

// TestInvariantsSeeLeakedPin: checkInvariants compares the pins with the
// Views handed out, so a pin nobody holds is caught.
func TestInvariantsSeeLeakedPin(t *testing.T) {
	s := newTestStore(t, testConfig(2*mib))
	ns := nsOf(1)
	put(t, s, ns, 1, 0, 100)
	v, _ := s.Acquire(ns, key(1))
	s.mu.Lock()
	delete(s.mu.handed.views, v.tk.n) // a View lost without Release
	s.mu.Unlock()
	if err := s.checkInvariants(); err == nil {
		t.Fatal("checkInvariants missed a pin no View holds")
	}
}
