package policy

import "math"

// AdaptiveName is the configuration name of Adaptive.
const AdaptiveName = "adaptive"

// Adaptive follows whichever of a few candidate policies the evidence so
// far shows, with statistical significance, to save more prefill compute
// (priced by a CostModel) than LRU without losing prefix hits; until then,
// and once the evidence turns significantly against it, it follows LRU. It has no parameter fitted to a workload: every
// constant below is a sample size, a memory bound or a conventional
// significance level (ADR 0021).
//
// # Candidates, and following one
//
// The candidates are lru, prefix, chainttl and cost (adaptiveCandidates).
// Each keeps its own order over the cache's blocks: Insert, Touch and
// Remove go to every one, and Victims yields the followed candidate's
// order. Switching is therefore free and immediate — no block is re-ranked
// — and a candidate's order is exactly what it would be had it been
// followed, given the blocks the cache holds.
//
// # Miniature caches
//
// Each candidate also runs a shadow: a metadata-only cache of r·C blocks
// (C, the cache's capacity in blocks, is learned as Len when Victims is
// asked for a victim) fed only the blocks whose Key hashes into a sample
// of rate r = 2^-s (SHARDS). r is 1 while C is below 2·shadowBlocks and
// halves as C doubles, down to 1/64, so a shadow holds between
// shadowBlocks and 2·shadowBlocks blocks (fewer when the whole cache is
// smaller; C/64 for caches beyond 2^20 blocks). Before the cache first
// evicts, the shadows do not evict either.
//
// The shadows keep prefix semantics, as the simulator does (internal/
// replay): a block counts as a hit for a shadow only when it and every
// sampled block before it in its chain are cached there. Every block
// remembers, per shadow, whether its chain was whole up to it at its last
// access, and passes that to its children; an unsampled block passes its
// parent's on. A sampled block's parent in a shadow is its nearest sampled
// ancestor, so tree-shaped candidates (prefix, chainttl, cost) see the
// sampled blocks' own tree.
//
// # Choosing
//
// For every sampled access the shadows are compared in pairs: won[i][j]
// counts the accesses that were prefix hits in shadow i but not in j, and
// wonSaved[i][j] the prefill work those hits saved, priced by the cost
// model as Cost prices blocks (BlockFLOPs / (4·Layers·Hidden): the per-token
// linear cost and the attention; the simulator's realistic compute saved,
// tools/internal/replay). The tallies run from the start, because what is
// judged — the compute saved over a trace, or over a daemon's life — is a
// ratio of totals. The objective is the compute saved, subject to keeping
// LRU's prefix hits within floorTolerance:
//
//   - a candidate is followed when its lead in saved work over LRU, and
//     over the followed candidate, exceeds zScore standard deviations of a
//     null lead (McNemar's test: the variance of the lead of two paired
//     counts is their number of discordant accesses), and its hits are
//     shown at zScore to be no fewer than LRU's less floorTolerance;
//   - the followed candidate is dropped for LRU only when the evidence
//     turns against it as strongly: LRU's lead in saved work, or its lead
//     in hits beyond floorTolerance, exceeds zScore standard deviations.
//     Leaving on a mere point estimate made the policy flap between a
//     candidate and LRU on short traces, which cost more than either.
//
// Comparisons run once per shadow capacity of sampled accesses: a switch
// shows in the cache's contents only after about one turnover, so
// deciding more often would judge evidence the last decision has not yet
// shaped.
//
// # Cost
//
// Per event: every candidate's event (O(1) for lru and prefix, O(log n)
// for chainttl and cost), plus, for a sampled block, one event and
// possibly one eviction per shadow, two hash lookups in the shadows'
// shared key table, and the pairwise tallies. Memory: the candidates'
// per-block state (about 200 bytes a block for the four), 48 bytes of
// Adaptive's own and 64 of chain state per ID, and the shadows: at most
// 4·max(min(C, 2·shadowBlocks), C/64) blocks of metadata. Nothing is
// allocated once the per-ID slices and the shadows have reached their
// size.
//
// Block fields used: Key (sampling and the shadows' identities), Parent,
// Position and Tokens (the cost), Partial (passed to the candidates).
// Blocks with Key 0 are never sampled.
type Adaptive struct {
	cands   []Policy  // orders over the cache's blocks; cands[0] is LRU
	shadows shadowSet // by candidate
	cur     int       // the followed candidate
	meta    []ameta   // by ID
	n       int

	shift       uint // sample rate 2^-shift
	capacity    int  // learned capacity C in blocks; -1 until the first Victims
	since       int  // sampled accesses since the last comparison
	blockTokens uint32
	switches    int

	// The evidence, over every sampled access since the start: won[i][j]
	// counts the accesses that were prefix hits in shadow i but not in
	// shadow j, wonSaved[i][j] the work (cost model) those hits saved.
	// The variances of those tallies' differences under the hypothesis
	// that i and j do equally well: accesses of one chain are not
	// independent (once a shadow's chain breaks, it misses the rest of the
	// request's blocks), so the unit of evidence is a run of consecutive
	// discordant blocks of one chain, and a run of length L adds L² (of
	// work W, W²), accumulated block by block (see record).
	won, wonSaved, wonVar, savedVar [numCandidates][numCandidates]float64
	savedTotal                      [numCandidates]float64 // by shadow: the work its sampled hits saved
	hitTotal                        [numCandidates]float64 // by shadow: its sampled prefix hits
	crossover                       float64                // the cost model's Crossover (see Cost.weight)
	runs                            []chainRun             // by ID; written for sampled blocks
}

