package hot

import (
	"errors"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gpucache/gpucache/internal/policy"
)

// testPolicy is a recording policy for the store's tests. Its eviction
// order is kept in a slice, oldest first: FIFO by insertion when lru is
// false, LRU (Touch moves to the back) when it is true. admit, if set,
// decides admission.
type testPolicy struct {
	lru   bool
	admit func(policy.Block) bool

	order    []policy.ID
	blocks   map[policy.ID]policy.Block
	offered  []policy.Block
	inserted []policy.Block
	removed  []policy.ID
	touched  []policy.ID
}

func newTestPolicy(lru bool) *testPolicy {
	return &testPolicy{lru: lru, blocks: map[policy.ID]policy.Block{}}
}

func (p *testPolicy) Name() string { return "test" }

func (p *testPolicy) Admit(b policy.Block) bool {
	p.offered = append(p.offered, b)
	return p.admit == nil || p.admit(b)
}

func (p *testPolicy) Insert(b policy.Block) {
	if _, dup := p.blocks[b.ID]; dup {
		panic("testPolicy: Insert of a tracked ID")
	}
	p.blocks[b.ID] = b
	p.order = append(p.order, b.ID)
	p.inserted = append(p.inserted, b)
}

func (p *testPolicy) Touch(id policy.ID) {
	if _, ok := p.blocks[id]; !ok {
		panic("testPolicy: Touch of an untracked ID")
	}
	p.touched = append(p.touched, id)
	if p.lru {
		p.order = slices.DeleteFunc(p.order, func(x policy.ID) bool { return x == id })
		p.order = append(p.order, id)
	}
}

func (p *testPolicy) Remove(id policy.ID) {
	if _, ok := p.blocks[id]; !ok {
		panic("testPolicy: Remove of an untracked ID")
	}
	delete(p.blocks, id)
	p.order = slices.DeleteFunc(p.order, func(x policy.ID) bool { return x == id })
	p.removed = append(p.removed, id)
}

func (p *testPolicy) Victims(yield func(policy.ID) bool) {
	for _, id := range p.order {
		if !yield(id) {
			return
		}
	}
}

func (p *testPolicy) Len() int { return len(p.blocks) }

// policyStore is a 1 MiB store (16 blocks of blk bytes) run by p.
func policyStore(t *testing.T, p policy.Policy) *Store {
	t.Helper()
	cfg := testConfig(1 * mib)
	cfg.Policy = p
	return newTestStore(t, cfg)
}

// idOf returns the entry index of block id (the policy's ID for it).
func idOf(t *testing.T, s *Store, id uint64) policy.ID {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	idx, ok := s.mu.index[key(id)]
	if !ok {
		t.Fatalf("block %d not indexed", id)
	}
	return idx
}

// TestPolicyEvictionOrder: with a FIFO policy, touches do not save a block
// (the built-in LRU would evict 2 first, see TestLRUOrder).
func TestPolicyEvictionOrder(t *testing.T) {
	p := newTestPolicy(false)
	s := policyStore(t, p)
	ns := nsOf(1)
	fillSlab(t, s, ns)
	has(t, s, ns, 1, blk)
	s.Lookup(ns, []Key{key(2)}, 0, false)
	if want := []policy.ID{idOf(t, s, 1), idOf(t, s, 2)}; !slices.Equal(p.touched, want) {
		t.Fatalf("touched %v, want %v", p.touched, want)
	}
	for i, want := range []uint64{1, 2, 3} {
		put(t, s, ns, 17+uint64(i), 0, blk)
		if present(s, want) {
			t.Fatalf("step %d: block %d not evicted (FIFO)", i, want)
		}
		mustInvariants(t, s)
	}
	if st := s.Stats(); st.Evictions != 3 || st.Blocks != 16 || p.Len() != 16 {
		t.Fatalf("Stats = %+v, policy Len %d", st, p.Len())
	}
}

