package policy

import (
	"math"
	"slices"
	"testing"
)

// TestCostModelShapes pins the named models: their parameters, the
// context length at which attention overtakes the linear cost, and the
// FLOPs of one full 512-token block.
func TestCostModelShapes(t *testing.T) {
	for _, tc := range []struct {
		m         CostModel
		crossover float64 // tokens
		block0    float64 // FLOPs of the first full block
	}{
		// 2·8.03e9·512 + 4·32·4096·(512·513/2)
		{Llama3_8B, 30632.0, 8.2225e12 + 6.8854e10},
		// 2·70.6e9·512 + 4·80·8192·(512·513/2)
		{Llama3_70B, 53863.5, 7.22944e13 + 3.44269e11},
	} {
		if got := tc.m.Crossover(); math.Abs(got-tc.crossover) > 0.1 {
			t.Errorf("%s: crossover %.1f tokens, want %.1f", tc.m.Name, got, tc.crossover)
		}
		if got := tc.m.BlockFLOPs(0, 512, 512); math.Abs(got-tc.block0)/tc.block0 > 1e-4 {
			t.Errorf("%s: first block %.5g FLOPs, want %.5g", tc.m.Name, got, tc.block0)
		}
		// A block is the sum of its tokens.
		var sum float64
		for i := range 512 {
			sum += tc.m.TokenFLOPs(float64(3*512 + i + 1))
		}
		if got := tc.m.BlockFLOPs(3, 512, 512); math.Abs(got-sum)/sum > 1e-12 {
			t.Errorf("%s: block 3 is %.6g FLOPs, its tokens sum to %.6g", tc.m.Name, got, sum)
		}
	}
	if got, want := AttentionOnly.BlockFLOPs(2, 10, 512), 4*AttentionCost(2, 10, 512); got != want {
		t.Errorf("attention-only block %v, want 4×AttentionCost = %v", got, want)
	}
	if AttentionOnly.Crossover() != 0 {
		t.Errorf("attention-only crossover %v, want 0", AttentionOnly.Crossover())
	}
}

func TestCostModelByName(t *testing.T) {
	names := CostModels()
	if !slices.IsSorted(names) || !slices.Contains(names, DefaultCostModel.Name) {
		t.Fatalf("CostModels() = %v: want sorted, with the default %q", names, DefaultCostModel.Name)
	}
	for _, n := range names {
		m, err := CostModelByName(n)
		if err != nil || m.Name != n {
			t.Fatalf("CostModelByName(%q) = %+v, %v", n, m, err)
		}
	}
	if _, err := CostModelByName("gpt-5"); err == nil {
		t.Fatal("an unknown model was accepted")
	}
	if NewCost().Model() != Llama3_8B {
		t.Fatalf("NewCost prices by %q, want llama-3-8b", NewCost().Model().Name)
	}
}

// TestCostOrderAgainstLRU is a small trace on which compute-weighted
// eviction and LRU disagree, replayed with the prefix semantics of the
// trace simulator (hits are the leading run of cached blocks; the cache
// shrinks to its capacity after each request) through a 4-block cache:
//
//	A: a1 a2 a3 a4  (a conversation: 4 full blocks, 2,048 tokens)
//	B: b1           (a one-block request)
//	C: c1           (another)
//	A: a1 a2 a3 a4  (the conversation's next turn)
//
// LRU evicts a1 for b1 and a2 for c1, so A's next turn misses from its
// first block and saves nothing. Cost evicts only leaves (a1..a3 are
// a4's ancestors), by GreedyDual priority: b1, worth one shallow block,
// goes before a4, and then a4 (A's tail, last used before b1 and c1 but
// worth a deeper block) goes before c1, which entered above the
// inflation b1's eviction left: A's next turn hits a1..a3. Under the
// attention-only weights a4 is worth 7× a first block, so c1 goes
// instead and A hits all four. Adaptive, the default policy, has no
// evidence yet on so short a trace and evicts as LRU does.
// replayBlocks feeds trace to p as a cache of capacity blocks would: each
// request is a chain of block hashes (block i at position i, 512 tokens);
// it returns each request's leading hits and the hashes evicted, in order.
func replayBlocks(p Policy, trace [][]uint64, capacity int) (hits []int, evicted []uint64) {
	ids := map[uint64]ID{}
	hashes := map[ID]uint64{}
	next := ID(0)
	for _, r := range trace {
		h := 0
		for h < len(r) {
			if _, ok := ids[r[h]]; !ok {
				break
			}
			h++
		}
		hits = append(hits, h)
		parent := NoParent
		for pos, hash := range r {
			if id, ok := ids[hash]; ok {
				p.Touch(id)
				parent = id
				continue
			}
			id := next
			next++
			ids[hash], hashes[id] = id, hash
			p.Insert(Block{ID: id, Parent: parent, Position: uint32(pos), Tokens: 512, Key: hash})
			parent = id
		}
		for p.Len() > capacity {
			var v ID
			p.Victims(func(id ID) bool { v = id; return false })
			p.Remove(v)
			evicted = append(evicted, hashes[v])
			delete(ids, hashes[v])
		}
	}
	return hits, evicted
}

