package flash

import (
	"context"
	"errors"
	"testing"

	"github.com/gpucache/gpucache/internal/lower/lowertest"
)

// TestEvictedDeclines: an unknown tenant, a block larger than a segment
// holds and a closed tier are declined and counted; a block taken twice
// is written once.
func TestEvictedDeclines(t *testing.T) {
	cfg := testConfig(t)
	tr := openTier(t, cfg)
	b := blocks(t, "acme", "m1", 2, 8192)
	if tr.Evicted(b[0].Digest, b[0].Key, b[0].ID.Parent, 4, b[0].Payload) || stat(t, tr, "flash_declined_unknown") != 1 {
		t.Fatal("a block of an unknown tenant was taken")
	}
	big := blocks(t, "acme", "m2", 1, int(cfg.SegmentBytes)-2*align+1)[0]
	if lowertest.Put(tr, big) || stat(t, tr, "flash_declined_large") != 1 {
		t.Fatal("a block larger than a segment holds was taken")
	}
	fits := blocks(t, "acme", "m3", 1, int(cfg.SegmentBytes)-2*align)[0]
	put(t, tr, fits, b[0])
	put(t, tr, b[0])
	flush(t, tr)
	mustRead(t, tr, fits, b[0])
	if stat(t, tr, "flash_blocks_written") != 2 || stat(t, tr, "flash_already_held") != 1 {
		t.Fatalf("written %d, already held %d", stat(t, tr, "flash_blocks_written"), stat(t, tr, "flash_already_held"))
	}
	closeTier(t, tr)
	if lowertest.Put(tr, b[1]) || tr.Present(b[0].Digest, b[0].Key) || read(t, tr, b[0]) {
		t.Fatal("a closed tier takes or serves blocks")
	}
	if err := tr.Flush(context.Background()); !errors.Is(err, ErrClosed) {
		t.Fatalf("flush after close: %v", err)
	}
}

// TestStatsNames: the STAT entries the daemon and the dashboards expect.
func TestStatsNames(t *testing.T) {
	tr := openTier(t, testConfig(t))
	names := map[string]bool{}
	for _, e := range tr.Stats() {
		names[e.Name] = true
	}
	for _, e := range tr.TenantStats("acme") {
		names[e.Name] = true
	}
	for _, n := range []string{"flash_bytes", "flash_live_bytes", "flash_segments", "flash_blocks", "flash_capacity_bytes",
		"flash_write_buffer_bytes", "flash_degraded", "flash_direct", "flash_hits", "flash_misses", "flash_reads",
		"flash_read_bytes", "flash_writes", "flash_written_bytes", "flash_blocks_written", "flash_declined_full",
		"flash_declined_unknown", "flash_reclaims", "flash_reclaimed_blocks", "flash_corrupt", "flash_read_errors",
		"flash_write_errors", "flash_segments_lost", "flash_quota_evictions", "flash_deletes", "flash_read_ns",
		"flash_write_ns", "tenant_flash_bytes", "tenant_flash_quota_bytes"} {
		if !names[n] {
			t.Errorf("no STAT entry %s", n)
		}
	}
}

// TestGaugesFollowTheData: bytes, live bytes, blocks and segments after
// writes, a delete and a restart.
func TestGaugesFollowTheData(t *testing.T) {
	cfg := testConfig(t)
	tr := openTier(t, cfg)
	bs := blocks(t, "acme", "m1", 4, 10_000)
	put(t, tr, bs...)
	flush(t, tr)
	wantBytes := uint64(segHeaderSize + 4*(recHeaderSize+roundUp(10_000)))
	if stat(t, tr, "flash_bytes") != wantBytes || stat(t, tr, "flash_live_bytes") != 40_000 ||
		stat(t, tr, "flash_blocks") != 4 || stat(t, tr, "flash_segments") != 1 || stat(t, tr, "flash_capacity_bytes") != uint64(cfg.Capacity) {
		t.Fatalf("bytes %d (want %d), live %d, blocks %d, segments %d", stat(t, tr, "flash_bytes"), wantBytes,
			stat(t, tr, "flash_live_bytes"), stat(t, tr, "flash_blocks"), stat(t, tr, "flash_segments"))
	}
	deleteBlocks(t, tr, bs[0])
	flush(t, tr)
	if stat(t, tr, "flash_bytes") != wantBytes+recHeaderSize || stat(t, tr, "flash_live_bytes") != 30_000 ||
		stat(t, tr, "flash_deletes") != 1 || stat(t, tr, "flash_tombstones_written") != 1 {
		t.Fatalf("after a delete: bytes %d, live %d", stat(t, tr, "flash_bytes"), stat(t, tr, "flash_live_bytes"))
	}
	mustRead(t, tr, bs[1])
	if stat(t, tr, "flash_hits") != 1 || stat(t, tr, "flash_read_bytes") != 10_000 {
		t.Fatalf("hits %d, read bytes %d", stat(t, tr, "flash_hits"), stat(t, tr, "flash_read_bytes"))
	}
	closeTier(t, tr)
	tr = openTier(t, cfg)
	if stat(t, tr, "flash_bytes") != wantBytes+recHeaderSize || stat(t, tr, "flash_live_bytes") != 30_000 || stat(t, tr, "flash_blocks") != 3 {
		t.Fatalf("after a restart: bytes %d, live %d, blocks %d", stat(t, tr, "flash_bytes"), stat(t, tr, "flash_live_bytes"), stat(t, tr, "flash_blocks"))
	}
}

// TestStoredKeepsTokenChainBlocks: a token-chain block stored again (a
// refill entering DRAM) keeps its copy on flash, and its next eviction
// costs no write.
func TestStoredKeepsTokenChainBlocks(t *testing.T) {
	tr := openTier(t, testConfig(t))
	b := blocks(t, "acme", "m1", 1, 8192)[0]
	put(t, tr, b)
	flush(t, tr)
	put(t, tr, b) // Stored, then Evicted again
	flush(t, tr)
	mustRead(t, tr, b)
	if stat(t, tr, "flash_blocks_written") != 1 || stat(t, tr, "flash_already_held") != 1 || stat(t, tr, "flash_overwrites") != 0 {
		t.Fatalf("written %d, already held %d, overwrites %d", stat(t, tr, "flash_blocks_written"),
			stat(t, tr, "flash_already_held"), stat(t, tr, "flash_overwrites"))
	}
}
