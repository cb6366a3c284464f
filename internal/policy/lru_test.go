package policy

import (
	"slices"
	"testing"
)

func TestLRUOrder(t *testing.T) {
	p := NewLRU()
	for id := range ID(4) {
		if !p.Admit(flat(id)) {
			t.Fatal("LRU refused a block")
		}
		p.Insert(flat(id))
	}
	p.Touch(0)
	p.Touch(2)
	if got := victims(p, 10); !slices.Equal(got, []ID{1, 3, 0, 2}) {
		t.Fatalf("victims %v", got)
	}
	// Chains do not matter to LRU: the parent, older, goes first.
	p.Insert(Block{ID: 9, Parent: 2, Position: 1, Tokens: 512})
	p.Remove(1)
	if got := victims(p, 2); !slices.Equal(got, []ID{3, 0}) {
		t.Fatalf("victims %v", got)
	}
	p.Insert(flat(0)) // inserting a tracked ID touches it
	if got := victims(p, 10); !slices.Equal(got, []ID{3, 2, 9, 0}) {
		t.Fatalf("victims %v", got)
	}
	if p.Len() != 4 {
		t.Fatalf("Len %d", p.Len())
	}
}
