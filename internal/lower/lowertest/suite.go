// Package lowertest is the conformance suite every lower.Tier passes: the
// flash tier, the cold tier, a chain of them and the in-memory Mem.
package lowertest

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/gpucache/gpucache/api/identity"
	"github.com/gpucache/gpucache/internal/lower"
	"github.com/gpucache/gpucache/internal/testfix"
)

// Harness is one tier under test.
type Harness struct {
	Tier lower.Tier
	// Settle makes every block the tier took readable by Refill (flushes
	// its write-behind). Nil: blocks are readable once Evicted returns.
	Settle func(t *testing.T)
}

// Block is a test block: its identity, digest, key and payload.
type Block struct {
	ID      identity.CacheIdentity
	Digest  identity.NamespaceDigest
	Key     identity.BlockKey
	Payload []byte
}

// Chain returns n chained blocks of tenant under namespace model, payload
// sizes cycling through sizes.
func Chain(t testing.TB, tenant, model string, n int, sizes ...int) []Block {
	t.Helper()
	if len(sizes) == 0 {
		sizes = []int{4096}
	}
	ns := testfix.RawNamespace(tenant, model)
	ns.Layout.BlockTokens = 4
	d, err := ns.Digest()
	if err != nil {
		t.Fatal(err)
	}
	var out []Block
	var parent identity.BlockKey
	for i := range n {
		id := identity.CacheIdentity{Namespace: ns, Parent: parent, Position: uint64(i) * 4,
			Tokens: []uint32{uint32(i), uint32(i + 1), uint32(i + 2), uint32(i + 3)}, ValidLength: 4}
		key, err := id.Key()
		if err != nil {
			t.Fatal(err)
		}
		size := sizes[i%len(sizes)]
		out = append(out, Block{ID: id, Digest: d, Key: key, Payload: testfix.Payload(size, byte(i)+byte(len(model)))})
		parent = key
	}
	return out
}

// Put offers b to tier as DRAM's write path does: Stored when it enters
// DRAM, Evicted when it leaves.
func Put(tier lower.Tier, b Block) bool {
	tier.Stored(b.ID, b.Digest, b.Key)
	return tier.Evicted(b.Digest, b.Key, b.ID.Parent, uint32(len(b.ID.Tokens)), b.Payload)
}

