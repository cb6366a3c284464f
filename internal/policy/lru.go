package policy

// LRU is plain least-recently-used: it admits everything and evicts the
// block whose last Insert or Touch is oldest, chains notwithstanding.
type LRU struct {
	ls      links
	present []bool
	q       list
}

// NewLRU returns an empty LRU policy.
func NewLRU() *LRU { return &LRU{q: newList()} }

// Name implements Policy.
func (*LRU) Name() string { return "lru" }

// Admit implements Policy: LRU admits every block.
func (*LRU) Admit(Block) bool { return true }

// Insert implements Policy: b becomes the most recent block. Inserting an
// ID that is already tracked counts as a Touch.
func (p *LRU) Insert(b Block) {
	p.ls = grow(p.ls, b.ID)
	p.present = grow(p.present, b.ID)
	if p.present[b.ID] {
		p.ls.moveHead(&p.q, b.ID)
		return
	}
	p.present[b.ID] = true
	p.ls.pushHead(&p.q, b.ID)
}

// Touch implements Policy: id becomes the most recent block.
func (p *LRU) Touch(id ID) {
	if p.has(id) {
		p.ls.moveHead(&p.q, id)
	}
}

// Remove implements Policy.
func (p *LRU) Remove(id ID) {
	if p.has(id) {
		p.present[id] = false
		p.ls.unlink(&p.q, id)
	}
}

// Victims implements Policy: least recently used first.
func (p *LRU) Victims(yield func(ID) bool) { p.ls.walk(&p.q, yield) }

// Len implements Policy.
func (p *LRU) Len() int { return p.q.n }

func (p *LRU) has(id ID) bool { return int(id) < len(p.present) && p.present[id] }