// TestPolicyEvictionIgnoresPrefixRule: the prefix-aware rule is the
// policy's to apply; an LRU policy evicts a parent before its more recent
// child, and the parent, published again, finds its cached child.
func TestPolicyEvictionIgnoresPrefixRule(t *testing.T) {
	p := newTestPolicy(true)
	s := policyStore(t, p)
	ns := nsOf(1)
	put(t, s, ns, 1, 0, blk)
	put(t, s, ns, 2, 1, blk)
	for id := uint64(10); id < 24; id++ {
		put(t, s, ns, id, 0, blk)
	}
	has(t, s, ns, 2, blk)
	put(t, s, ns, 100, 0, blk)
	if present(s, 1) || !present(s, 2) {
		t.Fatalf("LRU policy: want parent 1 evicted, child 2 kept: 1 %v 2 %v", present(s, 1), present(s, 2))
	}
	mustInvariants(t, s)
	put(t, s, ns, 1, 0, blk)
	if present(s, 10) || !present(s, 2) {
		t.Fatalf("want 10 evicted, 2 kept: 10 %v 2 %v", present(s, 10), present(s, 2))
	}
	if last := p.inserted[len(p.inserted)-1]; last.ID != idOf(t, s, 1) || last.Parent != policy.NoParent {
		t.Fatalf("re-published parent inserted as %+v", last)
	}
	id1 := idOf(t, s, 1)
	s.mu.Lock()
	children := s.mu.entries[id1].children
	s.mu.Unlock()
	if children != 1 {
		t.Fatalf("re-published parent has %d cached children, want 1", children)
	}
	mustInvariants(t, s)
}

// TestPolicyLRUMatchesBuiltin: an LRU test policy evicts like TestLRUOrder.
func TestPolicyLRUMatchesBuiltin(t *testing.T) {
	s := policyStore(t, newTestPolicy(true))
	checkLRUOrder(t, s, nsOf(1))
	mustInvariants(t, s)
}

// TestPolicyRegisteredLRU runs the registered "lru" policy, once it is
// registered by internal/policy.
func TestPolicyRegisteredLRU(t *testing.T) {
	p, err := policy.New("lru")
	if err != nil {
		t.Skipf("policy lru not registered yet: %v", err)
	}
	s := policyStore(t, p)
	ns := nsOf(1)
	fillSlab(t, s, ns)
	has(t, s, ns, 1, blk)
	s.Lookup(ns, []Key{key(2)}, 0, false)
	if err := s.checkInvariants(); err != nil {
		t.Fatal(err)
	}
	put(t, s, ns, 17, 0, blk)
	if present(s, 3) || !present(s, 1) || !present(s, 2) {
		t.Fatalf("want 3 evicted first: 1 %v 2 %v 3 %v", present(s, 1), present(s, 2), present(s, 3))
	}
	// A PUT of a cached block is a use.
	if _, err := s.ReserveBlock(ns, key(4), Key{}, BlockMeta{Tokens: 16}, blk); !errors.Is(err, ErrExists) {
		t.Fatalf("Reserve of a cached block: %v", err)
	}
	put(t, s, ns, 18, 0, blk)
	if !present(s, 4) || present(s, 5) {
		t.Fatalf("want 5 evicted, 4 kept: 4 %v 5 %v", present(s, 4), present(s, 5))
	}
	// Delete calls Remove; Len follows.
	if del, _ := s.Delete(ns, key(6)); !del {
		t.Fatal("Delete")
	}
	mustInvariants(t, s)
	if p.Len() != 15 {
		t.Fatalf("Len %d, want 15", p.Len())
	}
}

func TestPolicySkipsPinnedAndLeased(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newTestPolicy(false)
		s := policyStore(t, p)
		ns := nsOf(1)
		fillSlab(t, s, ns)
		v, ok := s.Acquire(ns, key(1))
		if !ok {
			t.Fatal("Acquire 1")
		}
		hits, lease, _ := s.Lookup(ns, []Key{key(2)}, time.Minute, true)
		if hits != 1 || lease == 0 {
			t.Fatalf("Lookup: hits %d lease %d", hits, lease)
		}
		put(t, s, ns, 17, 0, blk)
		if !present(s, 1) || !present(s, 2) || present(s, 3) {
			t.Fatalf("want pinned 1 and leased 2 kept, 3 evicted: %v %v %v", present(s, 1), present(s, 2), present(s, 3))
		}
		mustInvariants(t, s)
		s.Release(v)
		s.ReleaseLease(lease)
		put(t, s, ns, 18, 0, blk)
		if present(s, 1) {
			t.Fatal("released 1 is first in FIFO order and should go now")
		}
		mustInvariants(t, s)
	})
}

