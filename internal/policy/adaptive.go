package policy

import "math"

// AdaptiveName is the configuration name of Adaptive.
const AdaptiveName = "adaptive"

// Adaptive follows, at any time, whichever of a few candidate policies
// would have done best on the recent requests, judged by miniature
// simulations; LRU is the fallback. It has no parameter fitted to a
// workload: every constant below is a sample size, a window in units of
// the cache's own capacity, or a tolerance (ADR 0021).
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
// Each shadow scores its prefix hits and the attention work they save
// (AttentionCost, the compute-saved model of internal/replay), both
// decayed with a half-life of windowCapacities shadow capacities of
// sampled accesses — a few turnovers of the cache's contents. A
// candidate's score is the lesser of its two ratios to the LRU shadow's,
// so it is chosen only if it beats LRU on both. Every half shadow capacity
// of sampled accesses the scores are compared: the followed candidate is
// dropped for LRU when it falls below LRU's score, and any candidate
// replaces it when it beats both LRU and the followed one by more than
// switchMargin.
//
// # Cost
//
// Per event: every candidate's event (O(1) for lru and prefix, O(log n)
// for chainttl and cost), plus, for a sampled block, one event and
// possibly one eviction per shadow and a hash lookup per shadow. Memory:
// the candidates' per-block state (about 200 bytes a block for the four),
// 48 bytes of Adaptive's own per ID, and the shadows: at most
// 4·max(min(C, 2·shadowBlocks), C/64) blocks of metadata. Nothing is
// allocated once the per-ID slices and the shadows have reached their
// size.
//
// Block fields used: Key (sampling and the shadows' identities), Parent,
// Position and Tokens (the cost), Partial (passed to the candidates).
// Blocks with Key 0 are never sampled.
type Adaptive struct {
	cands   []Policy  // orders over the cache's blocks; cands[0] is LRU
	shadows []*shadow // by candidate
	cur     int       // the followed candidate
	meta    []ameta   // by ID
	n       int

	shift       uint // sample rate 2^-shift
	capacity    int  // learned capacity C in blocks; -1 until the first Victims
	since       int  // sampled accesses since the last comparison
	blockTokens uint32
	switches    int
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
	// windowCapacities is the scores' half-life, in shadow capacities of
	// sampled accesses: a few turnovers of the cache.
	windowCapacities = 4
	// comparesPerWindow is how many times per half-life the scores are
	// compared.
	comparesPerWindow = 32
	// switchMargin is the lead, as a ratio to LRU's score, a candidate
	// needs to be followed: the tolerance of the acceptance bound (0.99×
	// LRU), so that noise cannot make it flap.
	switchMargin = 0.01
)

// adaptiveCandidates are Adaptive's candidates; the first is the fallback.
var adaptiveCandidates = [...]func() Policy{
	func() Policy { return NewLRU() },
	func() Policy { return NewPrefix() },
	func() Policy { return NewChainTTL() },
	func() Policy { return NewCost() },
}

// decayPerCompare is the score decay applied at each comparison.
var decayPerCompare = math.Exp2(-1.0 / comparesPerWindow)

// NewAdaptive returns an empty adaptive policy, following LRU.
func NewAdaptive() *Adaptive {
	p := &Adaptive{capacity: -1}
	for _, c := range adaptiveCandidates {
		p.cands = append(p.cands, c())
		p.shadows = append(p.shadows, newShadow(c()))
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
		if p.capacity < 0 {
			// Until now no shadow evicted: their scores are all alike.
			p.decay(0)
		}
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
	for _, sh := range p.shadows {
		sh.purge(p.sampled)
	}
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
	cost := AttentionCost(e.pos, e.tokens, p.blockTokens)
	capacity := p.shadowCapacity()
	var out uint8
	for i, s := range p.shadows {
		parent := none
		if ancKey != 0 {
			if sid, ok := s.lookup(ancKey); ok {
				parent = sid
			}
		}
		_, hit, _ := s.access(b, parent, capacity)
		if hit && alive&(1<<i) != 0 {
			out |= 1 << i
			s.hits++
			s.saved += cost
		}
	}
	e.alive, e.anc, e.ancGen = out, id, e.gen
	p.since++
	if capacity > 0 && p.since >= max(1, capacity*windowCapacities/comparesPerWindow) {
		p.since = 0
		p.compare()
	}
}

// ratios returns shadow i's prefix hits and saved work as ratios to the
// LRU shadow's (1 and 1 for LRU itself).
func (p *Adaptive) ratios(i int) (hits, saved float64) {
	l, s := p.shadows[0], p.shadows[i]
	return (s.hits + 1) / (l.hits + 1), (s.saved + 1) / (l.saved + 1)
}

// value is shadow i's value, the mean of its two ratios, and whether it is
// admissible: neither ratio below 1-floor.
func (p *Adaptive) value(i int, floor float64) (float64, bool) {
	h, c := p.ratios(i)
	return (h + c) / 2, min(h, c) >= 1-floor
}

// compare picks the candidate to follow and decays the scores. A
// candidate is admissible while neither of its ratios to LRU is below
// 1-switchMargin; the followed one is kept until one of its ratios falls
// below 1-2·switchMargin (hysteresis) or another admissible candidate's
// value exceeds its own by switchMargin. LRU is always admissible.
func (p *Adaptive) compare() {
	best, bestValue := 0, 1.0
	for i := 1; i < len(p.shadows); i++ {
		if v, ok := p.value(i, switchMargin); ok && v > bestValue {
			best, bestValue = i, v
		}
	}
	cur, keep := p.value(p.cur, 2*switchMargin)
	next := p.cur
	switch {
	case !keep:
		next = best
	case best != p.cur && bestValue > cur+switchMargin:
		next = best
	}
	if next != p.cur {
		p.cur = next
		p.switches++
	}
	p.decay(decayPerCompare)
}

// decay multiplies every shadow's score by f.
func (p *Adaptive) decay(f float64) {
	for _, s := range p.shadows {
		s.hits *= f
		s.saved *= f
	}
}
