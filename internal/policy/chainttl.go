package policy

// ChainTTLName is the configuration name of ChainTTL.
const ChainTTLName = "chainttl"

// ChainTTL is a prefix-aware policy that gives every block a lifetime from
// what the shape of the prefix tree says about its chance of reuse, and
// evicts the leaf whose lifetime ends first.
//
// # Why
//
// In a conversation workload most cached blocks are never read again (in
// the Mooncake conversation trace, three in four), and whether a block will
// be shows in the prefix tree better than in its recency alone:
//
//   - the last block of a prompt is partial; the next turn extends it, so
//     its key changes and it is dead on arrival (0.8% are reused);
//   - a block that has been read again belongs to a conversation that came
//     back, and such conversations come back again (24% of fresh blocks
//     are reused, 42% of once-reused ones, 50-60% after that);
//   - the fresh run a continuation appends after its hit prefix becomes the
//     next turn's prefix near its start, but the further the run reaches
//     past the hit, the less of it is read again (44% right after the hit,
//     8% twelve blocks on); a first turn, whose run hangs off a hub such as
//     a shared system prompt, loses value more slowly with the offset;
//   - when a chain node with a single child gets a second one, the
//     conversation has branched and the old branch is abandoned (0.2% of
//     such blocks are reused).
//
// # How
//
// Only leaves — blocks with no cached child — are candidates, as in
// Prefix: a chain is eaten from its tail and every cached block stays
// reachable as a prefix. A leaf's expiry is its last use plus a lifetime,
// the cache's characteristic time tau times a class factor (see
// chainParams): tau is how many events inserting Len blocks takes at the
// recent insert rate, i.e. the residence time of plain LRU, so factors are
// unit-free and the rule scales with the cache and the request rate. A
// fresh block at the head of a run gets about tau, as under LRU; reused
// blocks get more, deep fresh runs less, partial and superseded blocks
// none. Victims yields leaves by expiry (then by last use).
//
// A block evicted by the cache comes back, if ever, without its history.
// So a chain node remembers the reuse count of the child it last lost and
// how many blocks went with it; when the conversation returns and a fresh
// run is inserted under that node, the run inherits them ("revival").
//
// Two assumptions are checked online, so that a workload that breaks them
// does not pay for them. The share of partial blocks reused after all (a
// hit, or a partial child of the same size re-inserted where one was
// evicted) betrays prompts asked again verbatim; as it grows from 2% to
// 20%, every factor fades to LRU's (0), the dead ones included. Branch
// superseding pauses while more than 5% of the blocks it marks are used
// again.
//
// A use is a Touch more than a few events (sameUseTicks) after the
// block's previous Insert or Touch, so a store that touches a block twice
// for one request counts it once.
//
// Cost: O(log n) per event (a 4-ary heap of the leaves), except marking a
// superseded branch, which visits each of its blocks once (at most
// maxDeadWalk per Insert). Nothing is allocated once the per-ID slices
// have grown to the cache's largest ID.
//
// Block fields used: Parent (the tree), Partial and Tokens (of partial
// blocks), and the order of Insert, Touch and Remove. Position is not used.
type ChainTTL struct {
	cfg   chainParams
	nodes []cnode
	heap  []ID // the candidates (leaves): a 4-ary min-heap by (key, tick)
	tick  uint64
	n     int

	// Decayed counters (halved every decayEvery events).
	ticks, inserts         float64 // tau
	partials, partialReuse float64 // partial blocks inserted, and reused
	deadMarked, deadUsed   float64 // blocks marked superseded, and used after

	stack    []ID    // markDead's scratch
	frontier []int32 // Victims' scratch
}

