package control

import (
	"context"
	"errors"
	"math"
	"slices"
	"testing"
)

// fleet: domain "rack-a" has 3 members, "rack-b" 2, "rack-c" 1.
func fleet() []Member {
	return []Member{
		mem("a1", "rack-a", 1), mem("a2", "rack-a", 1), mem("a3", "rack-a", 1),
		mem("b1", "rack-b", 1), mem("b2", "rack-b", 1), mem("c1", "rack-c", 1),
	}
}

func snapshot(v View) (uint64, []Member, []string) { return v.Epoch(), v.Members(), v.Domains() }

func assertUnchanged(t *testing.T, m *Memory, before View) {
	t.Helper()
	e0, m0, d0 := snapshot(before)
	e1, m1, d1 := snapshot(m.Current())
	if e0 != e1 || !slices.Equal(m0, m1) || !slices.Equal(d0, d1) {
		t.Fatalf("view changed: epoch %d->%d members %d->%d domains %v->%v", e0, e1, len(m0), len(m1), d0, d1)
	}
}

func TestPlanIsolate(t *testing.T) {
	v := mustView(t, 10, fleet()...)
	p, err := PlanIsolate(v, "rack-a", 3)
	if err != nil {
		t.Fatal(err)
	}
	if p.From != 10 || p.To != 13 || len(p.Victims) != 3 || len(p.Remaining) != 3 {
		t.Fatalf("plan %+v", p)
	}
	if nv, err := p.View(); err != nil || slices.Contains(nv.Domains(), "rack-a") || nv.Epoch() != 13 {
		t.Fatalf("planned view %v %v", nv.Domains(), err)
	}
	if _, err := PlanIsolate(v, "rack-a", 2); !errors.Is(err, ErrEpochOverflow) {
		t.Fatalf("short budget: %v", err)
	}
	if _, err := PlanIsolate(v, "rack-z", 100); !errors.Is(err, ErrUnknownDomain) {
		t.Fatal(err)
	}
	if _, err := PlanIsolate(v, "", 100); !errors.Is(err, ErrUnknownDomain) {
		t.Fatal(err)
	}
	// The caller's budget is capped by what the epoch can still take.
	top := mustView(t, math.MaxUint64-2, fleet()...)
	if _, err := PlanIsolate(top, "rack-a", math.MaxUint64); !errors.Is(err, ErrEpochOverflow) {
		t.Fatal(err)
	}
}

func TestIsolateShortBudgetChangesNothing(t *testing.T) {
	// rack-a needs 3 increments; only 2 remain.
	m, _ := NewMemory(math.MaxUint64-2, fleet()...)
	defer m.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := m.Watch(ctx)
	<-w
	before := m.Current()
	if _, err := m.Isolate("rack-a"); !errors.Is(err, ErrEpochOverflow) {
		t.Fatalf("err %v", err)
	}
	assertUnchanged(t, m, before)
	select {
	case v := <-w:
		t.Fatalf("watcher notified of epoch %d", v.Epoch())
	default:
	}
	// rack-b (2 victims) fits the same budget exactly.
	p, err := m.Isolate("rack-b")
	if err != nil {
		t.Fatal(err)
	}
	if v := m.Current(); v.Epoch() != math.MaxUint64 || v.Len() != 4 || p.To != math.MaxUint64 {
		t.Fatalf("epoch %d len %d", v.Epoch(), v.Len())
	}
	if v := <-w; v.Epoch() != math.MaxUint64 {
		t.Fatal("watcher missed the isolation")
	}
}

func TestIsolateExactBudgetRemovesEveryVictim(t *testing.T) {
	m, _ := NewMemory(math.MaxUint64-3, fleet()...)
	defer m.Close()
	p, err := m.Isolate("rack-a")
	if err != nil {
		t.Fatal(err)
	}
	v := m.Current()
	if v.Epoch() != math.MaxUint64 || p.From != math.MaxUint64-3 || p.To != math.MaxUint64 {
		t.Fatalf("epoch %d plan %d->%d", v.Epoch(), p.From, p.To)
	}
	for _, victim := range []MemberID{"a1", "a2", "a3"} {
		if _, ok := v.Member(victim); ok {
			t.Fatalf("%s survived", victim)
		}
	}
	if slices.Contains(v.Domains(), "rack-a") || v.Len() != 3 {
		t.Fatalf("domains %v", v.Domains())
	}
	// Placement no longer reaches the isolated domain.
	for _, k := range randomKeys(1000, 9) {
		if o, _ := Owner(v, k); o.FaultDomain == "rack-a" {
			t.Fatal("key owned by isolated domain")
		}
	}
}

func TestIsolateOneVictimOverflowChangesNothing(t *testing.T) {
	m, _ := NewMemory(math.MaxUint64, fleet()...)
	defer m.Close()
	before := m.Current()
	if _, err := m.Isolate("rack-c"); !errors.Is(err, ErrEpochOverflow) {
		t.Fatalf("err %v", err)
	}
	assertUnchanged(t, m, before)
}

// A plan made against an old view is refused whole; nothing changes.
func TestApplyStalePlan(t *testing.T) {
	m, _ := NewMemory(1, fleet()...)
	defer m.Close()
	p, err := PlanIsolate(m.Current(), "rack-a", math.MaxUint64)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Join(mem("a4", "rack-a", 1)); err != nil {
		t.Fatal(err)
	}
	before := m.Current()
	if _, err := m.Apply(p); !errors.Is(err, ErrEpochMismatch) {
		t.Fatal(err)
	}
	assertUnchanged(t, m, before)
	// Isolate re-plans and so also removes the member that joined late.
	if _, err := m.Isolate("rack-a"); err != nil {
		t.Fatal(err)
	}
	if v := m.Current(); v.Epoch() != 2+4 || slices.Contains(v.Domains(), "rack-a") {
		t.Fatalf("epoch %d domains %v", v.Epoch(), v.Domains())
	}
}
