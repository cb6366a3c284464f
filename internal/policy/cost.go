package policy

// CostName is the configuration name of Cost.
const CostName = "cost"

// AttentionCost is the prefill attention work of a block at position p (0 =
// first) holding t tokens, in a chain of blocks of blockTokens tokens: each
// of its tokens attends to every token up to itself, so token i of the
// block (0-based) attends to p·blockTokens + i + 1 tokens, and the block
// costs
//
//	t·blockTokens·p + t·(t+1)/2
//
// token-pairs. The trace simulator weighs its compute-saved figure by this
// model (tools/internal/replay), and Cost ranks blocks by it, so the two agree on
// what a block is worth.
func AttentionCost(p, t, blockTokens uint32) float64 {
	ft := float64(t)
	return ft*float64(blockTokens)*float64(p) + ft*(ft+1)/2
}

// Cost is a compute-weighted, prefix-aware GreedyDual policy (Young's
// GreedyDual for weighted caching, which is k-competitive; Cao and Irani's
// GreedyDual-Size with unit size): a block's value is the prefill compute
// a hit on it saves, priced by a CostModel (BlockFLOPs; DefaultCostModel
// unless NewCostModel names another), so a block deep in a long context,
// which costs more to recompute, stays longer than one near the start, and
// a partial block, which holds fewer tokens, goes sooner than a full one.
//
// Each block has a priority H = L + cost, set when it enters and on every
// use; only leaves — blocks with no cached child, as in Prefix — are
// candidates, and the candidate with the smallest H goes first. L, the
// inflation, rises to the H of each candidate removed, so blocks not used
// for a while sink below newly used ones whatever their cost: an unused
// block of cost c outlives one of cost c' by about c−c' of inflation. The
// rule has no parameter beyond the model: costs are relative (scaling them
// all changes nothing, so a block is weighed by BlockFLOPs / (4·Layers·Hidden)
// = Crossover·t + AttentionCost, which keeps the numbers small), and the
// block size is the largest Tokens seen. Under AttentionOnly the weight is
// AttentionCost, the order of the policy before the models were added.
//
// A parent whose last cached child leaves becomes a candidate again with
// the H of its own last use, usually below L, so a chain nobody uses is
// eaten from its tail to its root.
//
// Cost: O(log n) per event (a 4-ary heap of the leaves); nothing is
// allocated once the per-ID slices have grown to the cache's largest ID.
type Cost struct {
	nodes       []costNode
	heap        idHeap
	inflation   float64 // L
	crossover   float64 // the model's Crossover: the weight of a token's linear cost
	model       CostModel
	blockTokens uint32 // the largest Tokens seen
	n           int
}

type costNode struct {
	h         float64 // priority: inflation at the last use + cost
	cost      float64
	gen       uint32 // bumped on Remove, to detect stale parent links
	parentGen uint32
	parent    ID
	children  uint32
	present   bool
}

// NewCost returns an empty compute-weighted GreedyDual policy that prices
// blocks by DefaultCostModel.
func NewCost() *Cost { return NewCostModel(DefaultCostModel) }

// NewCostModel returns an empty compute-weighted GreedyDual policy that
// prices blocks by m.
func NewCostModel(m CostModel) *Cost {
	return &Cost{heap: newIDHeap(), model: m, crossover: m.Crossover()}
}

// Model is the cost model p prices blocks by.
func (p *Cost) Model() CostModel { return p.model }

// weight is the relative cost of a block (see Cost).
func (p *Cost) weight(pos, t uint32) float64 {
	return p.crossover*float64(t) + AttentionCost(pos, t, p.blockTokens)
}

// Name implements Policy.
func (*Cost) Name() string { return CostName }

// Admit implements Policy: every block is admitted.
func (*Cost) Admit(Block) bool { return true }

// Len implements Policy.
func (p *Cost) Len() int { return p.n }

func (p *Cost) has(id ID) bool { return int(id) < len(p.nodes) && p.nodes[id].present }

// Insert implements Policy. Inserting a tracked ID counts as a Touch.
func (p *Cost) Insert(b Block) {
	if p.has(b.ID) {
		p.Touch(b.ID)
		return
	}
	p.nodes = grow(p.nodes, b.ID)
	p.heap.grow(b.ID)
	p.blockTokens = max(p.blockTokens, b.Tokens)
	e := &p.nodes[b.ID]
	c := p.weight(b.Position, b.Tokens)
	*e = costNode{h: p.inflation + c, cost: c, gen: e.gen, parent: none, present: true}
	p.n++
	if par := b.Parent; par != b.ID && p.has(par) {
		pe := &p.nodes[par]
		e.parent, e.parentGen = par, pe.gen
		if pe.children++; pe.children == 1 {
			p.heap.remove(par)
		}
	}
	p.heap.push(b.ID, e.h)
}

// Touch implements Policy.
func (p *Cost) Touch(id ID) {
	if !p.has(id) {
		return
	}
	e := &p.nodes[id]
	e.h = p.inflation + e.cost
	p.heap.update(id, e.h)
}

// Remove implements Policy. Removing a candidate raises the inflation to
// its priority; the parent loses a cached child and may become a
// candidate again.
func (p *Cost) Remove(id ID) {
	if !p.has(id) {
		return
	}
	e := &p.nodes[id]
	if p.heap.remove(id) {
		p.inflation = max(p.inflation, e.h)
	}
	e.present = false
	e.gen++
	p.n--
	par := e.parent
	if par == none || !p.has(par) || p.nodes[par].gen != e.parentGen {
		return
	}
	pe := &p.nodes[par]
	if pe.children--; pe.children == 0 {
		p.heap.push(par, pe.h)
	}
}

// Victims implements Policy: leaves by priority, lowest first.
func (p *Cost) Victims(yield func(ID) bool) { p.heap.walk(yield) }
