package policy

import (
	"cmp"
	"math/rand/v2"
	"slices"
	"testing"
)

// conversation inserts a first turn: root 0 (a hub, touched), then a
// fresh run of n full blocks and a partial one, with IDs from first on.
// It returns the IDs of the run.
func firstTurn(p *ChainTTL, first ID, n int) []ID {
	p.Touch(0)
	par := ID(0)
	var ids []ID
	for i := range n + 1 {
		id := first + ID(i)
		b := Block{ID: id, Parent: par, Position: uint32(i + 1), Tokens: 512}
		if i == n {
			b.Partial, b.Tokens = true, 100
		}
		p.Insert(b)
		ids = append(ids, id)
		par = id
	}
	return ids
}

// before reports whether a comes before b among p's victims.
func before(t *testing.T, p *ChainTTL, a, b ID) bool {
	t.Helper()
	v := victims(p, 1<<20)
	i, j := slices.Index(v, a), slices.Index(v, b)
	if i < 0 || j < 0 {
		t.Fatalf("%d or %d not a candidate: %v", a, b, v)
	}
	return i < j
}

// idle advances p's clock by n events on the hub.
func idle(p *ChainTTL, n int) {
	for range n {
		p.Touch(0)
	}
}

func newHubbed() *ChainTTL {
	p := NewChainTTL()
	p.Insert(Block{ID: 0, Parent: NoParent, Tokens: 512})
	// Make 0 a hub: many first turns hang off it.
	for i := range ID(300) {
		p.Insert(Block{ID: 1000 + i, Parent: 0, Position: 1, Tokens: 512})
	}
	return p
}

func TestChainTTLPartialFirst(t *testing.T) {
	p := newHubbed()
	a := firstTurn(p, 10, 3)
	b := firstTurn(p, 20, 3)
	// The partial blocks go first, older first, before the older fresh
	// leaves hanging off the hub.
	got := victims(p, 3)
	if !slices.Equal(got[:2], []ID{a[len(a)-1], b[len(b)-1]}) {
		t.Fatalf("victims %v, want the partial blocks %d, %d first", got, a[len(a)-1], b[len(b)-1])
	}
	if !before(t, p, b[len(b)-1], 1000) {
		t.Fatal("a partial block outlives an older fresh one")
	}
}

func TestChainTTLReusedOutlivesFresh(t *testing.T) {
	p := newHubbed()
	a := firstTurn(p, 10, 2)
	// a's chain is read again later (a continuation hits it), then an
	// unrelated first turn b arrives.
	idle(p, 200)
	p.Touch(0)
	for _, id := range a[:2] {
		p.Touch(id)
	}
	b := firstTurn(p, 20, 2)
	// Drop both partial leaves; what remains are the chain tails.
	p.Remove(a[2])
	p.Remove(b[2])
	if !before(t, p, b[1], a[1]) {
		t.Fatalf("reused %d goes before the younger fresh %d", a[1], b[1])
	}
}

func TestChainTTLSupersededBranch(t *testing.T) {
	p := newHubbed()
	// A conversation: 10 <- 11 <- 12 <- 13.
	c := firstTurn(p, 10, 3)
	p.Remove(c[3])
	// The next turn hits 10 only and branches: 10 <- 30.
	p.Touch(0)
	p.Touch(10)
	p.Insert(Block{ID: 30, Parent: 10, Position: 2, Tokens: 512})
	// An unrelated, older-looking first turn.
	d := firstTurn(p, 40, 1)
	p.Remove(d[1])
	// The abandoned branch goes first.
	if got := victims(p, 1); got[0] != 12 {
		t.Fatalf("victims %v, want the superseded 12 first", got)
	}
	if !p.nodes[11].dead || !p.nodes[12].dead {
		t.Fatal("branch not marked superseded")
	}
	// Using it again revives it.
	p.Touch(11)
	if p.nodes[11].dead {
		t.Fatal("touched block still dead")
	}
}

