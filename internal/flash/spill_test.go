package flash

import (
	"sync"
	"testing"

	"github.com/gpucache/gpucache/internal/lower/lowertest"
)

// TestSpillTellsFullFromDeclined: the drain spill offers DRAM's blocks
// with Spill, flushes when the write buffer is full and offers the block
// again. So a full buffer must say Full, and a block that can never fit
// (larger than the write buffer) must say Declined, or the spill would
// flush and offer it forever.
func TestSpillTellsFullFromDeclined(t *testing.T) {
	cfg := testConfig(t)
	cfg.WriteBuffer = 2 * mib
	hold := make(chan struct{})
	var once sync.Once
	release := func() { once.Do(func() { close(hold) }) }
	cfg.Hooks = &Hooks{BeforeWrite: func(uint64, int64, int) { <-hold }}
	tr := openTier(t, cfg)
	t.Cleanup(release) // before the tier's Close (cleanups run last first)
	bs := blocks(t, "acme", "m1", 3, mib)
	big := blocks(t, "acme", "m2", 1, 3*mib)[0]
	offer := func(b lowertest.Block) Offer {
		tr.Stored(b.ID, b.Digest, b.Key)
		return tr.Spill(b.Digest, b.Key, b.ID.Parent, uint32(len(b.ID.Tokens)), b.Payload)
	}
	if o0, o1 := offer(bs[0]), offer(bs[1]); o0 != Taken || o1 != Taken {
		t.Fatalf("two blocks into an empty 2 MiB buffer: %v %v", o0, o1)
	}
	if o := offer(bs[2]); o != Full {
		t.Fatalf("a third block with the writer held: %v, want Full", o)
	}
	if o := offer(big); o != Declined {
		t.Fatalf("a block larger than the write buffer: %v, want Declined", o)
	}
	release()
	flush(t, tr)
	if o := offer(bs[2]); o != Taken {
		t.Fatalf("the third block after a flush: %v, want Taken", o)
	}
	flush(t, tr)
	mustRead(t, tr, bs...)
	mustMiss(t, tr, big)
}
