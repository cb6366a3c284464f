package policy

import (
	"math/rand/v2"
	"testing"
)

// TestKeyTable: put, get and delete agree with a map under random use.
func TestKeyTable(t *testing.T) {
	var kt keyTable
	ref := map[uint64]ID{}
	rng := rand.New(rand.NewPCG(3, 4))
	for range 200000 {
		k := 1 + uint64(rng.IntN(3000))
		switch rng.IntN(3) {
		case 0:
			id := ID(rng.Uint32())
			kt.put(k, id)
			ref[k] = id
		case 1:
			kt.del(k)
			delete(ref, k)
		}
		got, ok := kt.get(k)
		want, wok := ref[k]
		if ok != wok || got != want || kt.n != len(ref) {
			t.Fatalf("key %d: got %d %v, want %d %v (n %d, %d)", k, got, ok, want, wok, kt.n, len(ref))
		}
	}
}

// TestAdaptiveCompare: the followed candidate changes only on evidence —
// a lead of switchMargin over LRU and over the followed one, on both
// metrics' floor — and falls back when it drops below LRU.
func TestAdaptiveCompare(t *testing.T) {
	p := NewAdaptive()
	set := func(i int, hits, saved float64) { p.shadows[i].hits, p.shadows[i].saved = hits, saved }
	for i := range p.shadows {
		set(i, 1000, 1e6)
	}
	set(2, 1005, 1.005e6) // chainttl: +0.5%, under the margin
	p.compare()
	if p.Following() != "lru" {
		t.Fatalf("followed %s on a 0.5%% lead", p.Following())
	}
	set(2, 1100, 1.1e6) // chainttl +10%
	set(3, 900, 2e6)    // cost: more compute, 10% fewer hits: inadmissible
	p.compare()
	if p.Following() != ChainTTLName {
		t.Fatalf("following %s, want %s", p.Following(), ChainTTLName)
	}
	set(0, 1000, 1e6)
	set(2, 990, 0.99e6) // 1% below LRU: kept (hysteresis)
	p.compare()
	if p.Following() != ChainTTLName {
		t.Fatalf("dropped %s at 0.99× LRU", ChainTTLName)
	}
	set(0, 1000, 1e6)
	set(2, 1200, 0.9e6) // compute 10% below LRU: dropped
	set(3, 1000, 1e6)
	p.compare()
	if p.Following() != "lru" || p.Switches() != 2 {
		t.Fatalf("following %s after %d switches, want lru after 2", p.Following(), p.Switches())
	}
}

// TestAdaptiveShadowsBounded: before the cache ever evicts, the shadows
// follow it but the sample rate falls as it grows, so a shadow holds at
// most 2·shadowBlocks blocks; the first Victims sets their capacity, which they shrink to.
func TestAdaptiveShadowsBounded(t *testing.T) {
	p := NewAdaptive()
	const n = 5 * shadowBlocks
	for i := range ID(n) {
		p.Insert(Block{ID: i, Parent: NoParent, Tokens: 512, Key: uint64(i) + 1})
	}
	for i, s := range p.shadows {
		if s.n > 2*shadowBlocks || s.n < shadowBlocks/2 {
			t.Fatalf("shadow %d holds %d blocks for %d cached (shift %d)", i, s.n, n, p.shift)
		}
	}
	p.Victims(func(ID) bool { return false })
	// The shadows shrink lazily, at their next sampled insert.
	for i := range ID(64) {
		p.Insert(Block{ID: n + i, Parent: NoParent, Tokens: 512, Key: uint64(n+i) + 1})
	}
	for i, s := range p.shadows {
		if want := p.shadowCapacity(); s.n > want {
			t.Fatalf("shadow %d holds %d blocks, capacity %d", i, s.n, want)
		}
	}
}

// TestAdaptiveNoSteadyStateAllocs: with keyed blocks (sampled into the
// shadows) a full cache's evict+insert+touch does not allocate.
func TestAdaptiveNoSteadyStateAllocs(t *testing.T) {
	p := NewAdaptive()
	const n = 1024
	key := uint64(1)
	for i := range ID(n) {
		par := NoParent
		if i%8 != 0 {
			par = i - 1
		}
		p.Insert(Block{ID: i, Parent: par, Position: i % 8, Tokens: 512, Key: key})
		key++
	}
	next := ID(0)
	take := func(id ID) bool { next = id; return false }
	cycle := func() {
		p.Victims(take)
		id := next
		p.Remove(id)
		p.Insert(Block{ID: id, Parent: NoParent, Tokens: 512, Key: key % (4 * n)})
		key++
		p.Touch(id)
	}
	for range 8 * n { // let the shadows reach their size
		cycle()
	}
	if allocs := testing.AllocsPerRun(500, cycle); allocs != 0 {
		t.Fatalf("%v allocations per evict+insert+touch", allocs)
	}
}

// TestCostDeepOutlivesShallow: of two unused leaves, the one deeper in
// its chain (more attention work to recompute) is evicted last, and a
// chain is eaten from its tail.
func TestCostDeepOutlivesShallow(t *testing.T) {
	p := NewCost()
	p.Insert(Block{ID: 1, Parent: NoParent, Position: 0, Tokens: 512})
	p.Insert(Block{ID: 2, Parent: 1, Position: 1, Tokens: 512})
	p.Insert(Block{ID: 3, Parent: 2, Position: 2, Tokens: 512})
	p.Insert(Block{ID: 4, Parent: NoParent, Position: 0, Tokens: 512})
	if v := victims(p, 4); len(v) != 2 || v[0] != 4 || v[1] != 3 {
		t.Fatalf("victims %v, want [4 3] (shallow leaf first, interior blocks not candidates)", v)
	}
	p.Remove(4)
	p.Remove(3)
	if v := victims(p, 4); len(v) != 1 || v[0] != 2 {
		t.Fatalf("victims %v after the tail left, want [2]", v)
	}
}

// BenchmarkPolicyOps: one evict+insert+touch of a full cache of 64 Ki
// keyed blocks in chains of 16, per policy (ops/s = 3 × 1e9 / ns/op).
func BenchmarkPolicyOps(b *testing.B) {
	for _, name := range []string{"lru", "prefix", ChainTTLName, CostName, AdaptiveName} {
		b.Run(name, func(b *testing.B) {
			p, _ := New(name)
			const n = 64 << 10
			key := uint64(1)
			for i := range ID(n) {
				par := NoParent
				if i%16 != 0 {
					par = i - 1
				}
				p.Insert(Block{ID: i, Parent: par, Position: i % 16, Tokens: 512, Key: key})
				key++
			}
			rng := rand.New(rand.NewPCG(5, 6))
			next := ID(0)
			take := func(id ID) bool { next = id; return false }
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				p.Victims(take)
				id := next
				p.Remove(id)
				// Keys recur (a working set of 4n), so shadows see hits.
				p.Insert(Block{ID: id, Parent: NoParent, Tokens: 512, Key: 1 + rng.Uint64N(4*n)})
				p.Touch(ID(rng.IntN(n)))
			}
		})
	}
}