// cnode is ChainTTL's state of one ID.
type cnode struct {
	key       int64  // expiry, while a candidate
	tick      uint64 // last Insert or Touch
	gen       uint32 // bumped on Remove, to detect stale parent links
	parentGen uint32
	parent    ID
	kid       ID    // first cached child
	next      ID    // next cached sibling
	prev      ID    // previous cached sibling
	hpos      int32 // index in heap, -1 when not a candidate
	children  uint32
	fanout    uint32 // children ever inserted under it (saturating)
	hits      uint32 // Touches since Insert (saturating)
	credit    uint32 // reuse count inherited on revival
	creditLen uint32 // blocks further down the run that inherit it too
	lostHits  uint32 // reuse count+1 of the last child evicted (0: none)
	lostLen   uint32 // blocks evicted below it on that branch
	lostTok   uint32 // tokens of the last partial child evicted (0: none)
	runOff    uint32 // fresh blocks between it and the hit its run hangs off
	tokens    uint32
	present   bool
	partial   bool
	dead      bool // on a superseded branch
	cont      bool // its run continues a chain rather than a hub
}

// chainParams are ChainTTL's lifetime factors, in units of tau (0 = a
// fresh block's lifetime under LRU), and structural thresholds.
type chainParams struct {
	Dead     float64    // partial, or on a superseded branch
	Reused   [3]float64 // read again once, twice, three times or more
	FirstOff [4]float64 // fresh, run off a hub, offset 0-3, 4-11, 12-31, 32+
	ContOff  [4]float64 // fresh, run continuing a chain, offset 0, 1-3, 4-11, 12+
	// HubFanout: a node with at least this many children ever is a hub
	// (a shared prefix many conversations start from), not a chain.
	HubFanout uint32
	// SuperFanout: a node with at most this many children ever supersedes
	// its old children when it gets a new one.
	SuperFanout uint32
	Revive      bool
}

// defaultChainParams are the registered policy's factors. The structure
// (which classes live longer than which) follows the reuse rates above;
// the magnitudes were fitted on the Mooncake conversation trace at 1-50%
// capacity.
var defaultChainParams = chainParams{
	Dead:        -1,
	Reused:      [3]float64{0.3, 0.55, 0.7},
	FirstOff:    [4]float64{0.25, -0.1, -0.3, -0.45},
	ContOff:     [4]float64{-0.15, -0.45, -0.65, -0.75},
	HubFanout:   4,
	SuperFanout: 1,
	Revive:      true,
}

const (
	// maxDeadWalk bounds the blocks one Insert marks as superseded.
	maxDeadWalk = 1024
	// decayEvery is how many events pass between halvings of the
	// counters, so the estimates follow the recent workload.
	decayEvery = 1 << 16
	// partialDeadBelow and partialLiveAbove: below the first share of
	// reused partial blocks they get the Dead factor, above the second a
	// fresh block's, in between a mix.
	partialDeadBelow = 0.02
	partialLiveAbove = 0.2
	// maxDeadUsed: superseding pauses while a larger share of the blocks
	// it marks are used again.
	maxDeadUsed = 0.05
	// sameUseTicks: a Touch this close to the block's previous Insert or
	// Touch (at most tau/8) is the same use — a store may touch a block
	// twice for one request (a lookup, then the read) — and does not count
	// as a reuse.
	sameUseTicks = 1024
)

// NewChainTTL returns an empty ChainTTL policy.
func NewChainTTL() *ChainTTL { return newChainTTL(defaultChainParams) }

func newChainTTL(cfg chainParams) *ChainTTL { return &ChainTTL{cfg: cfg} }

// Name implements Policy.
func (*ChainTTL) Name() string { return ChainTTLName }

// Admit implements Policy: every block is admitted. A block unlikely to
// be reused gets a short lifetime instead, which costs nothing while the
// cache has room.
func (*ChainTTL) Admit(Block) bool { return true }

// Len implements Policy.
func (p *ChainTTL) Len() int { return p.n }

func (p *ChainTTL) has(id ID) bool { return int(id) < len(p.nodes) && p.nodes[id].present }

// parentOf returns e's cached parent.
func (p *ChainTTL) parentOf(e *cnode) (ID, bool) {
	if e.parent == none || !p.has(e.parent) || p.nodes[e.parent].gen != e.parentGen {
		return none, false
	}
	return e.parent, true
}

