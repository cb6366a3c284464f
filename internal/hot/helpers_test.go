package hot

import (
	"encoding/binary"
	"errors"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	kib = 1 << 10
	mib = 1 << 20
)

// testConfig is a small store: 16 KiB..1 MiB classes in 1 MiB slabs.
//
// The store reads time.Now: a test that needs leases to expire (or not to)
// at a given time runs in a testing/synctest bubble, where time.Sleep
// advances the fake clock at once.
func testConfig(capacity int64) Config {
	return Config{
		CapacityBytes: capacity,
		MinClass:      16 * kib,
		MaxClass:      1 * mib,
		SlabBytes:     1 * mib,
		Prefault:      PrefaultPopulate,
	}
}

func newTestStore(t testing.TB, cfg Config) *Store {
	t.Helper()
	s, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// key returns a distinct key for id; id is in its first 8 bytes.
func key(id uint64) Key {
	var k Key
	binary.LittleEndian.PutUint64(k[:], id)
	k[31] = 0xc0
	return k
}

func nsOf(id uint64) Namespace {
	var n Namespace
	binary.LittleEndian.PutUint64(n[:], id)
	n[31] = 0x5a
	return n
}

// payload is the deterministic content of block id: its first 8 bytes encode
// id, the rest is a pattern of id and offset.
func payload(id uint64, size int) []byte {
	b := make([]byte, size)
	fillPayload(b, id)
	return b
}

func fillPayload(b []byte, id uint64) {
	for i := range b {
		b[i] = byte(id*131 + uint64(i)*7)
	}
	if len(b) >= 8 {
		binary.LittleEndian.PutUint64(b, id)
	}
}

// put writes block id under ns with the given parent (0 = none) and size.
func put(t testing.TB, s *Store, ns Namespace, id, parent uint64, size int) {
	t.Helper()
	if err := tryPut(s, ns, id, parent, size); err != nil {
		t.Fatalf("put %d: %v", id, err)
	}
}

func tryPut(s *Store, ns Namespace, id, parent uint64, size int) error {
	var p Key
	if parent != 0 {
		p = key(parent)
	}
	r, err := s.ReserveBlock(ns, key(id), p, BlockMeta{Tokens: 16}, size)
	if err != nil {
		return err
	}
	fillPayload(r.Buf, id)
	s.Commit(r)
	return nil
}

// has reports whether block id is readable under ns with the right bytes.
func has(t testing.TB, s *Store, ns Namespace, id uint64, size int) bool {
	t.Helper()
	v, ok := s.Acquire(ns, key(id))
	if !ok {
		return false
	}
	defer s.Release(v)
	want := payload(id, size)
	if string(v.Bytes) != string(want) {
		t.Fatalf("block %d: bytes differ (len %d, want %d)", id, len(v.Bytes), size)
	}
	return true
}

// present reports whether block id is cached, without touching the LRU or
// the counters.
func present(s *Store, id uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	idx, ok := s.mu.index[key(id)]
	return ok && s.mu.entries[idx].state == statePublished
}

func mustInvariants(t testing.TB, s *Store) {
	t.Helper()
	if err := s.checkInvariants(); err != nil {
		t.Fatal(err)
	}
}

// misuses collects the ownership misuses the invariants build reports
// (testHooks.misuse) instead of panicking.
type misuses struct{ errs []error }

// catchMisuse makes s report misuses to the returned collector. Call it
// before s is shared.
func catchMisuse(s *Store) *misuses {
	m := &misuses{}
	s.hooks.misuse = func(err error) { m.errs = append(m.errs, err) }
	return m
}

// expect checks that the calls since the last expect reported n misuses,
// each matching want, in the invariants build, and none in a release
// build (which cannot tell them).
func (m *misuses) expect(t testing.TB, want error, n int) {
	t.Helper()
	if !invariantsOn {
		n = 0
	}
	if len(m.errs) != n {
		t.Fatalf("misuses reported: %v; want %d of %q", m.errs, n, want)
	}
	for _, err := range m.errs {
		if !errors.Is(err, want) {
			t.Fatalf("misuse %v, want %q", err, want)
		}
	}
	m.errs = nil
}