// chainRun is the state, at a sampled block's last access, of its chain
// up to it: how deep it is in sampled blocks and their work,
// and, by shadow, where that shadow's prefix hits ended (the depth and
// work before its first miss; depth itself while it still hits).
type chainRun struct {
	depth     uint32
	work      float64
	missDepth [numCandidates]uint32
	missWork  [numCandidates]float64
}

// ameta is what Adaptive remembers of a cached block.
type ameta struct {
	key       uint64
	gen       uint32 // bumped on Remove, to detect stale links
	parent    ID
	parentGen uint32
	anc       ID // nearest sampled ancestor-or-self, or none
	ancGen    uint32
	pos       uint32
	tokens    uint32
	alive     uint8 // by shadow: the chain was whole up to here at the last access
	partial   bool
	present   bool
}

const (
	// shadowBlocks is the least number of blocks a shadow holds once the
	// cache is larger: SHARDS estimates a miss-ratio curve within about
	// 0.01 from a few thousand sampled blocks.
	shadowBlocks = 8192
	// maxSampleShift bounds the sampling at 1/64 of the keys.
	maxSampleShift = 6
	// zScore is the significance a candidate's lead in sampled prefix
	// hits must reach to be followed instead of LRU (or of the followed
	// candidate): three standard deviations, the conventional "3σ" bound
	// (a one-sided false-positive rate of about 0.1% per comparison). It
	// was chosen before any trace was run, not tuned.
	zScore = 3
	// floorTolerance is the share of LRU's sampled prefix hits a
	// candidate may fall short by and still count as hitting as often:
	// the tolerance of the policy's floor (never below 0.99× LRU; ADR
	// 0021).
	floorTolerance = 0.01
	// numCandidates is the number of candidates; at most 8, one bit each
	// of ameta.alive.
	numCandidates = len(adaptiveCandidates)
)

// adaptiveCandidates are Adaptive's candidates; the first is the fallback.
var adaptiveCandidates = [...]func(CostModel) Policy{
	func(CostModel) Policy { return NewLRU() },
	func(CostModel) Policy { return NewPrefix() },
	func(CostModel) Policy { return NewChainTTL() },
	func(m CostModel) Policy { return NewCostModel(m) },
}

// NewAdaptive returns an empty adaptive policy, following LRU, that
// weighs saved work by DefaultCostModel.
func NewAdaptive() *Adaptive { return NewAdaptiveModel(DefaultCostModel) }

// NewAdaptiveModel returns an empty adaptive policy, following LRU, that
// weighs saved work (and its cost candidate's blocks) by m.
func NewAdaptiveModel(m CostModel) *Adaptive {
	p := &Adaptive{capacity: -1, crossover: m.Crossover()}
	for _, c := range adaptiveCandidates {
		p.cands = append(p.cands, c(m))
		p.shadows.add(c(m))
	}
	return p
}

// Name implements Policy.
func (*Adaptive) Name() string { return AdaptiveName }

// Following names the candidate whose order Victims yields now.
func (p *Adaptive) Following() string { return p.cands[p.cur].Name() }

// Switches counts the changes of the followed candidate.
func (p *Adaptive) Switches() int { return p.switches }

// Admit implements Policy: every block is admitted.
func (*Adaptive) Admit(Block) bool { return true }

// Len implements Policy.
func (p *Adaptive) Len() int { return p.n }

func (p *Adaptive) has(id ID) bool { return int(id) < len(p.meta) && p.meta[id].present }