// event advances the clock and decays the counters.
func (p *ChainTTL) event(insert bool) {
	p.tick++
	p.ticks++
	if insert {
		p.inserts++
	}
	if p.ticks >= decayEvery {
		p.ticks /= 2
		p.inserts /= 2
		p.partials /= 2
		p.partialReuse /= 2
		p.deadMarked /= 2
		p.deadUsed /= 2
	}
}

// tau is the cache's characteristic time in ticks: how long inserting Len
// blocks takes at the recent insert rate.
func (p *ChainTTL) tau() float64 {
	if p.inserts == 0 {
		return max(1, float64(p.n))
	}
	return max(1, float64(p.n)*p.ticks/p.inserts)
}

// life is e's lifetime factor.
func (p *ChainTTL) life(e *cnode) float64 {
	c := &p.cfg
	if e.dead {
		return c.Dead
	}
	// Partial blocks are dead, reused blocks live longer and fresh runs
	// fade with their offset — unless partial blocks turn out to be reused
	// here. Only a prompt asked again verbatim reuses one, and where
	// prompts recur verbatim the tree says little: the tail of a run comes
	// back as often as its head, and a block read twice is no likelier to
	// be read a third time. The factors then fade towards LRU's.
	w := p.verbatim()
	var f float64
	if reuse := e.hits + e.credit; reuse > 0 {
		f = c.Reused[min(reuse, 3)-1]
	} else {
		f = p.freshLife(e)
	}
	f *= 1 - w
	if e.partial && e.hits+e.credit == 0 {
		return c.Dead + w*(f-c.Dead)
	}
	return f
}

// verbatim is 0 while partial blocks are seldom reused, 1 when they
// often are, and in between a mix.
func (p *ChainTTL) verbatim() float64 {
	r := 0.0
	if p.partials > 0 {
		r = p.partialReuse / p.partials
	}
	return min(max((r-partialDeadBelow)/(partialLiveAbove-partialDeadBelow), 0), 1)
}

// freshLife is the factor of a block never read again, by its run.
func (p *ChainTTL) freshLife(e *cnode) float64 {
	c, o := &p.cfg, e.runOff
	if e.cont {
		switch {
		case o == 0:
			return c.ContOff[0]
		case o < 4:
			return c.ContOff[1]
		case o < 12:
			return c.ContOff[2]
		}
		return c.ContOff[3]
	}
	switch {
	case o < 4:
		return c.FirstOff[0]
	case o < 12:
		return c.FirstOff[1]
	case o < 32:
		return c.FirstOff[2]
	}
	return c.FirstOff[3]
}

// Insert implements Policy. Inserting a tracked ID counts as a Touch.
func (p *ChainTTL) Insert(b Block) {
	if p.has(b.ID) {
		p.Touch(b.ID)
		return
	}
	p.nodes = grow(p.nodes, b.ID)
	p.event(true)
	p.n++
	e := &p.nodes[b.ID]
	*e = cnode{tick: p.tick, gen: e.gen, parent: none, kid: none, next: none, prev: none, hpos: -1,
		present: true, partial: b.Partial, tokens: b.Tokens}
	if b.Partial {
		p.partials++
	}
	if par := b.Parent; par != b.ID && p.has(par) {
		p.adopt(b.ID, par)
	}
	p.link(b.ID)
}

