package lower_test

import (
	"bytes"
	"context"
	"testing"

	"github.com/gpucache/gpucache/internal/lower"
	"github.com/gpucache/gpucache/internal/lower/lowertest"
)

func TestMemConforms(t *testing.T) {
	lowertest.Run(t, func(*testing.T) lowertest.Harness { return lowertest.Harness{Tier: &lowertest.Mem{}} })
}

func TestChainConforms(t *testing.T) {
	for _, through := range []bool{false, true} {
		lowertest.Run(t, func(*testing.T) lowertest.Harness {
			return lowertest.Harness{Tier: lower.NewChain(through, &lowertest.Mem{Name: "upper", Limit: 1 << 20}, &lowertest.Mem{Name: "lower"})}
		})
	}
}

// TestChainOrder: a refill is served by the upper tier when it holds the
// block, by the lower one otherwise; an eviction goes to the upper tier
// only, or to both with write-through; a block the full upper tier
// declines goes to the lower one.
func TestChainOrder(t *testing.T) {
	ctx := context.Background()
	blocks := lowertest.Chain(t, "acme", "m1", 3, 600<<10)
	for _, through := range []bool{false, true} {
		up, down := &lowertest.Mem{Name: "upper", Limit: 1 << 20}, &lowertest.Mem{Name: "lower"}
		c := lower.NewChain(through, up, down)
		for _, b := range blocks[:2] { // the second does not fit the upper tier
			if !lowertest.Put(c, b) {
				t.Fatal("the chain declined a block")
			}
		}
		if !up.Present(blocks[0].Digest, blocks[0].Key) || up.Present(blocks[1].Digest, blocks[1].Key) {
			t.Fatal("the upper tier should hold the first block only")
		}
		if got := down.Present(blocks[0].Digest, blocks[0].Key); got != through {
			t.Fatalf("write-through %v: the lower tier holds the first block: %v", through, got)
		}
		if !down.Present(blocks[1].Digest, blocks[1].Key) {
			t.Fatal("the block the upper tier declined is not in the lower one")
		}
		for _, b := range blocks[:2] {
			got, err := lower.ReadAll(ctx, c, b.ID.Namespace, b.Digest, b.Key)
			if err != nil || !bytes.Equal(got, b.Payload) {
				t.Fatalf("refill through the chain: %v", err)
			}
		}
		if down.Stats()[1].Value != 1 { // refills asked of the lower tier
			t.Fatalf("write-through %v: the lower tier was asked %d refills, want 1 (the upper tier serves what it holds)", through, down.Stats()[1].Value)
		}
		if !c.Present(blocks[1].Digest, blocks[1].Key) || c.Present(blocks[2].Digest, blocks[2].Key) {
			t.Fatal("the chain's presence is not its tiers'")
		}
	}
}

// TestRefillFromNamesTier: RefillFrom reports the chain's tier that served
// a refill (the upper tier for what it holds, the lower one otherwise,
// through a nested chain too), the tier itself when it is not a chain,
// and nil on a miss; the server labels its latency histograms with it.
func TestRefillFromNamesTier(t *testing.T) {
	ctx := context.Background()
	blocks := lowertest.Chain(t, "acme", "m1", 3, 600<<10)
	up, mid, down := &lowertest.Mem{Name: "upper", Limit: 1 << 20}, &lowertest.Mem{Name: "mid", Limit: 1 << 20}, &lowertest.Mem{Name: "lower"}
	c := lower.NewChain(false, up, lower.NewChain(false, mid, down))
	lowertest.Put(up, blocks[0])
	lowertest.Put(down, blocks[1])
	alloc := func(n int) ([]byte, bool) { return make([]byte, n), true }
	for i, want := range []lower.Tier{up, down, nil} {
		b := blocks[i]
		n, by := lower.RefillFrom(ctx, c, b.ID.Namespace, b.Digest, b.Key, alloc)
		if by != want || (want != nil && n != len(b.Payload)) {
			t.Fatalf("block %d: served by %v (%d bytes), want %v", i, by, n, want)
		}
	}
	if _, by := lower.RefillFrom(ctx, down, blocks[1].ID.Namespace, blocks[1].Digest, blocks[1].Key, alloc); by != down {
		t.Fatalf("a tier that is not a chain: served by %v, want itself", by)
	}
	if lower.IsLocal(up) {
		t.Fatal("a Mem tier is not local")
	}
}
