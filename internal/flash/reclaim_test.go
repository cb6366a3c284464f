package flash

import (
	"bytes"
	"context"
	"sync"
	"testing"

	"github.com/gpucache/gpucache/api/identity"
	"github.com/gpucache/gpucache/internal/lower/lowertest"
)

// Blocks of 200 KiB fill a 1 MiB segment with exactly five records
// (4 KiB segment header + 5 × (4 KiB header + 200 KiB)); a Capacity of
// 4 MiB holds four segments.
const fifth = 200 * kib

func reclaimConfig(t testing.TB, order string) (Config, chan uint64) {
	cfg := testConfig(t)
	cfg.SegmentBytes, cfg.Capacity, cfg.Reclaim = mib, 4*mib, order
	reclaimed := make(chan uint64, 16)
	cfg.Hooks = &Hooks{Reclaimed: func(seq uint64, _ int) { reclaimed <- seq }}
	return cfg, reclaimed
}

func deleteBlocks(t testing.TB, tr *Tier, bs ...lowertest.Block) {
	t.Helper()
	for _, b := range bs {
		if known, err := tr.Delete(context.Background(), b.ID.Namespace, b.Digest, b.Key); !known || err != nil {
			t.Fatalf("delete %d: %v %v", b.ID.Position, known, err)
		}
	}
}

func noReclaim(t testing.TB, reclaimed chan uint64) {
	t.Helper()
	select {
	case seq := <-reclaimed:
		t.Fatalf("segment %d reclaimed early", seq)
	default:
	}
}

func TestReclaimOldest(t *testing.T) {
	cfg, reclaimed := reclaimConfig(t, ReclaimOldest)
	tr := openTier(t, cfg)
	bs := blocks(t, "acme", "m1", 21, fifth)
	put(t, tr, bs[:20]...)
	flush(t, tr)
	noReclaim(t, reclaimed)
	if s, _ := location(t, tr, bs[19]); s.seq != 4 || stat(t, tr, "flash_segments") != 4 {
		t.Fatalf("block 19 in segment %d of %d", s.seq, stat(t, tr, "flash_segments"))
	}
	deleteBlocks(t, tr, bs[12]) // fewest-live would pick segment 3
	put(t, tr, bs[20])
	flush(t, tr)
	if seq := <-reclaimed; seq != 1 {
		t.Fatalf("reclaimed segment %d, want the oldest (1)", seq)
	}
	noReclaim(t, reclaimed)
	mustMiss(t, tr, bs[:5]...)
	mustRead(t, tr, bs[5:12]...)
	mustRead(t, tr, bs[13:]...)
	if stat(t, tr, "flash_reclaims") != 1 || stat(t, tr, "flash_reclaimed_blocks") != 5 {
		t.Fatalf("reclaims %d, blocks %d", stat(t, tr, "flash_reclaims"), stat(t, tr, "flash_reclaimed_blocks"))
	}
	if b := stat(t, tr, "flash_bytes"); b > uint64(cfg.Capacity) {
		t.Fatalf("flash_bytes %d past Capacity", b)
	}
}

func TestReclaimFewestLive(t *testing.T) {
	cfg, reclaimed := reclaimConfig(t, ReclaimFewestLive)
	tr := openTier(t, cfg)
	bs := blocks(t, "acme", "m1", 21, fifth)
	put(t, tr, bs[:20]...)
	flush(t, tr)
	deleteBlocks(t, tr, bs[5:9]...) // segment 2 keeps one live block
	put(t, tr, bs[20])
	flush(t, tr)
	if seq := <-reclaimed; seq != 2 {
		t.Fatalf("reclaimed segment %d, want the one with the fewest live bytes (2)", seq)
	}
	mustRead(t, tr, bs[:5]...)
	mustMiss(t, tr, bs[5:10]...)
	mustRead(t, tr, bs[10:]...)
}