func TestChainTTLRevival(t *testing.T) {
	p := newHubbed()
	c := firstTurn(p, 10, 4)
	idle(p, 200)
	p.Touch(0)
	for _, id := range c[:4] {
		p.Touch(id) // reused once
	}
	// The cache evicts the tail: partial, then 13 and 12.
	p.Remove(c[4])
	p.Remove(c[3])
	p.Remove(c[2])
	// The conversation comes back: hits 10, 11, re-inserts the lost blocks
	// under 11 (new IDs).
	p.Touch(0)
	p.Touch(10)
	p.Touch(11)
	p.Insert(Block{ID: 50, Parent: 11, Position: 3, Tokens: 512})
	p.Insert(Block{ID: 51, Parent: 50, Position: 4, Tokens: 512})
	p.Insert(Block{ID: 52, Parent: 51, Position: 5, Tokens: 512})
	for _, id := range []ID{50, 51} {
		if e := &p.nodes[id]; e.credit == 0 {
			t.Fatalf("re-inserted block %d has no credit", id)
		}
	}
	// Two blocks were lost: the third block of the run is new content.
	if e := &p.nodes[52]; e.credit != 0 {
		t.Fatalf("block 52 credit %d, want 0", e.credit)
	}
}

func TestChainTTLVerbatimFallsBackToLRU(t *testing.T) {
	p := newHubbed()
	// Prompts asked again verbatim, later: every partial block is hit.
	var turns [][]ID
	for i := range ID(50) {
		turns = append(turns, firstTurn(p, 100+10*i, 2))
	}
	for _, ids := range turns {
		p.Touch(0)
		for _, id := range ids {
			p.Touch(id)
		}
	}
	if w := p.verbatim(); w != 1 {
		t.Fatalf("verbatim %v, want 1", w)
	}
	firstTurn(p, 10, 2)
	b := firstTurn(p, 20, 2)
	// Plain LRU among leaves now: the partial block outlives older leaves.
	if !before(t, p, 1000, b[2]) {
		t.Fatal("a partial block still goes first")
	}
}

// TestChainTTLVictimsOrder: Victims yields every candidate once, by
// expiry then last use.
func TestChainTTLVictimsOrder(t *testing.T) {
	p := NewChainTTL()
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range ID(3000) {
		par := NoParent
		if i > 0 && rng.IntN(3) > 0 {
			par = ID(rng.IntN(int(i)))
		}
		p.Insert(Block{ID: i, Parent: par, Position: uint32(rng.IntN(50)), Tokens: 512, Partial: rng.IntN(10) == 0})
		if rng.IntN(4) == 0 {
			p.Touch(ID(rng.IntN(int(i) + 1)))
		}
	}
	for i := range ID(500) {
		p.Remove(ID(rng.IntN(3000)))
		_ = i
	}
	got := victims(p, 1<<20)
	want := slices.Clone(p.heap)
	slices.SortFunc(want, func(a, b ID) int {
		x, y := &p.nodes[a], &p.nodes[b]
		if c := cmp.Compare(x.key, y.key); c != 0 {
			return c
		}
		return cmp.Compare(x.tick, y.tick)
	})
	if !slices.Equal(got, want) {
		t.Fatalf("Victims order differs from (key, tick) order: %d vs %d candidates", len(got), len(want))
	}
	for _, id := range got {
		if p.nodes[id].children != 0 {
			t.Fatalf("candidate %d has cached children", id)
		}
	}
}

// TestChainTTLSameUse: two Touches close together (a lookup, then the
// read) are one use; a Touch right after Insert is none.
func TestChainTTLSameUse(t *testing.T) {
	p := newHubbed()
	c := firstTurn(p, 10, 2)
	p.Touch(c[0])
	if h := p.nodes[c[0]].hits; h != 0 {
		t.Fatalf("touch right after insert: %d uses", h)
	}
	idle(p, 200)
	p.Touch(c[0])
	p.Touch(c[0])
	if h := p.nodes[c[0]].hits; h != 1 {
		t.Fatalf("two touches together: %d uses, want 1", h)
	}
	idle(p, 200)
	p.Touch(c[0])
	if h := p.nodes[c[0]].hits; h != 2 {
		t.Fatalf("a later touch: %d uses, want 2", h)
	}
}
