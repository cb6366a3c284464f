package tier

import (
	"bytes"
	"context"
	"crypto/sha256"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/gpucache/gpucache/api/identity"
	"github.com/gpucache/gpucache/internal/cold"
	"github.com/gpucache/gpucache/internal/hot"
	"github.com/gpucache/gpucache/internal/testfix"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func payloadOf(k identity.BlockKey, n int) []byte {
	b := make([]byte, n)
	s := sha256.Sum256(k[:])
	for i := range b {
		b[i] = s[i%32] ^ byte(i/32)
	}
	return b
}

func newTier(t testing.TB, store cold.Store, mod func(*Config)) *Tier {
	t.Helper()
	cfg := Config{Store: store, PackBlocks: 8}
	if mod != nil {
		mod(&cfg)
	}
	tr, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	return tr
}

// TestEvictedBlocksAreWrittenBehindAndRefilled runs the real hot tier with
// the tier's OnEvict hook: blocks pushed out of DRAM land in packs, and
// every one of them refills byte-identical under its namespace and key.
func TestEvictedBlocksAreWrittenBehindAndRefilled(t *testing.T) {
	store := cold.NewMem()
	tr := newTier(t, store, nil)
	hs, err := hot.New(hot.Config{CapacityBytes: 2 << 20, MinClass: 16 << 10, MaxClass: 64 << 10, SlabBytes: 1 << 20, OnEvict: tr.Evicted})
	if err != nil {
		t.Fatal(err)
	}
	defer hs.Close()
	ns := testfix.TinyNamespace("acme")
	d, _ := ns.Digest()
	tokens := make([]uint32, 100*16)
	for i := range tokens {
		tokens[i] = uint32(i)
	}
	ids, err := identity.Identities(ns, tokens)
	if err != nil {
		t.Fatal(err)
	}
	keys := make([]identity.BlockKey, len(ids))
	for i, id := range ids {
		keys[i], _ = id.Key()
		res, err := hs.ReserveBlock(d, keys[i], id.Parent, hot.BlockMeta{Tokens: id.ValidLength}, 32<<10)
		if err != nil {
			t.Fatal(err)
		}
		copy(res.Buf, payloadOf(keys[i], 32<<10))
		hs.Commit(res)
		tr.Remember(id)
	}
	ev := hs.Stats().Evictions
	if ev == 0 {
		t.Fatal("no evictions: the test stores too little")
	}
	rep := tr.Flush(context.Background(), true)
	if rep.Err != nil || rep.Failed != 0 {
		t.Fatalf("flush: %+v", rep)
	}
	st := tr.Stats()
	t.Logf("stats %+v report %+v", st, rep)
	if st.Offered != ev || st.DroppedFull+st.DroppedUnknown != 0 {
		t.Fatalf("offered %d of %d evictions, dropped %d/%d", st.Offered, ev, st.DroppedFull, st.DroppedUnknown)
	}
	dst := make([]byte, 64<<10)
	refilled := 0
	for _, k := range keys {
		if v, ok := hs.Acquire(d, k); ok {
			hs.Release(v)
			continue // still hot
		}
		n, res, err := tr.Refill(context.Background(), ns, k, dst)
		if !res.Hit || err != nil || !bytes.Equal(dst[:n], payloadOf(k, 32<<10)) {
			t.Fatalf("refill of an evicted block: %v %v", res, err)
		}
		refilled++
	}
	if uint64(refilled) != ev {
		t.Fatalf("refilled %d blocks, %d evicted", refilled, ev)
	}
	// Another tenant, same key: a miss.
	if _, res, _ := tr.Refill(context.Background(), testfix.TinyNamespace("other"), keys[0], dst); res.Hit {
		t.Fatal("another tenant's namespace refilled a block")
	}
}

func TestUnknownOrOverBudgetEvictionsAreDropped(t *testing.T) {
	tr := newTier(t, cold.NewMem(), func(c *Config) { c.PendingBytes = 100 })
	ns := testfix.TinyNamespace("acme")
	d, _ := ns.Digest()
	ids, _ := identity.Identities(ns, make([]uint32, 32))
	k0, _ := ids[0].Key()
	tr.Evicted(d, k0, ids[0].Parent, 16, make([]byte, 50)) // never remembered
	tr.Remember(ids[0])
	tr.Evicted(d, k0, ids[0].Parent, 16, make([]byte, 200)) // over the pending budget
	if st := tr.Stats(); st.DroppedUnknown != 1 || st.DroppedFull != 1 || st.Offered != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// TestReclaimKeepsPublishedPacks: the tier's periodic reclaim deletes
// nothing a visible manifest references.
func TestReclaimKeepsPublishedPacks(t *testing.T) {
	store := cold.NewMem()
	tr := newTier(t, store, func(c *Config) { c.ReclaimGrace = time.Nanosecond })
	ns := testfix.TinyNamespace("acme")
	d, _ := ns.Digest()
	ids, _ := identity.Identities(ns, make([]uint32, 4*16))
	for _, id := range ids {
		k, _ := id.Key()
		tr.Remember(id)
		tr.Evicted(d, k, id.Parent, id.ValidLength, payloadOf(k, 1024))
	}
	if rep := tr.Flush(context.Background(), true); rep.Completed != 1 {
		t.Fatalf("flush: %+v", rep)
	}
	rep := tr.Reclaim(context.Background())
	if rep.Deleted != 0 || rep.Errors != 0 || rep.Scanned == 0 {
		t.Fatalf("reclaim of published packs: %+v", rep)
	}
	dst := make([]byte, 1024)
	for _, id := range ids {
		k, _ := id.Key()
		if _, res, _ := tr.Refill(context.Background(), ns, k, dst); !res.Hit {
			t.Fatalf("block lost after reclaim: %v", res)
		}
	}
}