// TestTombstoneSegmentWaitsForItsTarget: a segment whose tombstones kill
// records in an older segment that still exists is not reclaimed, even
// with no live bytes: deleting it first would bring the deleted blocks
// back at a restart.
func TestTombstoneSegmentWaitsForItsTarget(t *testing.T) {
	cfg, reclaimed := reclaimConfig(t, ReclaimFewestLive)
	tr := openTier(t, cfg)
	bs := blocks(t, "acme", "m1", 25, fifth)
	put(t, tr, bs[:15]...)
	flush(t, tr)
	deleteBlocks(t, tr, bs[0:4]...) // tombstones in segment 4, killing records of segment 1
	put(t, tr, bs[15:19]...)
	flush(t, tr)
	deleteBlocks(t, tr, bs[15:19]...) // segment 4 has no live bytes now
	flush(t, tr)
	if s, _ := location(t, tr, bs[4]); s.seq != 1 {
		t.Fatalf("block 4 in segment %d", s.seq)
	}
	put(t, tr, bs[19])
	flush(t, tr)
	if seq := <-reclaimed; seq != 1 {
		t.Fatalf("reclaimed segment %d; segment 4's tombstones protect against segment 1, which must go first", seq)
	}
	put(t, tr, bs[20:]...)
	flush(t, tr)
	if seq := <-reclaimed; seq != 4 {
		t.Fatalf("then reclaimed %d, want 4 (no live bytes, its target gone)", seq)
	}
	closeTier(t, tr)
	tr = openTier(t, cfg)
	mustMiss(t, tr, bs[:5]...)
	mustMiss(t, tr, bs[15:19]...)
	mustRead(t, tr, bs[5:15]...)
	mustRead(t, tr, bs[19:]...)
}

// TestOnReclaimGetsTheLiveBlocks: a reclaimed segment's live blocks are
// offered, byte for byte with their identity, from a goroutine that
// holds no lock of the tier; deleted ones are not.
func TestOnReclaimGetsTheLiveBlocks(t *testing.T) {
	cfg, reclaimed := reclaimConfig(t, ReclaimOldest)
	type got struct {
		parent  identity.BlockKey
		tokens  uint32
		payload []byte
	}
	var mu sync.Mutex
	offered := map[identity.BlockKey]got{}
	var tr *Tier
	cfg.OnReclaim = func(d identity.NamespaceDigest, key, parent identity.BlockKey, tokens uint32, payload []byte) bool {
		tr.Present(d, key) // the tier's lock is free
		mu.Lock()
		defer mu.Unlock()
		offered[key] = got{parent, tokens, bytes.Clone(payload)}
		return len(offered)%2 == 1
	}
	tr = openTier(t, cfg)
	bs := blocks(t, "acme", "m1", 21, fifth)
	put(t, tr, bs[:20]...)
	flush(t, tr)
	deleteBlocks(t, tr, bs[1])
	put(t, tr, bs[20])
	flush(t, tr)
	<-reclaimed
	mu.Lock()
	defer mu.Unlock()
	if len(offered) != 4 {
		t.Fatalf("%d blocks offered, want the 4 live ones", len(offered))
	}
	for _, b := range []lowertest.Block{bs[0], bs[2], bs[3], bs[4]} {
		g, ok := offered[b.Key]
		if !ok || g.parent != b.ID.Parent || g.tokens != 4 || !bytes.Equal(g.payload, b.Payload) {
			t.Fatalf("block %d offered %v, parent/tokens/bytes differ", b.ID.Position, ok)
		}
	}
	if stat(t, tr, "flash_reclaim_offered") != 4 || stat(t, tr, "flash_reclaim_taken") != 2 {
		t.Fatalf("offered %d taken %d", stat(t, tr, "flash_reclaim_offered"), stat(t, tr, "flash_reclaim_taken"))
	}
}

// TestSmallerCapacityTrimsAtOpen: files past a reduced Capacity are
// reclaimed, oldest first, when the tier opens.
func TestSmallerCapacityTrimsAtOpen(t *testing.T) {
	cfg, reclaimed := reclaimConfig(t, ReclaimOldest)
	cfg.Capacity = 8 * mib
	tr := openTier(t, cfg)
	bs := blocks(t, "acme", "m1", 30, fifth)
	put(t, tr, bs...)
	closeTier(t, tr)
	cfg.Capacity = 3 * mib
	tr = openTier(t, cfg)
	for want := uint64(1); want <= 3; want++ {
		if seq := <-reclaimed; seq != want {
			t.Fatalf("trimmed %d, want %d", seq, want)
		}
	}
	if b := stat(t, tr, "flash_bytes"); b > 3*mib {
		t.Fatalf("flash_bytes %d after a trim to 3 MiB", b)
	}
	mustRead(t, tr, bs[15:]...)
	mustMiss(t, tr, bs[:15]...)
}