func TestCostOrderAgainstLRU(t *testing.T) {
	trace := [][]uint64{{1, 2, 3, 4}, {10}, {20}, {1, 2, 3, 4}}
	const capacity = 4
	replay := func(p Policy) ([]int, []uint64) { return replayBlocks(p, trace, capacity) }
	lruHits, lruOut := replay(NewLRU())
	if !slices.Equal(lruHits, []int{0, 0, 0, 0}) || !slices.Equal(lruOut[:2], []uint64{1, 2}) {
		t.Fatalf("lru: hits %v, evicted %v; want no hits, a1 then a2 evicted first", lruHits, lruOut)
	}
	for _, m := range []CostModel{Llama3_8B, Llama3_70B} {
		hits, out := replay(NewCostModel(m))
		if !slices.Equal(hits, []int{0, 0, 0, 3}) || !slices.Equal(out[:2], []uint64{10, 4}) {
			t.Errorf("cost (%s): hits %v, evicted %v; want A's next turn to hit 3 blocks, b1 then a4 evicted first", m.Name, hits, out)
		}
	}
	hits, out := replay(NewCostModel(AttentionOnly))
	if !slices.Equal(hits, []int{0, 0, 0, 4}) || !slices.Equal(out[:2], []uint64{10, 20}) {
		t.Errorf("cost (attention): hits %v, evicted %v; want A's next turn to hit 4 blocks, b1 then c1 evicted first", hits, out)
	}
	// adaptive, the default, evicts as LRU does here: four requests are
	// no significant evidence for any candidate (TestAdaptiveReachesLeader
	// shows it leaving LRU on a trace long enough).
	ad := NewAdaptive()
	hits, out = replay(ad)
	if !slices.Equal(hits, lruHits) || !slices.Equal(out, lruOut) || ad.Following() != "lru" {
		t.Errorf("adaptive: hits %v, evicted %v, following %s; want LRU's %v, %v", hits, out, ad.Following(), lruHits, lruOut)
	}
}

// TestCostPartialGoesFirst: with the linear cost in the model, a partial
// block (few tokens) at the same depth as a full one is worth less and
// goes first; attention alone, at the head of a chain, also ranks it
// first.
func TestCostPartialGoesFirst(t *testing.T) {
	for _, m := range []CostModel{Llama3_8B, AttentionOnly} {
		p := NewCostModel(m)
		p.Insert(Block{ID: 0, Parent: NoParent, Position: 0, Tokens: 512})
		p.Insert(Block{ID: 1, Parent: NoParent, Position: 0, Tokens: 40, Partial: true})
		if v := victims(p, 2); !slices.Equal(v, []ID{1, 0}) {
			t.Errorf("%s: victims %v, want the partial block 1 first", m.Name, v)
		}
	}
}

// TestAdaptiveOnAHandWrittenTrace: the default, adaptive, on a hand-written
// trace where compute-weighted eviction and LRU disagree. Each round is a
// conversation of four fresh blocks, a one-block request that never comes
// back, and the conversation again. LRU (4 blocks) has evicted the
// conversation's head by then: no leading hits. cost keeps the
// conversation's deeper, costlier blocks and gives up the single, or the
// conversation's last block: three hits or more a round; prefix, which
// evicts leaves, keeps the head too. adaptive starts as LRU and, once its
// shadows show a candidate's lead in saved work at 3σ with hits no worse,
// follows it: from then on its rounds hit as the best candidate's do, and
// it evicts exactly what that candidate, run alone, evicts.
func TestAdaptiveOnAHandWrittenTrace(t *testing.T) {
	const capacity, rounds, perRound = 4, 40, 3
	var trace [][]uint64
	for r := range uint64(rounds) {
		conv := []uint64{r*100 + 1, r*100 + 2, r*100 + 3, r*100 + 4}
		trace = append(trace, conv, []uint64{r*100 + 50}, conv)
	}
	last := func(hits []int) int { return hits[len(hits)-1] }
	lruHits, _ := replayBlocks(NewLRU(), trace, capacity)
	costHits, _ := replayBlocks(NewCostModel(Llama3_8B), trace, capacity)
	if last(lruHits) != 0 || last(costHits) < 3 {
		t.Fatalf("the trace does not separate them: last round LRU %d hits, cost %d; want 0 and at least 3", last(lruHits), last(costHits))
	}
	ad := NewAdaptive()
	adHits, adOut := replayBlocks(ad, trace, capacity)
	if ad.Following() == "lru" {
		t.Fatalf("adaptive still follows lru after %d rounds", rounds)
	}
	followed, err := New(ad.Following())
	if err != nil {
		t.Fatal(err)
	}
	fHits, fOut := replayBlocks(followed, trace, capacity)
	// The round from which adaptive hits as its candidate does, more than
	// LRU and at least as much as cost, and on every later one.
	from := -1
	for r := range rounds {
		i := r*perRound + perRound - 1
		if adHits[i] == fHits[i] && adHits[i] > lruHits[i] && adHits[i] >= costHits[i] {
			if from < 0 {
				from = r
			}
		} else {
			from = -1
		}
	}
	if from < 0 || from > rounds/2 {
		t.Fatalf("adaptive's hits %v, %s's %v, cost's %v: adaptive should hit as its candidate from a round in the first half", adHits, ad.Following(), fHits, costHits)
	}
	if tail := adOut[len(adOut)-5:]; !slices.Equal(tail, fOut[len(fOut)-5:]) {
		t.Errorf("adaptive's last evictions %v, %s's %v; want the same", tail, ad.Following(), fOut[len(fOut)-5:])
	}
	t.Logf("adaptive follows %s, and hits as it does from round %d of %d (%d of 4 blocks a round; LRU %d, cost %d)",
		ad.Following(), from, rounds, last(adHits), last(lruHits), last(costHits))
}