// TestPolicyScanBound: the scan looks at EvictScan*policyScanFactor
// candidates at most, then gives up with ErrNoSpace.
func TestPolicyScanBound(t *testing.T) {
	p := newTestPolicy(false)
	cfg := testConfig(1 * mib)
	cfg.Policy = p
	cfg.EvictScan = 1
	s := newTestStore(t, cfg)
	ns := nsOf(1)
	fillSlab(t, s, ns)
	var views []View
	for id := uint64(1); id <= policyScanFactor; id++ {
		v, ok := s.Acquire(ns, key(id))
		if !ok {
			t.Fatalf("Acquire %d", id)
		}
		views = append(views, v)
	}
	if err := tryPut(s, ns, 100, 0, blk); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("scan past its bound: %v, want ErrNoSpace", err)
	}
	s.Release(views[0])
	put(t, s, ns, 100, 0, blk)
	if present(s, 1) {
		t.Fatal("unpinned 1 should be evicted")
	}
	for _, v := range views[1:] {
		s.Release(v)
	}
	mustInvariants(t, s)
}

func TestPolicyAdmission(t *testing.T) {
	p := newTestPolicy(false)
	p.admit = func(b policy.Block) bool { return !b.Partial }
	s := policyStore(t, p)
	ns := nsOf(1)
	put(t, s, ns, 1, 0, blk)
	r, err := s.ReserveBlock(ns, key(2), key(1), BlockMeta{Tokens: 7, Position: 1, Partial: true}, blk)
	if !errors.Is(err, ErrNotAdmitted) || r.Buf != nil {
		t.Fatalf("partial block: %v (buf %d), want ErrNotAdmitted", err, len(r.Buf))
	}
	want := policy.Block{ID: policy.NoParent, Parent: idOf(t, s, 1), Position: 1, Tokens: 7, Partial: true}
	if got := p.offered[len(p.offered)-1]; got != want {
		t.Fatalf("offered %+v, want %+v", got, want)
	}
	if present(s, 2) || p.Len() != 1 || len(p.inserted) != 1 {
		t.Fatalf("refused block stored: present %v, Len %d, inserted %d", present(s, 2), p.Len(), len(p.inserted))
	}
	st := s.Stats()
	if st.NotAdmitted != 1 || st.PutRejects != 1 || st.Puts != 1 || st.InFlight != 0 || st.BytesReserved != blk {
		t.Fatalf("Stats = %+v", st)
	}
	mustInvariants(t, s)
	// The key is free: a full block under it is admitted.
	r, err = s.ReserveBlock(ns, key(2), key(1), BlockMeta{Tokens: 16, Position: 1}, blk)
	if err != nil {
		t.Fatal(err)
	}
	s.Commit(r)
	// A demanded block (cold refill) skips admission.
	n := len(p.offered)
	r, err = s.ReserveBlock(ns, key(3), Key{}, BlockMeta{Partial: true, Demand: true}, blk)
	if err != nil {
		t.Fatalf("demanded block: %v", err)
	}
	s.Commit(r)
	if len(p.offered) != n || !present(s, 3) {
		t.Fatalf("demanded block offered to Admit (%d -> %d) or not stored", n, len(p.offered))
	}
	mustInvariants(t, s)
}

