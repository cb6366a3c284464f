package policy

// orderedWalk bounds the walk that puts a parent back on the candidate
// list by its last touch (as the hot store's built-in order does).
const orderedWalk = 64

// Prefix is the prefix-aware LRU rule, the hot store's built-in order: only
// leaves — blocks with no cached child — are eviction candidates, least
// recently used first. A block whose child is cached is never evicted
// before that child, so a chain is eaten from its tail and a cached block
// is always reachable as a prefix. When a block's last cached child leaves,
// the block becomes a candidate again at the place its own last use earns
// (found by a walk from the least recent end bounded by orderedWalk; past
// that it goes to the most recent end).
//
// Children are learned from Block.Parent at Insert: a block inserted
// before its parent is a root to the policy.
type Prefix struct {
	ls    links
	nodes []prefixNode
	q     list // the candidates (leaves)
	tick  uint64
	n     int
}

type prefixNode struct {
	tick      uint64
	gen       uint32 // bumped on Remove, so stale parent references are detected
	parentGen uint32
	parent    ID
	children  uint32
	present   bool
	linked    bool
}

// NewPrefix returns an empty prefix-aware LRU policy.
func NewPrefix() *Prefix { return &Prefix{q: newList()} }

// Name implements Policy.
func (*Prefix) Name() string { return "prefix" }

// Admit implements Policy: everything is admitted.
func (*Prefix) Admit(Block) bool { return true }

// Insert implements Policy. Inserting a tracked ID counts as a Touch.
func (p *Prefix) Insert(b Block) {
	p.ls = grow(p.ls, b.ID)
	p.nodes = grow(p.nodes, b.ID)
	e := &p.nodes[b.ID]
	if e.present {
		p.Touch(b.ID)
		return
	}
	p.tick++
	p.n++
	*e = prefixNode{tick: p.tick, gen: e.gen, parent: none, present: true}
	if par := b.Parent; par != b.ID && p.has(par) {
		pe := &p.nodes[par]
		e.parent, e.parentGen = par, pe.gen
		pe.children++
		if pe.linked {
			pe.linked = false
			p.ls.unlink(&p.q, par)
		}
	}
	e.linked = true
	p.ls.pushHead(&p.q, b.ID)
}

// Touch implements Policy.
func (p *Prefix) Touch(id ID) {
	if !p.has(id) {
		return
	}
	p.tick++
	e := &p.nodes[id]
	e.tick = p.tick
	if e.linked {
		p.ls.moveHead(&p.q, id)
	}
}

// Remove implements Policy. The parent loses a cached child and may become
// a candidate again; the block's own cached children become roots.
func (p *Prefix) Remove(id ID) {
	if !p.has(id) {
		return
	}
	e := &p.nodes[id]
	if e.linked {
		p.ls.unlink(&p.q, id)
	}
	par, pg := e.parent, e.parentGen
	e.present, e.linked = false, false
	e.gen++
	p.n--
	if par == none || !p.has(par) {
		return
	}
	pe := &p.nodes[par]
	if pe.gen != pg {
		return
	}
	if pe.children--; pe.children == 0 {
		p.linkOrdered(par)
	}
}

// linkOrdered puts id on the candidate list by its tick.
func (p *Prefix) linkOrdered(id ID) {
	tick := p.nodes[id].tick
	p.nodes[id].linked = true
	at := p.q.tail
	for range orderedWalk {
		if at == none {
			p.ls.pushHead(&p.q, id)
			return
		}
		if p.nodes[at].tick >= tick {
			// at is newer: id goes just after it, on its least recent side.
			p.ls.insertBefore(&p.q, p.ls[at].next, id)
			return
		}
		at = p.ls[at].prev
	}
	p.ls.pushHead(&p.q, id)
}

// Victims implements Policy: leaves, least recently used first.
func (p *Prefix) Victims(yield func(ID) bool) { p.ls.walk(&p.q, yield) }

// Len implements Policy.
func (p *Prefix) Len() int { return p.n }

func (p *Prefix) has(id ID) bool { return int(id) < len(p.nodes) && p.nodes[id].present }