// Insert implements Policy. Inserting a tracked ID counts as a Touch.
func (p *Adaptive) Insert(b Block) {
	if p.has(b.ID) {
		p.Touch(b.ID)
		return
	}
	for _, c := range p.cands {
		c.Insert(b)
	}
	p.meta = grow(p.meta, b.ID)
	e := &p.meta[b.ID]
	*e = ameta{key: b.Key, gen: e.gen, parent: none, anc: none, pos: b.Position, tokens: b.Tokens,
		partial: b.Partial, present: true}
	if par := b.Parent; par != b.ID && p.has(par) {
		e.parent, e.parentGen = par, p.meta[par].gen
	}
	p.n++
	p.blockTokens = max(p.blockTokens, b.Tokens)
	if p.capacity < 0 {
		p.resample(p.n) // the shadows do not evict yet: keep them bounded
	}
	p.access(b.ID)
}

// Touch implements Policy.
func (p *Adaptive) Touch(id ID) {
	if !p.has(id) {
		return
	}
	for _, c := range p.cands {
		c.Touch(id)
	}
	p.access(id)
}

// Remove implements Policy.
func (p *Adaptive) Remove(id ID) {
	if !p.has(id) {
		return
	}
	for _, c := range p.cands {
		c.Remove(id)
	}
	e := &p.meta[id]
	e.present = false
	e.gen++
	p.n--
}

// Victims implements Policy: the followed candidate's order. Being asked
// means the cache is full, so Len tells its capacity.
func (p *Adaptive) Victims(yield func(ID) bool) {
	if p.n > 0 {
		p.capacity = p.n - 1
		p.resample(p.capacity)
	}
	p.cands[p.cur].Victims(yield)
}

// live returns e's parent (or sampled ancestor) link when it still names
// the same block.
func (p *Adaptive) live(id ID, gen uint32) (*ameta, bool) {
	if id == none || !p.has(id) || p.meta[id].gen != gen {
		return nil, false
	}
	return &p.meta[id], true
}

// sampled reports whether key is in the shadows' sample.
func (p *Adaptive) sampled(key uint64) bool {
	return key != 0 && (p.shift == 0 || mix64(key^sampleSalt)>>(64-p.shift) == 0)
}

// sampleSalt makes the sample independent of the key tables' slots.
const sampleSalt = 0x9e3779b97f4a7c15

// resample lowers the sample rate while a cache of size blocks would give
// a shadow more than 2·shadowBlocks of them, and drops the keys that left
// the sample from the shadows (at most maxSampleShift times in all).
func (p *Adaptive) resample(size int) {
	s := p.shift
	for s < maxSampleShift && size>>s >= 2*shadowBlocks {
		s++
	}
	if s == p.shift {
		return
	}
	p.shift = s
	p.shadows.purge(p.sampled)
}

// shadowCapacity is a shadow's size bound: r·C, or -1 (none) before the
// cache first evicts.
func (p *Adaptive) shadowCapacity() int {
	if p.capacity < 0 {
		return -1
	}
	return max(1, p.capacity>>p.shift)
}

// access feeds a use of the cached block id to the shadows when it is
// sampled, and records its chain's state for its children.
func (p *Adaptive) access(id ID) {
	e := &p.meta[id]
	alive, anc, ancGen := ^uint8(0), none, uint32(0)
	if pe, ok := p.live(e.parent, e.parentGen); ok {
		alive, anc, ancGen = pe.alive, pe.anc, pe.ancGen
	}
	if !p.sampled(e.key) {
		e.alive, e.anc, e.ancGen = alive, anc, ancGen
		return
	}
	var ancKey uint64
	if ae, ok := p.live(anc, ancGen); ok && p.sampled(ae.key) {
		ancKey = ae.key
	}
	b := Block{Position: e.pos, Tokens: e.tokens, Partial: e.partial, Key: e.key}
	cost := p.crossover*float64(e.tokens) + AttentionCost(e.pos, e.tokens, p.blockTokens)
	capacity := p.shadowCapacity()
	out := p.shadows.access(b, ancKey, capacity) & alive
	for i := range numCandidates {
		if out&(1<<i) != 0 {
			p.savedTotal[i] += cost
			p.hitTotal[i]++
		}
	}
	var prev chainRun
	if _, ok := p.live(anc, ancGen); ok && int(anc) < len(p.runs) {
		prev = p.runs[anc]
	}
	p.runs = grow(p.runs, id)
	p.record(&p.runs[id], &prev, alive, out, cost)
	e.alive, e.anc, e.ancGen = out, id, e.gen
	if p.since++; capacity > 0 && p.since >= capacity {
		p.since = 0
		p.compare()
	}
}