// TestPolicyInsertRemove: Insert for every published block (with its
// parent's ID and its metadata), Remove for every evicted or deleted one,
// nothing for aborted or rejected ones.
func TestPolicyInsertRemove(t *testing.T) {
	p := newTestPolicy(false)
	s := policyStore(t, p)
	ns := nsOf(1)

	r, err := s.ReserveBlock(ns, key(1), Key{}, BlockMeta{Tokens: 16}, blk)
	if err != nil {
		t.Fatal(err)
	}
	s.Commit(r)
	r, err = s.ReserveBlock(ns, key(2), key(1), BlockMeta{Tokens: 5, Position: 1, Partial: true}, blk)
	if err != nil {
		t.Fatal(err)
	}
	s.Commit(r)
	id1, id2 := idOf(t, s, 1), idOf(t, s, 2)
	wantIns := []policy.Block{
		{ID: id1, Parent: policy.NoParent, Tokens: 16, Key: policyKey(key(1))},
		{ID: id2, Parent: id1, Position: 1, Tokens: 5, Partial: true, Key: policyKey(key(2))},
	}
	if !slices.Equal(p.inserted, wantIns) {
		t.Fatalf("inserted %+v, want %+v", p.inserted, wantIns)
	}
	// Parent under another namespace, parent not cached: NoParent.
	put(t, s, nsOf(2), 3, 1, blk)
	put(t, s, ns, 4, 99, blk)
	for _, b := range p.inserted[2:] {
		if b.Parent != policy.NoParent {
			t.Fatalf("inserted %+v, want NoParent", b)
		}
	}
	// Abort and a cycle: no Insert.
	r, err = s.ReserveBlock(ns, key(5), Key{}, BlockMeta{Tokens: 16}, blk)
	if err != nil {
		t.Fatal(err)
	}
	s.Abort(r)
	r, err = s.ReserveBlock(ns, key(6), key(6), BlockMeta{Tokens: 16}, blk)
	if err != nil {
		t.Fatal(err)
	}
	s.Commit(r)
	if len(p.inserted) != 4 || p.Len() != 4 {
		t.Fatalf("inserted %d, Len %d, want 4", len(p.inserted), p.Len())
	}
	mustInvariants(t, s)

	// Delete removes; then fill to evict.
	if del, _ := s.Delete(ns, key(4)); !del {
		t.Fatal("Delete 4")
	}
	id4 := p.removed[0]
	for id := uint64(10); id < 30; id++ {
		put(t, s, ns, id, 0, blk)
		mustInvariants(t, s)
	}
	st := s.Stats()
	if uint64(len(p.removed)) != st.Evictions+st.Deletes || uint64(p.Len()) != st.Blocks {
		t.Fatalf("removed %d, Len %d; Stats %+v", len(p.removed), p.Len(), st)
	}
	// FIFO: 1, 2, 3 (other namespace, same class) went first, in order.
	if want := []policy.ID{id4, id1, id2}; !slices.Equal(p.removed[:3], want) {
		t.Fatalf("removed %v, want prefix %v", p.removed, want)
	}
}

// TestPolicyIDReuse: a freed entry index is handed to the next block; the
// policy sees Remove then Insert of the same ID.
func TestPolicyIDReuse(t *testing.T) {
	p := newTestPolicy(true)
	s := policyStore(t, p)
	ns := nsOf(1)
	put(t, s, ns, 1, 0, blk)
	put(t, s, ns, 2, 0, blk)
	id1 := idOf(t, s, 1)
	if del, _ := s.Delete(ns, key(1)); !del {
		t.Fatal("Delete")
	}
	put(t, s, ns, 3, 0, blk)
	if got := idOf(t, s, 3); got != id1 {
		t.Fatalf("block 3 got ID %d, want the freed %d", got, id1)
	}
	if last := p.inserted[len(p.inserted)-1]; last.ID != id1 {
		t.Fatalf("Insert %+v, want ID %d", last, id1)
	}
	mustInvariants(t, s)
	// Evictions reuse IDs too.
	for id := uint64(10); id < 60; id++ {
		put(t, s, ns, id, 0, blk)
		if id%3 == 0 {
			has(t, s, ns, id, blk)
		}
		mustInvariants(t, s)
	}
	if p.Len() != 16 {
		t.Fatalf("Len %d", p.Len())
	}
}

