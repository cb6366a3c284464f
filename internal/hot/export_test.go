package hot

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// TestExport: chunks with a cursor visit every published block exactly
// once, with its bytes; reservations in flight and deleted blocks are not
// visited; a stop yields the same block again on the next call; nothing
// is touched or removed; a closed store exports nothing.
func TestExport(t *testing.T) {
	s := newTestStore(t, testConfig(8*mib))
	ns := nsOf(1)
	const n = 40
	for id := uint64(1); id <= n; id++ {
		put(t, s, ns, id, 0, 16*kib)
	}
	if deleted, _ := s.Delete(ns, key(7)); !deleted {
		t.Fatal("delete")
	}
	inflight, err := s.ReserveBlock(ns, key(99), Key{}, BlockMeta{Tokens: 16}, 16*kib)
	if err != nil {
		t.Fatal(err)
	}
	before := s.Stats()

	seen := map[uint64]int{}
	var cur uint32
	calls := 0
	for more := true; more; calls++ {
		cur, more = s.Export(cur, 7, func(gotNS Namespace, k, _ Key, _ uint32, p []byte) bool {
			id := binary.LittleEndian.Uint64(k[:])
			if gotNS != ns || !bytes.Equal(p, payload(id, 16*kib)) {
				t.Fatalf("block %d: wrong namespace or bytes", id)
			}
			seen[id]++
			return true
		})
	}
	if len(seen) != n-1 || seen[7] != 0 || seen[99] != 0 {
		t.Fatalf("exported %d blocks (deleted seen %d, in flight seen %d)", len(seen), seen[7], seen[99])
	}
	for id, c := range seen {
		if c != 1 {
			t.Fatalf("block %d exported %d times", id, c)
		}
	}
	if calls < (n-1)/7 {
		t.Fatalf("%d calls for %d blocks in chunks of 7", calls, n-1)
	}

	// A stop returns a cursor that yields the refused block again.
	var first, again Key
	cur, more := s.Export(0, 0, func(_ Namespace, k, _ Key, _ uint32, _ []byte) bool { first = k; return false })
	if !more {
		t.Fatal("a stopped export reported no more blocks")
	}
	s.Export(cur, 1, func(_ Namespace, k, _ Key, _ uint32, _ []byte) bool { again = k; return true })
	if first != again {
		t.Fatal("the cursor after a stop skipped the refused block")
	}
	if after := s.Stats(); after.Hits != before.Hits || after.Blocks != before.Blocks || after.Evictions != before.Evictions {
		t.Fatalf("export changed the store: %+v -> %+v", before, after)
	}
	mustInvariants(t, s)

	s.Abort(inflight)
	s.Close()
	if _, more := s.Export(0, 0, func(Namespace, Key, Key, uint32, []byte) bool { t.Fatal("closed store exported"); return true }); more {
		t.Fatal("closed store reported more")
	}
}
