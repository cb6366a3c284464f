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

// TestAdaptiveCompare: the followed candidate changes only on significant
// evidence — a lead in saved work over LRU (and over the followed one) of
// more than zScore standard deviations, and prefix hits shown, at zScore,
// to be no fewer than LRU's minus floorTolerance — and falls back to LRU
// only when the evidence is as significantly against it.
func TestAdaptiveCompare(t *testing.T) {
	p := NewAdaptive()
	const lru, chain, cost = 0, 2, 3
	p.hitTotal[lru] = 1e4 // the non-inferiority margin is 100 hits
	// won sets candidate i's discordant accesses against LRU: i hit and LRU
	// missed a times, the reverse b times, each access its own run (a
	// variance of 1 each) saving 100 (a variance of 100² each).
	won := func(i int, a, b float64) {
		p.won[i][lru], p.won[lru][i] = a, b
		p.wonVar[i][lru], p.wonVar[lru][i] = a, b
		p.wonSaved[i][lru], p.wonSaved[lru][i] = 100*a, 100*b
		p.savedVar[i][lru], p.savedVar[lru][i] = 1e4*a, 1e4*b
	}
	expect := func(step, want string) {
		t.Helper()
		p.compare()
		if p.Following() != want {
			t.Fatalf("%s: following %s, want %s", step, p.Following(), want)
		}
	}
	won(chain, 12, 3) // work lead 900 < 3·100·sqrt(15) = 1,162: not significant
	expect("small sample", "lru")
	won(chain, 120, 80) // 4,000 < 3·100·sqrt(200) = 4,243
	expect("lead under 3σ", "lru")
	won(chain, 130, 80) // 5,000 > 3·100·sqrt(210) = 4,347; hits 50+100 > 3·sqrt(210)
	expect("lead over 3σ", ChainTTLName)
	won(chain, 131, 130) // lead 100: kept
	expect("lead shrunk", ChainTTLName)
	won(chain, 130, 131) // LRU leads by 100 < 3·100·sqrt(261): kept, not shown worse
	expect("lead gone, not significantly", ChainTTLName)
	won(chain, 131, 130)

	won(cost, 400, 200) // cost leads LRU by far, but not chainttl yet
	expect("cost vs followed: no pair evidence", ChainTTLName)
	p.wonSaved[cost][chain], p.wonSaved[chain][cost] = 3e4, 2e4
	p.savedVar[cost][chain], p.savedVar[chain][cost] = 3e6, 2e6 // 1e4 > 3·sqrt(5e6) = 6,708
	expect("cost beats both", CostName)

	p.won[cost][lru], p.won[lru][cost] = 0, 200 // 100 hits below LRU's less the margin, > 3·sqrt(600)
	expect("cost below LRU's hits", "lru")
	p.won[cost][lru], p.won[lru][cost] = 0, 50 // within the margin, but not shown to be (3·sqrt(600) = 73.5)
	expect("hits not shown non-inferior", "lru")

	won(chain, 300, 300) // no lead over LRU: not followed
	expect("tie", "lru")
	if p.Switches() != 3 {
		t.Fatalf("%d switches, want 3", p.Switches())
	}
}

// TestAdaptiveRecord: a sampled access adds to won[i][j] exactly when it
// was a prefix hit in shadow i and not in j, and a run of L discordant
// blocks of one chain adds L² to the variance, not L.
func TestAdaptiveRecord(t *testing.T) {
	p := NewAdaptive()
	var chain [4]chainRun
	all := uint8(1<<numCandidates - 1)
	// Block 0: everyone hits. Block 1: prefix and cost miss (their chains
	// break); blocks 2 and 3: lru and chainttl still hit, the others are
	// dead: one run of 3 blocks.
	p.record(&chain[0], &chainRun{}, all, all, 1)
	p.record(&chain[1], &chain[0], all, 0b0101, 2)
	p.record(&chain[2], &chain[1], 0b0101, 0b0101, 3)
	p.record(&chain[3], &chain[2], 0b0101, 0b0101, 4)
	for i := range numCandidates {
		for j := range numCandidates {
			var won, v, saved, sv float64
			if (i == 0 || i == 2) && (j == 1 || j == 3) {
				won, v, saved, sv = 3, 9, 2+3+4, 9*9
			}
			if p.won[i][j] != won || p.wonVar[i][j] != v || p.wonSaved[i][j] != saved || p.savedVar[i][j] != sv {
				t.Fatalf("[%d][%d]: won %v var %v saved %v var %v; want %v %v %v %v", i, j,
					p.won[i][j], p.wonVar[i][j], p.wonSaved[i][j], p.savedVar[i][j], won, v, saved, sv)
			}
		}
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
	for i, s := range p.shadows.shadows {
		if s.n > 2*shadowBlocks || s.n < shadowBlocks/2 {
			t.Fatalf("shadow %d holds %d blocks for %d cached (shift %d)", i, s.n, n, p.shift)
		}
	}
	p.Victims(func(ID) bool { return false })
	// The shadows shrink lazily, at their next sampled insert.
	for i := range ID(64) {
		p.Insert(Block{ID: n + i, Parent: NoParent, Tokens: 512, Key: uint64(n+i) + 1})
	}
	for i, s := range p.shadows.shadows {
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

// TestShadowSetInvariants: under random accesses, evictions and a purge,
// the shared slots stay consistent — a key's slot is in the table while
// some shadow holds it and released when none does, and each shadow's
// count matches its bits and its policy's Len.
func TestShadowSetInvariants(t *testing.T) {
	var ss shadowSet
	for _, c := range adaptiveCandidates {
		ss.add(c(DefaultCostModel))
	}
	rng := rand.New(rand.NewPCG(7, 8))
	check := func(step int) {
		t.Helper()
		counts := make([]int, len(ss.shadows))
		for slot, k := range ss.keys {
			if k == 0 {
				if ss.in[slot] != 0 {
					t.Fatalf("step %d: free slot %d held (%b)", step, slot, ss.in[slot])
				}
				continue
			}
			if ss.in[slot] == 0 {
				t.Fatalf("step %d: slot %d of key %d held by no shadow but not released", step, slot, k)
			}
			if got, ok := ss.index.get(k); !ok || got != ID(slot) {
				t.Fatalf("step %d: key %d maps to %d %v, want slot %d", step, k, got, ok, slot)
			}
			for i := range ss.shadows {
				if ss.in[slot]&(1<<i) != 0 {
					counts[i]++
				}
			}
		}
		for i, s := range ss.shadows {
			if s.n != counts[i] || s.pol.Len() != s.n {
				t.Fatalf("step %d: shadow %d: n %d, bits %d, policy Len %d", step, i, s.n, counts[i], s.pol.Len())
			}
		}
	}
	var prev uint64
	for step := range 20000 {
		key := 1 + rng.Uint64N(500)
		parent := uint64(0)
		if rng.IntN(2) == 0 {
			parent = prev
		}
		ss.access(Block{Position: uint32(rng.IntN(8)), Tokens: 512, Key: key}, parent, 64)
		prev = key
		if step%1000 == 0 {
			check(step)
		}
	}
	ss.purge(func(k uint64) bool { return k%2 == 0 })
	check(-1)
	for _, k := range ss.keys {
		if k%2 == 1 {
			t.Fatalf("key %d survived the purge", k)
		}
	}
}