// Run runs the suite; newTier returns a fresh, empty tier for each subtest.
func Run(t *testing.T, newTier func(t *testing.T) Harness) {
	ctx := context.Background()
	settle := func(t *testing.T, h Harness) {
		if h.Settle != nil {
			h.Settle(t)
		}
	}
	t.Run("RoundTrip", func(t *testing.T) {
		h := newTier(t)
		blocks := Chain(t, "acme", "m1", 12, 4096, 64<<10, 1000, 1<<20)
		for _, b := range blocks {
			if !Put(h.Tier, b) {
				t.Fatalf("block %d declined by an empty tier", b.ID.Position)
			}
		}
		settle(t, h)
		for i, b := range blocks {
			if !h.Tier.Present(b.Digest, b.Key) {
				t.Errorf("block %d not present after it was taken", i)
			}
			got, err := lower.ReadAll(ctx, h.Tier, b.ID.Namespace, b.Digest, b.Key)
			if err != nil {
				t.Fatalf("block %d: %v", i, err)
			}
			if !bytes.Equal(got, b.Payload) {
				t.Fatalf("block %d: refilled %d bytes differ from the %d stored", i, len(got), len(b.Payload))
			}
		}
	})
	t.Run("OtherNamespaceMisses", func(t *testing.T) {
		h := newTier(t)
		b := Chain(t, "acme", "m1", 1)[0]
		Put(h.Tier, b)
		settle(t, h)
		for _, other := range []identity.Namespace{testfix.RawNamespace("beta", "m1"), testfix.RawNamespace("acme", "m2")} {
			other.Layout.BlockTokens = 4
			d, err := other.Digest()
			if err != nil {
				t.Fatal(err)
			}
			if h.Tier.Present(d, b.Key) {
				t.Errorf("%s/%s: present under another namespace", other.Tenant, other.ModelID)
			}
			if got, err := lower.ReadAll(ctx, h.Tier, other, d, b.Key); err == nil {
				t.Errorf("%s/%s: another namespace got %d bytes", other.Tenant, other.ModelID, len(got))
			}
		}
	})
	t.Run("UnknownMisses", func(t *testing.T) {
		h := newTier(t)
		b := Chain(t, "acme", "m1", 1)[0]
		if h.Tier.Present(b.Digest, b.Key) {
			t.Fatal("an empty tier reports a block present")
		}
		if _, err := lower.ReadAll(ctx, h.Tier, b.ID.Namespace, b.Digest, b.Key); err == nil {
			t.Fatal("an empty tier refilled a block")
		}
		if known, err := h.Tier.Delete(ctx, b.ID.Namespace, b.Digest, b.Key); known || err != nil {
			t.Fatalf("delete of an unknown block: known %v, err %v", known, err)
		}
	})
	t.Run("Delete", func(t *testing.T) {
		h := newTier(t)
		blocks := Chain(t, "acme", "m1", 3)
		for _, b := range blocks {
			Put(h.Tier, b)
		}
		settle(t, h)
		b := blocks[1]
		if known, err := h.Tier.Delete(ctx, b.ID.Namespace, b.Digest, b.Key); !known || err != nil {
			t.Fatalf("delete: known %v, err %v", known, err)
		}
		settle(t, h)
		if h.Tier.Present(b.Digest, b.Key) {
			t.Error("present after delete")
		}
		if _, err := lower.ReadAll(ctx, h.Tier, b.ID.Namespace, b.Digest, b.Key); err == nil {
			t.Error("refilled after delete")
		}
		for _, o := range []Block{blocks[0], blocks[2]} {
			if _, err := lower.ReadAll(ctx, h.Tier, o.ID.Namespace, o.Digest, o.Key); err != nil {
				t.Errorf("block %d lost to another block's delete: %v", o.ID.Position, err)
			}
		}
	})
	t.Run("DeleteBeforeSettle", func(t *testing.T) {
		h := newTier(t)
		b := Chain(t, "acme", "m1", 1)[0]
		Put(h.Tier, b)
		if _, err := h.Tier.Delete(ctx, b.ID.Namespace, b.Digest, b.Key); err != nil {
			t.Fatal(err)
		}
		settle(t, h)
		if _, err := lower.ReadAll(ctx, h.Tier, b.ID.Namespace, b.Digest, b.Key); err == nil {
			t.Error("a block deleted while queued came back once the queue was written")
		}
	})
	t.Run("NoSlot", func(t *testing.T) {
		h := newTier(t)
		b := Chain(t, "acme", "m1", 1)[0]
		Put(h.Tier, b)
		settle(t, h)
		calls := 0
		if _, ok := h.Tier.Refill(ctx, b.ID.Namespace, b.Digest, b.Key, func(int) ([]byte, bool) { calls++; return nil, false }); ok {
			t.Error("a refill without a slot hit")
		}
		if calls > 1 {
			t.Errorf("alloc called %d times in one refill", calls)
		}
		if _, err := lower.ReadAll(ctx, h.Tier, b.ID.Namespace, b.Digest, b.Key); err != nil {
			t.Errorf("the block is gone after a refill without a slot: %v", err)
		}
	})
	t.Run("Concurrent", func(t *testing.T) {
		h := newTier(t)
		blocks := Chain(t, "acme", "m1", 16, 8192, 3000)
		var wg sync.WaitGroup
		errs := make(chan error, 64)
		for w := range 4 {
			wg.Go(func() {
				for i, b := range blocks {
					if i%4 == w {
						Put(h.Tier, b)
					}
				}
			})
		}
		wg.Wait()
		settle(t, h)
		for range 4 {
			wg.Go(func() {
				for _, b := range blocks {
					got, err := lower.ReadAll(ctx, h.Tier, b.ID.Namespace, b.Digest, b.Key)
					if err == nil && !bytes.Equal(got, b.Payload) {
						errs <- fmt.Errorf("block %d: wrong bytes", b.ID.Position)
						return
					}
					if err != nil {
						errs <- fmt.Errorf("block %d: %v", b.ID.Position, err)
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
	})
	t.Run("Stats", func(t *testing.T) {
		h := newTier(t)
		seen := map[string]bool{}
		for _, e := range h.Tier.Stats() {
			if seen[e.Name] {
				t.Errorf("STAT entry %q twice", e.Name)
			}
			seen[e.Name] = true
		}
		for _, e := range h.Tier.TenantStats("acme") {
			if seen[e.Name] {
				t.Errorf("tenant STAT entry %q also a server-wide one, or twice", e.Name)
			}
			seen[e.Name] = true
		}
	})
}