// record sets r, the chain state at a sampled block, from prev, its
// nearest sampled ancestor's (zero at a chain's start), and adds the
// access to the pairwise tallies: was and hit hold, by shadow, whether the
// chain was whole before the block and whether the block was a prefix hit;
// cost is the work (cost model) a hit on it saves.
//
// A discordant access (i hit, j missed) extends the run that began after
// j's chain broke, at depth missDepth[j]: the k-th block of a run adds
// 2k−1 to the variance, so a run of L blocks adds L² in all (and, for
// the work, (W+c)² − W² = c·(2(W+c) − c) for a block of cost c after W).
func (p *Adaptive) record(r, prev *chainRun, was, hit uint8, cost float64) {
	*r = *prev
	r.depth++
	r.work += cost
	for j := range numCandidates {
		if hit&(1<<j) == 0 && was&(1<<j) != 0 {
			r.missDepth[j], r.missWork[j] = prev.depth, prev.work
		} else if hit&(1<<j) != 0 {
			r.missDepth[j], r.missWork[j] = r.depth, r.work
		}
	}
	if hit == 0 || hit == 1<<numCandidates-1 {
		return // concordant: no shadow gained on another
	}
	for j := range numCandidates {
		if hit&(1<<j) != 0 {
			continue
		}
		k := float64(r.depth - r.missDepth[j])
		w := r.work - r.missWork[j]
		for i := range numCandidates {
			if hit&(1<<i) != 0 {
				p.won[i][j]++
				p.wonVar[i][j] += 2*k - 1
				p.wonSaved[i][j] += cost
				p.savedVar[i][j] += cost * (2*w - cost)
			}
		}
	}
}

// hitLead is i's lead over j in sampled prefix hits, and the variance of
// that lead under the hypothesis that neither is better (McNemar's test,
// with runs of a chain as the unit: see record).
func (p *Adaptive) hitLead(i, j int) (lead, variance float64) {
	return p.won[i][j] - p.won[j][i], p.wonVar[i][j] + p.wonVar[j][i]
}

// savedLead is i's lead over j in the work (cost model) sampled hits saved,
// and its variance under the same hypothesis.
func (p *Adaptive) savedLead(i, j int) (lead, variance float64) {
	return p.wonSaved[i][j] - p.wonSaved[j][i], p.savedVar[i][j] + p.savedVar[j][i]
}

// significant reports whether lead exceeds zScore standard deviations.
func significant(lead, variance float64) bool {
	return variance > 0 && lead > zScore*math.Sqrt(variance)
}

// compare picks the candidate to follow, from every sampled access since
// the start (what is judged — the compute saved over a trace, or over a
// daemon's life — is a ratio of totals, so the evidence is too). The
// objective is the prefill compute saved, priced by the cost model,
// subject to losing no more than floorTolerance of LRU's prefix hits; LRU
// is the default, and each move away from it needs significant evidence:
//
//   - a candidate is followed instead of LRU (or of the followed one) when
//     both its lead in sampled saved work over LRU (and over the followed
//     one) and its prefix hits plus floorTolerance of LRU's, minus LRU's,
//     exceed zScore standard deviations: a superiority test on compute
//     and a non-inferiority test on hits. Among several, the one with the
//     largest lead in saved work over LRU;
//   - the followed candidate falls back to LRU when the evidence is
//     significantly against it: LRU's lead in saved work, or LRU's hits
//     beyond floorTolerance, exceed zScore standard deviations.
//
// With little evidence nothing is significant and LRU is followed.
func (p *Adaptive) compare() {
	margin := floorTolerance * p.hitTotal[0]
	next := p.cur
	if next != 0 {
		saved, sv := p.savedLead(next, 0)
		hits, hv := p.hitLead(next, 0)
		if significant(-saved, sv) || significant(-(hits+margin), hv) {
			next = 0
		}
	}
	keep, bestLead := next, 0.0
	for i := 1; i < numCandidates; i++ {
		if i == keep {
			continue
		}
		saved, v := p.savedLead(i, 0)
		if saved <= bestLead || !significant(saved, v) {
			continue
		}
		if hits, v := p.hitLead(i, 0); !significant(hits+margin, v) {
			continue
		}
		if keep != 0 && !significant(p.savedLead(i, keep)) {
			continue
		}
		next, bestLead = i, saved
	}
	if next != p.cur {
		p.cur = next
		p.switches++
	}
}
