package transport

import (
	"errors"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"unsafe"
)

// Registration reuse: a binding that releases and checks out again gets the
// same registered slots (same ids, same memory addresses), so it registers
// once; only the first checkout binds.
func TestRegistrationReuse(t *testing.T) {
	r := newReg(t, 8, 4096)
	first := checkout(t, r, "peer-a", 3, 0)
	ids := []SlotID{first.SlotID(0), first.SlotID(1), first.SlotID(2)}
	addrs := []*byte{unsafe.SliceData(first.Slot(0)), unsafe.SliceData(first.Slot(1)), unsafe.SliceData(first.Slot(2))}
	if err := r.Release(first); err != nil {
		t.Fatal(err)
	}
	for round := range 5 {
		st := checkout(t, r, "peer-a", 3, 0)
		for k := range 3 {
			if st.SlotID(k) != ids[k] || unsafe.SliceData(st.Slot(k)) != addrs[k] {
				t.Fatalf("round %d slot %d: got id %d, want the registered %d at the same address", round, k, st.SlotID(k), ids[k])
			}
		}
		if err := r.Release(st); err != nil {
			t.Fatal(err)
		}
	}
	s := checkStats(t, r)
	if s.Bound != 3 || s.Rebound != 0 || s.Reused != 15 || s.Checkouts != 6 {
		t.Fatalf("want 3 registrations then 15 reuses, got %+v", s)
	}
	if s.IdleBound != 3 || s.Idle != 8 {
		t.Fatalf("released slots should stay bound: %+v", s)
	}
	// A second binding does not steal peer-a's registrations while
	// unbound slots remain.
	b := checkout(t, r, "peer-b", 5, 0)
	for k := range 5 {
		for _, id := range ids {
			if b.SlotID(k) == id {
				t.Fatalf("peer-b took peer-a's slot %d while unbound slots were idle", id)
			}
		}
	}
	if err := r.Release(b); err != nil {
		t.Fatal(err)
	}
}

