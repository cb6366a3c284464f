package pack

import (
	"fmt"
	"runtime"
	"testing"
)

// TestMemCostCoversDecodedHeap checks MemCost's promise: it is at least the
// heap a decoded manifest keeps alive, so the refill's manifest cache,
// bounded by the sum of MemCost (32 MiB by default), holds no more heap
// than that. Shapes span one block to a full pack, short and long token
// runs per block.
func TestMemCostCoversDecodedHeap(t *testing.T) {
	for _, sh := range []struct{ blocks, blockTokens int }{{1, 16}, {8, 16}, {64, 16}, {64, 4}, {16, 256}} {
		t.Run(fmt.Sprintf("blocks=%d/tokens=%d", sh.blocks, sh.blockTokens), func(t *testing.T) {
			ns := testNamespace("acme")
			ns.Layout.BlockTokens = uint32(sh.blockTokens)
			p := mustBuild(t, ns, blocksOf(chain(t, ns, sh.blocks, 7), 64))
			body := p.Manifest.Body
			const copies = 200
			held := make([]*Manifest, copies)
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			for i := range held {
				held[i] = mustDecode(t, body)
			}
			runtime.GC()
			runtime.ReadMemStats(&after)
			heap := int64(after.HeapAlloc) - int64(before.HeapAlloc)
			cost := held[0].MemCost() * copies
			t.Logf("manifest %d B: heap %d B per decoded manifest, MemCost %d B", len(body), heap/copies, cost/copies)
			if heap > cost {
				t.Fatalf("%d decoded manifests keep %d B of heap, MemCost says %d B", copies, heap, cost)
			}
			runtime.KeepAlive(held)
		})
	}
}
