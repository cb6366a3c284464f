package replay

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/gpucache/gpucache/internal/policy"
)

// OptName is the offline Belady policy's name in Simulate.
const OptName = "opt"

// Policies lists the policy names Simulate accepts: the online policies of
// internal/policy, sorted, then OptName.
func Policies() []string { return append(policy.Names(), OptName) }

// progressEvery is how many requests pass between progress calls.
const progressEvery = 256

// Simulate replays reqs through a cache of floor(frac × UniqueBlocks(reqs))
// blocks under the named policy, calling progress (if not nil) with the
// number of requests done, every few hundred requests and at the end.
//
// The prefix semantics, per request in trace order:
//
//  1. the hits are the leading run of its blocks already cached (a block
//     after the first miss is a miss: the engine recomputes from there);
//  2. each block, in order, is touched when cached (policy.Touch) or
//     offered (policy.Admit) and, when admitted, inserted (policy.Insert)
//     with its parent — the previous block of the prompt, if cached — and
//     its PromptBlocks description;
//  3. blocks are evicted, each the first candidate policy.Victims yields,
//     until at most the capacity is cached.
//
// The cache names blocks by dense IDs, reused from a free list after
// eviction, as the hot store does. Every policy — "lru" included — runs
// through this one loop; OptName is Belady's MIN, which evicts the block
// whose next access is farthest ahead (never again first; among the blocks
// of one future request, the deepest first).
//
// Result.PromptTokens counts the tokens of every block (PromptBlocks: the
// input length, the last block clamped to 1..BlockTokens), SavedTokens
// those of the hit blocks. ComputeSaved
// weighs each block by its attention work: a prompt token at index i
// (0-based) attends to the i+1 tokens up to itself, so the block at
// position p holding t tokens costs
//
//	t·512·p + t·(t+1)/2
//
// and ComputeSaved is the cost of the hit blocks over the cost of all
// blocks. Late blocks cost more, so a policy that keeps long prefixes saves
// more compute than its hit ratio says.
//
// That measure leaves out the per-token linear cost of prefill (the
// projections and the MLP, 2 FLOPs per parameter), which dominates
// below tens of thousands of tokens of context. Result.ModelComputeSaved
// is the same fraction with each block priced by policy.DefaultCostModel
// (BlockFLOPs: linear cost plus attention), and the "cost" policy weighs
// blocks by that model; SimulateModel names another.
func Simulate(reqs []Request, policyName string, frac float64, progress func(done int)) (Result, error) {
	return SimulateModel(reqs, policyName, frac, policy.DefaultCostModel, progress)
}

// SimulateModel is Simulate with model pricing Result.ModelComputeSaved
// and the blocks of the "cost" policy.
func SimulateModel(reqs []Request, policyName string, frac float64, model policy.CostModel, progress func(done int)) (Result, error) {
	if math.IsNaN(frac) || frac <= 0 || math.IsInf(frac, 0) {
		return Result{}, fmt.Errorf("replay: capacity fraction %v is not positive", frac)
	}
	pol, opt, next, err := simPolicy(policyName, reqs, model)
	if err != nil {
		return Result{}, err
	}
	return simulate(reqs, policyName, pol, opt, next, frac, model, progress)
}

// simulate is SimulateModel with the policy built: pol, and for OptName
// the oracle and the next uses.
func simulate(reqs []Request, policyName string, pol policy.Policy, opt *optPolicy, next []uint64, frac float64, model policy.CostModel, progress func(done int)) (Result, error) {
	start := time.Now()
	unique := UniqueBlocks(reqs)
	capacity := int(frac * float64(unique))
	res := Result{Policy: policyName, CapacityFrac: frac, Capacity: capacity, Requests: len(reqs), CostModel: model.Name}

	c := cache{
		index: make(map[uint64]policy.ID, min(unique, capacity+maxRequestBlocks(reqs))+1),
		pol:   pol,
	}
	var (
		blocks []BlockInfo
		w      work
		access int
	)
	for i := range reqs {
		blocks = appendPromptBlocks(blocks[:0], &reqs[i])
		c.countHits(blocks, &res, model, &w)
		access = c.place(blocks, opt, next, access)
		if err := c.shrinkTo(capacity, policyName); err != nil {
			return res, err
		}
		if progress != nil && ((i+1)%progressEvery == 0 || i+1 == len(reqs)) {
			progress(i + 1)
		}
	}
	if res.Blocks > 0 {
		res.HitRatio = float64(res.HitBlocks) / float64(res.Blocks)
	}
	if w.total > 0 {
		res.ComputeSaved = w.saved / w.total
	}
	if w.modelTotal > 0 {
		res.ModelComputeSaved = w.modelSaved / w.modelTotal
	}
	res.Seconds = time.Since(start).Seconds()
	return res, nil
}