// TestPolicyPutExistingTouches: a Reserve of a cached block is a use.
func TestPolicyPutExistingTouches(t *testing.T) {
	p := newTestPolicy(true)
	s := policyStore(t, p)
	ns := nsOf(1)
	fillSlab(t, s, ns)
	if err := tryPut(s, ns, 1, 0, blk); !errors.Is(err, ErrExists) {
		t.Fatalf("put of a cached block: %v", err)
	}
	if !slices.Equal(p.touched, []policy.ID{idOf(t, s, 1)}) {
		t.Fatalf("touched %v", p.touched)
	}
	// Another namespace's PUT of the key touches nothing.
	if err := tryPut(s, nsOf(2), 2, 0, blk); !errors.Is(err, ErrExists) {
		t.Fatalf("put under another namespace: %v", err)
	}
	if len(p.touched) != 1 {
		t.Fatalf("foreign PUT touched: %v", p.touched)
	}
	put(t, s, ns, 17, 0, blk)
	if !present(s, 1) || present(s, 2) {
		t.Fatalf("want 2 evicted, 1 kept: 1 %v 2 %v", present(s, 1), present(s, 2))
	}
	mustInvariants(t, s)
}

// TestPutExistingTouchesBuiltin: the same with the built-in order.
func TestPutExistingTouchesBuiltin(t *testing.T) {
	s := oneSlabStore(t)
	ns := nsOf(1)
	fillSlab(t, s, ns)
	if err := tryPut(s, ns, 1, 0, blk); !errors.Is(err, ErrExists) {
		t.Fatalf("put of a cached block: %v", err)
	}
	put(t, s, ns, 17, 0, blk)
	if !present(s, 1) || present(s, 2) {
		t.Fatalf("want 2 evicted, 1 kept: 1 %v 2 %v", present(s, 1), present(s, 2))
	}
	if st := s.Stats(); st.NotAdmitted != 0 || st.PutRejects != 1 {
		t.Fatalf("Stats = %+v", st)
	}
	mustInvariants(t, s)
}

// TestPolicyVictimInClass: the policy orders blocks of every class, the
// store takes the first one of the class that needs space.
func TestPolicyVictimInClass(t *testing.T) {
	p := newTestPolicy(false)
	cfg := testConfig(2 * mib)
	cfg.Policy = p
	s := newTestStore(t, cfg)
	ns := nsOf(1)
	const big = 2 * blk // another class, one slab of 8
	for id := uint64(1); id <= 8; id++ {
		put(t, s, ns, id, 0, big)
	}
	for id := uint64(10); id < 26; id++ {
		put(t, s, ns, id, 0, blk)
	}
	// Make the big blocks recent (FIFO ignores it), so no slab reclaim.
	for id := uint64(1); id <= 8; id++ {
		has(t, s, ns, id, big)
	}
	put(t, s, ns, 100, 0, blk)
	for id := uint64(1); id <= 8; id++ {
		if !present(s, id) {
			t.Fatalf("block %d of another class evicted", id)
		}
	}
	if present(s, 10) {
		t.Fatal("want 10, the first of its class in FIFO order, evicted")
	}
	mustInvariants(t, s)
}

// TestConcurrentStressPolicy is TestConcurrentStress with a policy: the
// test policies (one refusing every fifth block) and the registered "lru"
// and "prefix" policies.
func TestConcurrentStressPolicy(t *testing.T) {
	policies := map[string]func() policy.Policy{
		"test-lru": func() policy.Policy { return newTestPolicy(true) },
		"test-fifo-admit": func() policy.Policy {
			p, n := newTestPolicy(false), 0
			p.admit = func(policy.Block) bool { n++; return n%5 != 0 }
			return p
		},
	}
	for _, name := range []string{"lru", "prefix"} {
		if _, err := policy.New(name); err == nil {
			policies[name] = func() policy.Policy { p, _ := policy.New(name); return p }
		} else {
			t.Logf("policy %s not registered yet: skipped", name)
		}
	}
	for name, mk := range policies {
		t.Run(name, func(t *testing.T) {
			cfg := testConfig(8 * mib)
			cfg.MaxLeases = 64
			cfg.Policy = mk()
			st := runStress(t, cfg, 7)
			if st.Puts == 0 || st.Evictions == 0 || st.Pinned != 0 || st.InFlight != 0 {
				t.Fatalf("stress did not exercise the store: %+v", st)
			}
			if name == "test-fifo-admit" && st.NotAdmitted == 0 {
				t.Fatalf("no block refused: %+v", st)
			}
		})
	}
}
