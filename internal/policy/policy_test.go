package policy

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// victims returns up to max candidates of p, in order.
func victims(p Policy, max int) []ID {
	var out []ID
	p.Victims(func(id ID) bool {
		out = append(out, id)
		return len(out) < max
	})
	return out
}

func flat(id ID) Block { return Block{ID: id, Parent: NoParent, Tokens: 512} }

func TestRegistry(t *testing.T) {
	names := Names()
	for _, want := range []string{"lru", "prefix", ChainTTLName} {
		if !slices.Contains(names, want) {
			t.Fatalf("Names() = %v, want %q in it", names, want)
		}
		p, err := New(want)
		if err != nil {
			t.Fatal(err)
		}
		if p.Name() != want {
			t.Fatalf("New(%q).Name() = %q", want, p.Name())
		}
		if again, _ := New(want); again == p {
			t.Fatalf("New(%q) returned the same instance twice; a policy serves one Store", want)
		}
	}
	if !slices.IsSorted(names) {
		t.Fatalf("Names() = %v, not sorted", names)
	}
	if _, err := New("nope"); err == nil {
		t.Fatal("New(unknown) succeeded")
	}
}

// forEach runs f on a fresh instance of every registered policy.
func forEach(t *testing.T, f func(t *testing.T, p Policy)) {
	for _, name := range Names() {
		t.Run(name, func(t *testing.T) {
			p, err := New(name)
			if err != nil {
				t.Fatal(err)
			}
			f(t, p)
		})
	}
}

// TestPolicyProperties drives every policy with random Insert, Touch and
// Remove events — chains, arbitrary removals, reused IDs, events for
// unknown IDs — and checks after each one that Len is the inserts minus
// the removes, and that Victims yields tracked IDs only, each once.
func TestPolicyProperties(t *testing.T) {
	forEach(t, func(t *testing.T, p Policy) {
		rng := rand.New(rand.NewPCG(1, 2))
		const ids = 200
		present := make(map[ID]bool)
		var live []ID
		inserts, removes := 0, 0
		for step := range 20000 {
			id := ID(rng.IntN(ids))
			switch op := rng.IntN(10); {
			case op < 5: // insert, under a random live parent half the time
				if present[id] {
					p.Touch(id)
					break
				}
				b := Block{ID: id, Parent: NoParent, Position: uint32(rng.IntN(40)), Tokens: 512}
				if len(live) > 0 && rng.IntN(2) == 0 {
					b.Parent = live[rng.IntN(len(live))]
				}
				if rng.IntN(8) == 0 {
					b.Partial, b.Tokens = true, uint32(1+rng.IntN(511))
				}
				if !p.Admit(b) {
					break
				}
				p.Insert(b)
				present[id] = true
				live = append(live, id)
				inserts++
			case op < 7:
				p.Touch(id) // possibly unknown
			case op < 9: // remove an arbitrary ID, possibly unknown
				p.Remove(id)
				if present[id] {
					delete(present, id)
					live = slices.DeleteFunc(live, func(x ID) bool { return x == id })
					removes++
				}
			default: // evict the first victim
				v := victims(p, 1)
				if len(v) == 0 {
					if len(present) > 0 {
						t.Fatalf("step %d: no victim with %d blocks", step, len(present))
					}
					break
				}
				p.Remove(v[0])
				delete(present, v[0])
				live = slices.DeleteFunc(live, func(x ID) bool { return x == v[0] })
				removes++
			}
			if p.Len() != inserts-removes || p.Len() != len(present) {
				t.Fatalf("step %d: Len %d, inserts-removes %d, tracked %d", step, p.Len(), inserts-removes, len(present))
			}
			if step%97 == 0 {
				seen := make(map[ID]bool)
				for _, v := range victims(p, ids+1) {
					if !present[v] || seen[v] {
						t.Fatalf("step %d: victim %d untracked or repeated", step, v)
					}
					seen[v] = true
				}
			}
		}
		// Draining by victims empties every policy.
		for p.Len() > 0 {
			v := victims(p, 1)
			if len(v) == 0 {
				t.Fatalf("no victim with %d blocks", p.Len())
			}
			p.Remove(v[0])
		}
	})
}

// TestIDReuse: an ID removed and inserted again is a new block.
func TestIDReuse(t *testing.T) {
	forEach(t, func(t *testing.T, p Policy) {
		p.Insert(flat(1))
		p.Insert(Block{ID: 2, Parent: 1, Position: 1, Tokens: 512})
		p.Touch(2)
		p.Remove(2)
		p.Remove(1)
		if p.Len() != 0 || len(victims(p, 10)) != 0 {
			t.Fatalf("Len %d after removing all", p.Len())
		}
		// 2 comes back as a root, 1 as its child: no stale links.
		p.Insert(flat(2))
		p.Insert(Block{ID: 1, Parent: 2, Position: 1, Tokens: 512})
		p.Remove(1)
		if got := victims(p, 10); !slices.Equal(got, []ID{2}) {
			t.Fatalf("victims %v, want [2]", got)
		}
		p.Remove(2)
		p.Remove(2) // twice: ignored
		p.Remove(99)
		p.Touch(99)
		if p.Len() != 0 {
			t.Fatalf("Len %d", p.Len())
		}
	})
}

// TestNoSteadyStateAllocs: once the per-ID slices have grown, events do
// not allocate.
func TestNoSteadyStateAllocs(t *testing.T) {
	forEach(t, func(t *testing.T, p Policy) {
		const n = 1024
		for i := range ID(n) {
			par := NoParent
			if i%8 != 0 {
				par = i - 1
			}
			p.Insert(Block{ID: i, Parent: par, Position: i % 8, Tokens: 512, Partial: i%8 == 7})
		}
		next := ID(0)
		take := func(id ID) bool { next = id; return false }
		walk := 0
		walkAll := func(ID) bool { walk++; return walk < 64 }
		allocs := testing.AllocsPerRun(200, func() {
			p.Victims(take)
			id := next
			p.Remove(id)
			p.Insert(Block{ID: id, Parent: NoParent, Tokens: 512})
			p.Touch(id)
			walk = 0
			p.Victims(walkAll)
		})
		if allocs != 0 {
			t.Fatalf("%v allocations per evict+insert+touch", allocs)
		}
	})
}
