package policy

import (
	"slices"
	"testing"
)

func chainBlock(id, parent ID, pos uint32) Block {
	return Block{ID: id, Parent: parent, Position: pos, Tokens: 512}
}

func TestPrefixLeavesFirst(t *testing.T) {
	p := NewPrefix()
	// Chain 0 <- 1 <- 2, then a lone block 3.
	p.Insert(chainBlock(0, NoParent, 0))
	p.Insert(chainBlock(1, 0, 1))
	p.Insert(chainBlock(2, 1, 2))
	p.Insert(flat(3))
	if got := victims(p, 10); !slices.Equal(got, []ID{2, 3}) {
		t.Fatalf("victims %v, want only the leaves [2 3]", got)
	}
	// The tail goes; its parent is a candidate again, by its own last use
	// (older than 3).
	p.Remove(2)
	if got := victims(p, 10); !slices.Equal(got, []ID{1, 3}) {
		t.Fatalf("victims %v, want [1 3]", got)
	}
	// Touching the interior block 0 makes it recent though it is not a
	// candidate: when 1 goes, 0 ranks after 3.
	p.Touch(0)
	p.Remove(1)
	if got := victims(p, 10); !slices.Equal(got, []ID{3, 0}) {
		t.Fatalf("victims %v, want [3 0]", got)
	}
}

func TestPrefixRemoveInterior(t *testing.T) {
	p := NewPrefix()
	p.Insert(chainBlock(0, NoParent, 0))
	p.Insert(chainBlock(1, 0, 1))
	p.Insert(chainBlock(2, 1, 2))
	p.Insert(chainBlock(3, 1, 2)) // 1 has two children
	p.Remove(1)                   // deleted from the middle: 2 and 3 are roots now
	// and 0, which lost its only child, is a candidate again.
	if got := victims(p, 10); !slices.Equal(got, []ID{0, 2, 3}) {
		t.Fatalf("victims %v, want [0 2 3]", got)
	}
	p.Remove(2)
	p.Remove(3)
	if got := victims(p, 10); !slices.Equal(got, []ID{0}) {
		t.Fatalf("victims %v, want [0]", got)
	}
	// ID 1 reused under 0: 0 is interior again; removing it does not
	// disturb the recycled 2.
	p.Insert(chainBlock(1, 0, 1))
	p.Insert(chainBlock(2, NoParent, 0))
	if got := victims(p, 10); !slices.Equal(got, []ID{1, 2}) {
		t.Fatalf("victims %v, want [1 2]", got)
	}
	if p.Len() != 3 {
		t.Fatalf("Len %d", p.Len())
	}
}
