package tier

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/gpucache/gpucache/api/identity"
	"github.com/gpucache/gpucache/internal/cold"
	"github.com/gpucache/gpucache/internal/hot"
	"github.com/gpucache/gpucache/internal/testfix"
)

// TestLargeEvictedBlocksAreWrittenBehind: with the default write-behind
// budget (cold_pending), a 32 MiB and a 64 MiB block evicted from a hot
// tier of 64 MiB classes are written to the cold tier and refill
// byte-identical. Before, the 64 MiB default budget could never take a
// 64 MiB block plus its metadata allowance: the largest block the hot tier
// accepts was always dropped.
func TestLargeEvictedBlocksAreWrittenBehind(t *testing.T) {
	// The refill budget is a bound on a stuck store, not a pass criterion:
	// a 64 MiB refill under -race on a busy 2-core machine can take longer
	// than the 2 s default.
	tr := newTier(t, cold.NewMem(), func(c *Config) { c.RefillBudget = time.Hour })
	hs, err := hot.New(hot.Config{CapacityBytes: 64 << 20, MinClass: 16 << 10, MaxClass: 64 << 20, SlabBytes: 64 << 20,
		Prefault: hot.PrefaultNone, OnEvict: tr.Evicted})
	if err != nil {
		t.Fatal(err)
	}
	defer hs.Close()
	ns := testfix.TinyNamespace("acme")
	d, _ := ns.Digest()
	put := func(name string, size int) (identity.BlockKey, []byte) {
		t.Helper()
		id := identity.CacheIdentity{Namespace: ns, Opaque: []byte(name)}
		k := id.KeyIn(d)
		res, err := hs.ReserveBlock(d, k, identity.BlockKey{}, hot.BlockMeta{Tokens: 0}, size)
		if err != nil {
			t.Fatalf("put %s: %v", name, err)
		}
		p := payloadOf(k, size)
		copy(res.Buf, p)
		hs.Commit(res)
		tr.Remember(id)
		return k, p
	}
	k32, p32 := put("chunk-32MiB", 32<<20)
	k64, p64 := put("chunk-64MiB", 64<<20) // evicts the 32 MiB block
	if rep := tr.Flush(context.Background(), true); rep.Failed != 0 || rep.Err != nil {
		t.Fatalf("flush: %+v", rep)
	}
	put("chunk-64MiB-next", 64<<20) // evicts the 64 MiB block
	if rep := tr.Flush(context.Background(), true); rep.Failed != 0 || rep.Err != nil {
		t.Fatalf("flush: %+v", rep)
	}
	st := tr.Stats()
	if st.Offered != 2 || st.DroppedFull != 0 || st.DroppedUnknown != 0 || st.PacksGivenUp != 0 {
		t.Fatalf("write-behind of the evicted large blocks: offered %d, dropped %d (budget full) %d (unknown), %d packs given up; budget %d",
			st.Offered, st.DroppedFull, st.DroppedUnknown, st.PacksGivenUp, st.LimitBytes)
	}
	for _, b := range []struct {
		k identity.BlockKey
		p []byte
	}{{k32, p32}, {k64, p64}} {
		var buf []byte
		n, res, err := tr.RefillInto(context.Background(), ns, b.k, func(n int) ([]byte, bool) {
			buf = make([]byte, n)
			return buf, true
		})
		if !res.Hit || err != nil || !bytes.Equal(buf[:n], b.p) {
			t.Fatalf("refill of an evicted %d MiB block: %v %v", len(b.p)>>20, res, err)
		}
	}
	if st := tr.Stats(); st.HeldBytes != 0 {
		t.Fatalf("the budget still holds %d bytes after the packs were written", st.HeldBytes)
	}
}

// TestMaxBlockOverheadBoundsTheAllowance: MaxBlockOverhead is at least the
// largest metadata allowance costLocked can charge a block.
func TestMaxBlockOverheadBoundsTheAllowance(t *testing.T) {
	most := 4*int64(identity.MaxBlockTokens) + 2*int64(identity.MaxCanonicalLen) + int64(identity.MaxOpaqueLen) + blockSlack
	if MaxBlockOverhead < most {
		t.Fatalf("MaxBlockOverhead %d < the largest allowance %d", MaxBlockOverhead, most)
	}
}

// TestPacksCloseAtPackBytes: a flush cuts a namespace's batch into packs
// of at most PackBytes plus one block, so the pack the heap builds stays
// bounded with large blocks, and every block still refills.
func TestPacksCloseAtPackBytes(t *testing.T) {
	tr := newTier(t, cold.NewMem(), func(c *Config) { c.PackBytes = 1 << 20 })
	ns := testfix.TinyNamespace("acme")
	d, _ := ns.Digest()
	var keys []identity.BlockKey
	for i := range 5 {
		id := identity.CacheIdentity{Namespace: ns, Opaque: []byte{'b', byte('0' + i)}}
		k := id.KeyIn(d)
		tr.Remember(id)
		tr.Evicted(d, k, identity.BlockKey{}, 0, payloadOf(k, 600<<10))
		keys = append(keys, k)
	}
	rep := tr.Flush(context.Background(), true)
	if st := tr.Stats(); st.PacksBuilt != 3 || rep.Completed != 3 {
		t.Fatalf("5 blocks of 600 KiB with PackBytes 1 MiB: %d packs built, %d written; want 3 (2+2+1)", st.PacksBuilt, rep.Completed)
	}
	for _, k := range keys {
		buf := make([]byte, 600<<10)
		if n, res, _ := tr.Refill(context.Background(), ns, k, buf); !res.Hit || !bytes.Equal(buf[:n], payloadOf(k, 600<<10)) {
			t.Fatalf("refill: %v", res)
		}
	}
}