// Checkout prefers an idle slot already bound to the binding over a lower
// numbered unbound one, then unbound slots, then rebinding other bindings'
// slots; it skips held and quarantined slots.
func TestCheckoutPrefersIdleBinding(t *testing.T) {
	r := newReg(t, 6, 4096)
	a := checkout(t, r, "A", 1, 0) // slot 0
	b := checkout(t, r, "B", 1, 0) // slot 1
	for _, st := range []*Stage{a, b} {
		if err := r.Release(st); err != nil {
			t.Fatal(err)
		}
	}
	got := checkout(t, r, "B", 1, 0)
	if got.SlotID(0) != 1 {
		t.Fatalf("B got slot %d, want its bound idle slot 1 over A's slot 0 and unbound 2..5", got.SlotID(0))
	}
	if err := r.Release(got); err != nil {
		t.Fatal(err)
	}

	// C: unbound slots 2..5 first, lowest first, then A's slot 0 (rebind)
	// before B's slot 1.
	c := checkout(t, r, "C", 5, 0)
	want := []SlotID{2, 3, 4, 5, 0}
	for k, id := range want {
		if c.SlotID(k) != id {
			t.Fatalf("C slot %d = %d, want order %v", k, c.SlotID(k), want)
		}
	}
	s := checkStats(t, r)
	if s.Rebound != 1 {
		t.Fatalf("want one rebind, got %+v", s)
	}
	if err := r.Release(c); err != nil {
		t.Fatal(err)
	}

	// Held and quarantined slots are skipped, even when bound to the caller.
	l, err := r.Hold(1) // B's slot
	if err != nil {
		t.Fatal(err)
	}
	q := checkout(t, r, "C", 1, 0) // slot 0, the lowest C-bound
	if q.SlotID(0) != 0 {
		t.Fatalf("C got %d, want 0", q.SlotID(0))
	}
	if err := r.Quarantine(q); err != nil {
		t.Fatal(err)
	}
	bb := checkout(t, r, "B", 1, 0)
	if bb.SlotID(0) == 1 {
		t.Fatal("checkout handed out a held slot")
	}
	cc := checkout(t, r, "C", 3, 0)
	for k := range 3 {
		if id := cc.SlotID(k); id == 0 || id == 1 {
			t.Fatalf("checkout handed out slot %d (held or quarantined)", id)
		}
	}
	for _, st := range []*Stage{bb, cc} {
		if err := r.Release(st); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Release(); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(); !errors.Is(err, ErrLeaseReleased) {
		t.Fatalf("second lease release: %v", err)
	}
	if n, err := r.Reclaim(); n != 1 || err != nil {
		t.Fatalf("reclaim: %d %v", n, err)
	}
}

// Checkout is all-or-nothing: a refused checkout changes nothing, and
// concurrent checkouts never hand one slot to two stages.
func TestCheckoutAtomic(t *testing.T) {
	r := newReg(t, 4, 4096)
	st := checkout(t, r, "A", 3, 0)
	before := checkStats(t, r)
	if _, err := r.Checkout("B", 2, 0); !errors.Is(err, ErrNoSlots) {
		t.Fatalf("want ErrNoSlots, got %v", err)
	}
	after := checkStats(t, r)
	before.CheckoutMisses++
	if after != before {
		t.Fatalf("refused checkout changed the registry:\n before %+v\n after  %+v", before, after)
	}
	if err := r.Release(st); err != nil {
		t.Fatal(err)
	}
	if err := r.Release(st); !errors.Is(err, ErrStageEnded) {
		t.Fatalf("double release: %v", err)
	}
	for _, n := range []int{0, -1, MaxStageSlots + 1} {
		if _, err := r.Checkout("A", n, 0); err == nil {
			t.Fatalf("checkout of %d slots succeeded", n)
		}
	}
	if _, err := r.Checkout("", 1, 0); err == nil {
		t.Fatal("checkout without binding succeeded")
	}

	// Concurrent: 4 slots, workers asking for 1..3 slots each. owner[id]
	// is claimed with a CAS; a double hand-out fails the CAS.
	var owner [4]atomic.Int32
	var wg sync.WaitGroup
	var got atomic.Int64
	for w := range 4 {
		wg.Go(func() {
			b := Binding([]string{"A", "B", "C", "D"}[w])
			for i := range 300 {
				st, err := r.Checkout(b, 1+(w+i)%3, 0)
				if errors.Is(err, ErrNoSlots) {
					continue
				}
				if err != nil {
					t.Error(err)
					return
				}
				got.Add(1)
				for k := range st.Len() {
					if !owner[st.SlotID(k)].CompareAndSwap(0, int32(w+1)) {
						t.Errorf("slot %d handed out twice", st.SlotID(k))
					}
				}
				for k := range st.Len() {
					owner[st.SlotID(k)].Store(0)
				}
				if err := r.Release(st); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	if got.Load() == 0 {
		t.Fatal("no concurrent checkout succeeded")
	}
	if s := checkStats(t, r); s.CheckedOut != 0 || s.Held != 0 {
		t.Fatalf("leftover: %+v", s)
	}
}

// A lease hold blocks Fence and Reclaim until it is released; then the
// same Fence epoch, or Reclaim, takes the slots.
func TestLeaseHoldBlocksReclaim(t *testing.T) {
	r := newReg(t, 4, 4096)
	if _, err := r.Fence(1); err != nil {
		t.Fatal(err)
	}
	st := checkout(t, r, "A", 2, 1)
	l, err := r.HoldStage(st)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := r.Fence(2); n != 0 || err != nil {
		t.Fatalf("fence reclaimed %d held slots (%v)", n, err)
	}
	// Still live: the owner can keep writing under its lease.
	st.Slot(0)[0] = 1
	if err := l.Release(); err != nil {
		t.Fatal(err)
	}
	if n, err := r.Fence(2); n != 2 || err != nil {
		t.Fatalf("fence after the hold: %d %v", n, err)
	}
	if err := r.Release(st); !errors.Is(err, ErrStageEnded) {
		t.Fatalf("release of a fenced stage: %v", err)
	}

	// Quarantined and held: Reclaim skips it until the hold goes.
	q := checkout(t, r, "A", 1, 2)
	if err := r.Quarantine(q); err != nil {
		t.Fatal(err)
	}
	lq, err := r.Hold(q.SlotID(0))
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := r.Reclaim(); n != 0 {
		t.Fatalf("reclaim took %d held slots", n)
	}
	if s := checkStats(t, r); s.Quarantined != 1 || s.Held != 1 {
		t.Fatalf("%+v", s)
	}
	if err := lq.Release(); err != nil {
		t.Fatal(err)
	}
	if n, _ := r.Reclaim(); n != 1 {
		t.Fatalf("reclaim after the hold: %d", n)
	}
	// A stage is fenced whole: one held slot keeps all of it.
	w := checkout(t, r, "B", 3, 2)
	l1, err := r.Hold(w.SlotID(1))
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := r.Fence(3); n != 0 {
		t.Fatalf("fence split a stage: %d slots", n)
	}
	if err := l1.Release(); err != nil {
		t.Fatal(err)
	}
	if err := r.Release(w); err != nil {
		t.Fatalf("the unfenced stage should be live: %v", err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
}

// Fence reclaims stages of older epochs (slots back to idle, bindings kept),
// leaves current ones, and refuses stale checkouts and fences.
func TestFenceReclaims(t *testing.T) {
	r := newReg(t, 6, 4096)
	old := checkout(t, r, "A", 2, 0)
	cur := checkout(t, r, "B", 2, 1)
	ahead := checkout(t, r, "C", 1, 5)
	if n, err := r.Fence(1); n != 2 || err != nil {
		t.Fatalf("fence 1: reclaimed %d, %v; want the 2 slots of epoch 0", n, err)
	}
	if err := r.Release(old); !errors.Is(err, ErrStageEnded) {
		t.Fatalf("fenced stage release: %v", err)
	}
	if _, err := r.HoldStage(old); !errors.Is(err, ErrStageEnded) {
		t.Fatalf("fenced stage hold: %v", err)
	}
	s := checkStats(t, r)
	if s.Fenced != 2 || s.CheckedOut != 3 || s.IdleBound != 2 || s.Epoch != 1 {
		t.Fatalf("%+v", s)
	}
	if _, err := r.Checkout("A", 1, 0); !errors.Is(err, ErrStaleEpoch) {
		t.Fatalf("stale checkout: %v", err)
	}
	// The fenced slots went back to A's binding: A reuses them.
	again := checkout(t, r, "A", 2, 1)
	if again.SlotID(0) != old.SlotID(0) || again.SlotID(1) != old.SlotID(1) {
		t.Fatal("fenced slots were not reused by their binding")
	}
	if e, n, err := r.Advance(); e != 2 || n != 4 || err != nil {
		t.Fatalf("advance: epoch %d reclaimed %d err %v; want 2, 4 (B's and A's), nil", e, n, err)
	}
	if _, err := r.Fence(1); !errors.Is(err, ErrStaleEpoch) {
		t.Fatalf("fence backwards: %v", err)
	}
	if got := r.Epoch(); got != 2 {
		t.Fatalf("epoch %d after a refused fence, want 2", got)
	}
	if err := r.Release(cur); !errors.Is(err, ErrStageEnded) {
		t.Fatal(err)
	}
	if err := r.Release(again); !errors.Is(err, ErrStageEnded) {
		t.Fatal(err)
	}
	if err := r.Release(ahead); err != nil {
		t.Fatalf("a stage of a newer epoch stays live: %v", err)
	}
	if s := checkStats(t, r); s.Fenced != 6 || s.CheckedOut != 0 {
		t.Fatalf("%+v", s)
	}
}

// At math.MaxUint64 the epoch cannot advance: Advance refuses and nothing
// changes, stages under that epoch included.
func TestEpochOverflow(t *testing.T) {
	r := newReg(t, 2, 4096)
	if _, err := r.Fence(math.MaxUint64 - 1); err != nil {
		t.Fatal(err)
	}
	st := checkout(t, r, "A", 1, math.MaxUint64)
	if e, n, err := r.Advance(); e != math.MaxUint64 || n != 0 || err != nil {
		t.Fatalf("advance to max: %d %d %v", e, n, err)
	}
	before := checkStats(t, r)
	e, n, err := r.Advance()
	if !errors.Is(err, ErrEpochOverflow) || e != math.MaxUint64 || n != 0 {
		t.Fatalf("advance past max: %d %d %v", e, n, err)
	}
	if after := checkStats(t, r); after != before {
		t.Fatalf("overflow changed the registry:\n before %+v\n after  %+v", before, after)
	}
	if n, err := r.Fence(math.MaxUint64); n != 0 || err != nil {
		t.Fatalf("re-fence at max: %d %v", n, err)
	}
	if err := r.Release(st); err != nil {
		t.Fatalf("the stage at max survives overflow: %v", err)
	}
}

func TestRegistryConfig(t *testing.T) {
	for _, c := range []RegistryConfig{{Slots: -1}, {Slots: MaxSlots + 1}, {SlotSize: -1}, {SlotSize: MaxSlotSize + 1}} {
		if _, err := NewRegistry(c); !errors.Is(err, ErrConfig) {
			t.Errorf("%+v: %v", c, err)
		}
	}
	r := newReg(t, 1, 100)
	if r.SlotSize() != 4096 {
		t.Fatalf("slot size %d, want rounded to 4096", r.SlotSize())
	}
	st := checkout(t, r, "A", 1, 0)
	if err := r.Close(); !errors.Is(err, ErrBusy) {
		t.Fatalf("close with a stage out: %v", err)
	}
	if err := r.Release(st); err != nil {
		t.Fatal(err)
	}
}