// adopt makes the new block id a child of its cached parent par and
// derives its run signals from par.
func (p *ChainTTL) adopt(id, par ID) {
	c := &p.cfg
	e, pe := &p.nodes[id], &p.nodes[par]
	hub := pe.fanout >= c.HubFanout
	if pe.hits == 0 {
		// par is fresh too: id extends its run.
		e.runOff = pe.runOff + 1
		e.cont = pe.cont
		if pe.creditLen > 0 {
			e.credit, e.creditLen = pe.credit, pe.creditLen-1
		}
	} else {
		// The run starts after a hit on par.
		e.cont = !hub
	}
	if e.partial && pe.lostTok != 0 && pe.lostTok == e.tokens {
		// Likely the partial block evicted from here, asked again.
		p.partialReuse++
	}
	if c.Revive && !hub && pe.children == 0 && pe.lostLen > 0 {
		e.credit, e.creditLen = pe.lostHits, pe.lostLen-1
	}
	pe.lostHits, pe.lostLen, pe.lostTok = 0, 0, 0
	if pe.children > 0 && pe.fanout <= c.SuperFanout && p.deadUsed <= maxDeadUsed*p.deadMarked {
		// A second child of a chain node: the branch not used since par
		// was last used is abandoned.
		p.abandonStale(pe)
	}
	e.parent, e.parentGen = par, pe.gen
	e.next = pe.kid
	if pe.kid != none {
		p.nodes[pe.kid].prev = id
	}
	pe.kid = id
	pe.children++
	if pe.fanout < ^uint32(0) {
		pe.fanout++
	}
	p.unlink(par)
}

// abandonStale marks dead the children of pe not used since pe was last
// used.
func (p *ChainTTL) abandonStale(pe *cnode) {
	for k := pe.kid; k != none; k = p.nodes[k].next {
		if p.nodes[k].tick < pe.tick {
			p.markDead(k)
		}
	}
}

// markDead marks the branch under root, root included, as superseded.
func (p *ChainTTL) markDead(root ID) {
	p.stack = append(p.stack[:0], root)
	for k := 0; len(p.stack) > 0 && k < maxDeadWalk; k++ {
		id := p.stack[len(p.stack)-1]
		p.stack = p.stack[:len(p.stack)-1]
		e := &p.nodes[id]
		if e.dead {
			continue
		}
		e.dead = true
		p.deadMarked++
		if e.hpos >= 0 {
			p.rekey(id)
		}
		for c := e.kid; c != none; c = p.nodes[c].next {
			p.stack = append(p.stack, c)
		}
	}
}

// Touch implements Policy.
func (p *ChainTTL) Touch(id ID) {
	if !p.has(id) {
		return
	}
	p.event(false)
	e := &p.nodes[id]
	if e.dead {
		e.dead = false
		p.deadUsed++
	}
	newUse := float64(p.tick-e.tick) > min(sameUseTicks, p.tau()/8)
	if newUse && e.partial && e.hits == 0 {
		p.partialReuse++
	}
	if newUse && e.hits < ^uint32(0) {
		e.hits++
	}
	e.tick = p.tick
	e.creditLen = 0
	if e.hpos >= 0 {
		p.rekey(id)
	}
}

// Remove implements Policy. The parent loses a cached child, and becomes a
// candidate when it was the last; the block's cached children become
// roots.
func (p *ChainTTL) Remove(id ID) {
	if !p.has(id) {
		return
	}
	p.unlink(id)
	e := &p.nodes[id]
	for c := e.kid; c != none; {
		ce := &p.nodes[c]
		nx := ce.next
		ce.parent, ce.next, ce.prev = none, none, none
		c = nx
	}
	e.kid = none
	par, ok := p.parentOf(e)
	e.present = false
	e.gen++
	p.n--
	if !ok {
		return
	}
	pe := &p.nodes[par]
	if e.prev != none {
		p.nodes[e.prev].next = e.next
	} else {
		pe.kid = e.next
	}
	if e.next != none {
		p.nodes[e.next].prev = e.prev
	}
	switch {
	case e.partial && e.hits == 0:
		pe.lostTok = e.tokens
	case !e.dead:
		pe.lostHits = satAdd(satAdd(e.hits, e.credit), 1)
		pe.lostLen = e.lostLen + 1
	}
	if pe.children--; pe.children == 0 {
		p.link(par)
	}
}