// simPolicy returns the policy named name; for OptName also the oracle
// and the next use of every access of reqs.
// The "cost" policy prices blocks by model, and "adaptive" weighs its
// evidence (and its cost candidate) by it.
func simPolicy(name string, reqs []Request, model policy.CostModel) (policy.Policy, *optPolicy, []uint64, error) {
	switch name {
	case OptName:
		opt := newOpt()
		return opt, opt, nextUses(reqs), nil
	case policy.CostName:
		return policy.NewCostModel(model), nil, nil, nil
	case policy.AdaptiveName:
		return policy.NewAdaptiveModel(model), nil, nil, nil
	}
	p, err := policy.New(name)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("replay: %w", err)
	}
	return p, nil, nil, nil
}

// work sums the prefill work of the blocks seen and of the hits: attention
// alone (blockCost) and priced by the cost model.
type work struct{ total, saved, modelTotal, modelSaved float64 }

// countHits counts a request's prompt blocks in res and its leading run
// of cached blocks as hits; it adds the blocks' compute cost to w's
// totals and the part of it the hits save to w's saved, block by block.
func (c *cache) countHits(blocks []BlockInfo, res *Result, model policy.CostModel, w *work) {
	hit := true
	for _, b := range blocks {
		cost := blockCost(b.Position, b.Tokens)
		flops := model.BlockFLOPs(b.Position, b.Tokens, BlockTokens)
		w.total += cost
		w.modelTotal += flops
		res.Blocks++
		res.PromptTokens += int64(b.Tokens)
		if hit {
			if _, ok := c.index[b.Hash]; ok {
				res.HitBlocks++
				res.SavedTokens += int64(b.Tokens)
				w.saved += cost
				w.modelSaved += flops
			} else {
				hit = false
			}
		}
	}
}

// place offers a request's prompt blocks to the policy in order: a
// cached block is touched, a new one inserted if admitted. access counts
// the accesses so far (the oracle's position in next); place returns it
// advanced.
func (c *cache) place(blocks []BlockInfo, opt *optPolicy, next []uint64, access int) int {
	pol := c.pol
	parent := policy.NoParent
	for _, b := range blocks {
		if opt != nil {
			opt.setNext(next[access])
		}
		access++
		if id, ok := c.index[b.Hash]; ok {
			pol.Touch(id)
			parent = id
			continue
		}
		if !pol.Admit(b.Block(0, parent)) {
			parent = policy.NoParent
			continue
		}
		id := c.alloc(b.Hash)
		pol.Insert(b.Block(id, parent))
		parent = id
	}
	return access
}

// shrinkTo evicts the policy's victims until at most capacity blocks are
// cached.
func (c *cache) shrinkTo(capacity int, policyName string) error {
	var victim policy.ID
	var found bool
	take := func(id policy.ID) bool { victim, found = id, true; return false }
	for c.n > capacity {
		found = false
		c.pol.Victims(take)
		if !found {
			return fmt.Errorf("replay: policy %s yields no victim with %d blocks cached", policyName, c.n)
		}
		if err := c.evict(victim); err != nil {
			return fmt.Errorf("replay: policy %s: %w", policyName, err)
		}
	}
	return nil
}

// blockCost is the attention work of a block at position p holding t
// tokens (see Simulate).
func blockCost(p, t uint32) float64 { return policy.AttentionCost(p, t, BlockTokens) }

// maxRequestBlocks is the most blocks one request holds.
func maxRequestBlocks(reqs []Request) int {
	m := 0
	for i := range reqs {
		m = max(m, len(reqs[i].HashIDs))
	}
	return m
}

// cache is the simulator's block table: hash id → dense ID.
type cache struct {
	index map[uint64]policy.ID
	hash  []uint64 // by ID
	live  []bool   // by ID
	free  []policy.ID
	n     int
	pol   policy.Policy

	// inserted and evicted, when not nil, are told of each block that
	// enters or leaves the cache (SimulateFlash's tier below).
	inserted, evicted func(hash uint64)
}

// alloc caches h under a free ID.
func (c *cache) alloc(h uint64) policy.ID {
	var id policy.ID
	if k := len(c.free); k > 0 {
		id = c.free[k-1]
		c.free = c.free[:k-1]
	} else {
		id = policy.ID(len(c.hash))
		c.hash = append(c.hash, 0)
		c.live = append(c.live, false)
	}
	c.hash[id], c.live[id] = h, true
	c.index[h] = id
	c.n++
	if c.inserted != nil {
		c.inserted(h)
	}
	return id
}

var errNotCached = errors.New("gpucache/replay: victim is not cached")

// evict drops id from the cache and the policy.
func (c *cache) evict(id policy.ID) error {
	if int(id) >= len(c.live) || !c.live[id] {
		return fmt.Errorf("%w: ID %d", errNotCached, id)
	}
	c.pol.Remove(id)
	delete(c.index, c.hash[id])
	c.live[id] = false
	c.free = append(c.free, id)
	c.n--
	if c.evicted != nil {
		c.evicted(c.hash[id])
	}
	return nil
}
