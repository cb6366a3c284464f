package hot

import (
	"bytes"
	"testing"
)

// TestOnEvictReportsEvictedBlocks: every block evicted for space is handed
// to OnEvict with its identity and exact bytes before its slot is reused;
// deleted blocks are not reported.
func TestOnEvictReportsEvictedBlocks(t *testing.T) {
	cfg := testConfig(4 * mib)
	type evicted struct {
		ns          Namespace
		key, parent Key
		data        []byte
	}
	var got []evicted
	cfg.OnEvict = func(ns Namespace, k, p Key, tokens uint32, payload []byte) bool {
		if tokens != 16 {
			t.Errorf("tokens %d", tokens)
		}
		got = append(got, evicted{ns, k, p, bytes.Clone(payload)})
		return true
	}
	s := newTestStore(t, cfg)
	ns := nsOf(1)
	put(t, s, ns, 1, 0, 64*kib)
	if deleted, _ := s.Delete(ns, key(1)); !deleted {
		t.Fatal("delete failed")
	}
	const n = 200 // 200 × 64 KiB is about 3× the capacity
	for id := uint64(2); id < n; id++ {
		put(t, s, ns, id, id-1, 64*kib)
	}
	if len(got) == 0 || uint64(len(got)) != s.Stats().Evictions {
		t.Fatalf("%d blocks reported, %d evicted", len(got), s.Stats().Evictions)
	}
	for _, e := range got {
		id := uint64(e.key[0]) | uint64(e.key[1])<<8
		if e.ns != ns || !bytes.Equal(e.data, payload(id, 64*kib)) {
			t.Fatalf("evicted block %d reported with wrong identity or bytes", id)
		}
		if id == 1 {
			t.Fatal("a deleted block was reported as evicted")
		}
		if e.parent != key(id-1) {
			t.Fatalf("block %d reported with parent %x", id, e.parent[:2])
		}
	}
}

// TestCommitAcquirePinsAtOnce: the block is published and pinned in one
// step; a capacity storm right after cannot evict it before Release.
func TestCommitAcquirePinsAtOnce(t *testing.T) {
	s := newTestStore(t, testConfig(2*mib))
	misused := catchMisuse(s)
	ns := nsOf(1)
	r, err := s.ReserveBlock(ns, key(1), Key{}, BlockMeta{Tokens: 16}, 64*kib)
	if err != nil {
		t.Fatal(err)
	}
	fillPayload(r.Buf, 1)
	v, ok := s.CommitAcquire(r)
	if !ok {
		t.Fatal("CommitAcquire failed")
	}
	for id := uint64(2); id < 100; id++ {
		_ = tryPut(s, ns, id, 0, 64*kib)
	}
	if !bytes.Equal(v.Bytes, payload(1, 64*kib)) {
		t.Fatal("pinned block changed under a storm")
	}
	s.Release(v)
	if _, ok := s.CommitAcquire(r); ok {
		t.Fatal("a stale reservation committed twice")
	}
	misused.expect(t, errSettledTwice, 1)
}