// Victims implements Policy: leaves by expiry, earliest first; among equal
// expiries, the least recently used first.
func (p *ChainTTL) Victims(yield func(ID) bool) {
	if len(p.heap) == 0 || !yield(p.heap[0]) {
		return
	}
	// Best-first walk of the heap below the root: a frontier of heap
	// indices, kept as a binary min-heap in a reused scratch slice.
	f := p.frontier[:0]
	f = p.pushKids(f, 0)
	for len(f) > 0 {
		top := f[0]
		last := len(f) - 1
		f[0] = f[last]
		f = f[:last]
		for j := 0; ; {
			m, l := j, 2*j+1
			if l < len(f) && p.less(int(f[l]), int(f[m])) {
				m = l
			}
			if r := l + 1; r < len(f) && p.less(int(f[r]), int(f[m])) {
				m = r
			}
			if m == j {
				break
			}
			f[j], f[m] = f[m], f[j]
			j = m
		}
		if !yield(p.heap[top]) {
			break
		}
		f = p.pushKids(f, int(top))
	}
	p.frontier = f[:0]
}

// pushKids adds the heap children of heap index i to the frontier f.
func (p *ChainTTL) pushKids(f []int32, i int) []int32 {
	for c := 4*i + 1; c <= 4*i+4 && c < len(p.heap); c++ {
		f = append(f, int32(c))
		for j := len(f) - 1; j > 0; {
			q := (j - 1) / 2
			if !p.less(int(f[j]), int(f[q])) {
				break
			}
			f[j], f[q] = f[q], f[j]
			j = q
		}
	}
	return f
}

// expiry is the key of e as a candidate.
func (p *ChainTTL) expiry(e *cnode) int64 {
	return int64(e.tick) + int64(p.life(e)*p.tau())
}

// link makes id a candidate.
func (p *ChainTTL) link(id ID) {
	e := &p.nodes[id]
	e.key = p.expiry(e)
	e.hpos = int32(len(p.heap))
	p.heap = append(p.heap, id)
	p.up(int(e.hpos))
}

// rekey recomputes the expiry of the candidate id.
func (p *ChainTTL) rekey(id ID) {
	e := &p.nodes[id]
	e.key = p.expiry(e)
	if i := int(e.hpos); !p.down(i) {
		p.up(i)
	}
}

// unlink drops id from the candidates, if it is one.
func (p *ChainTTL) unlink(id ID) {
	e := &p.nodes[id]
	if e.hpos < 0 {
		return
	}
	i, last := int(e.hpos), len(p.heap)-1
	e.hpos = -1
	if i != last {
		p.heap[i] = p.heap[last]
		p.nodes[p.heap[i]].hpos = int32(i)
	}
	p.heap = p.heap[:last]
	if i != last && !p.down(i) {
		p.up(i)
	}
}

// less orders heap indices i and j: earlier expiry first, then older.
func (p *ChainTTL) less(i, j int) bool {
	a, b := &p.nodes[p.heap[i]], &p.nodes[p.heap[j]]
	if a.key != b.key {
		return a.key < b.key
	}
	return a.tick < b.tick
}

func (p *ChainTTL) swap(i, j int) {
	h := p.heap
	h[i], h[j] = h[j], h[i]
	p.nodes[h[i]].hpos = int32(i)
	p.nodes[h[j]].hpos = int32(j)
}

func (p *ChainTTL) up(i int) {
	for i > 0 {
		q := (i - 1) / 4
		if !p.less(i, q) {
			return
		}
		p.swap(i, q)
		i = q
	}
}

// down sifts i down and reports whether it moved.
func (p *ChainTTL) down(i int) bool {
	i0, n := i, len(p.heap)
	for {
		c := 4*i + 1
		if c >= n {
			break
		}
		m := c
		for k := c + 1; k < c+4 && k < n; k++ {
			if p.less(k, m) {
				m = k
			}
		}
		if !p.less(m, i) {
			break
		}
		p.swap(i, m)
		i = m
	}
	return i != i0
}

// satAdd is a + b, saturating.
func satAdd(a, b uint32) uint32 {
	if s := a + b; s >= a {
		return s
	}
	return ^uint32(0)
}
