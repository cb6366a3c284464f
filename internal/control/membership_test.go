package control

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"testing"
)

func TestNewViewValidation(t *testing.T) {
	good := mem("a", "r1", 1)
	for _, tc := range []struct {
		name string
		ms   []Member
		want error
	}{
		{"empty id", []Member{{Addr: "x:1", FaultDomain: "d", CapacityBytes: 1}}, ErrInvalidMember},
		{"empty addr", []Member{{ID: "a", FaultDomain: "d", CapacityBytes: 1}}, ErrInvalidMember},
		{"empty domain", []Member{{ID: "a", Addr: "x:1", CapacityBytes: 1}}, ErrInvalidMember},
		{"zero capacity", []Member{{ID: "a", Addr: "x:1", FaultDomain: "d"}}, ErrInvalidMember},
		{"duplicate", []Member{good, mem("b", "r2", 1), good}, ErrDuplicateMember},
	} {
		if _, err := NewView(1, tc.ms); !errors.Is(err, tc.want) {
			t.Errorf("%s: err %v, want %v", tc.name, err, tc.want)
		}
	}
	in := []Member{mem("c", "r2", 1), mem("a", "r1", 2), mem("b", "r1", 3)}
	in[2].ProtoVersion = 0
	v := mustView(t, 5, in...)
	in[0].ID = "mutated"
	ids := []MemberID{}
	for _, m := range v.Members() {
		ids = append(ids, m.ID)
	}
	if !slices.Equal(ids, []MemberID{"a", "b", "c"}) || v.Epoch() != 5 || v.Len() != 3 {
		t.Fatalf("view %v epoch %d", ids, v.Epoch())
	}
	v.Members()[0].ID = "mutated"
	if m, ok := v.Member("a"); !ok || m.CapacityBytes != 2*gib {
		t.Fatal("view is not immutable")
	}
	if !slices.Equal(v.Domains(), []string{"r1", "r2"}) || v.MinProtoVersion() != 0 {
		t.Fatalf("domains %v minproto %d", v.Domains(), v.MinProtoVersion())
	}
	if w := mem("x", "d", 3).Weight(); w != 3 {
		t.Fatalf("weight %v", w)
	}
}

func TestStatic(t *testing.T) {
	if _, err := NewStatic(); !errors.Is(err, ErrNoMembers) {
		t.Fatal(err)
	}
	if _, err := NewStatic(Member{ID: "a"}); !errors.Is(err, ErrInvalidMember) {
		t.Fatal(err)
	}
	s, err := NewStatic(mem("solo", "local", 8))
	if err != nil {
		t.Fatal(err)
	}
	if v := s.Current(); v.Epoch() != 1 || v.Len() != 1 {
		t.Fatalf("static view epoch %d len %d", v.Epoch(), v.Len())
	}
	ctx, cancel := context.WithCancel(context.Background())
	ch := s.Watch(ctx)
	if v := <-ch; v.Epoch() != 1 {
		t.Fatalf("first watched epoch %d", v.Epoch())
	}
	cancel()
	if _, ok := <-ch; ok {
		t.Fatal("watch delivered a second view")
	}
	ch2 := s.Watch(context.Background())
	<-ch2
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, ok := <-ch2; ok {
		t.Fatal("watch open after Close")
	}
	if _, ok := <-s.Watch(context.Background()); ok {
		t.Fatal("Watch after Close delivered")
	}
	if err := s.Close(); err != nil {
		t.Fatal("second Close:", err)
	}
	if s.Current().Epoch() != 1 {
		t.Fatal("Current after Close")
	}
}

func TestMemoryChanges(t *testing.T) {
	m, err := NewMemory(1, mem("a", "r1", 1), mem("b", "r2", 1))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	step := func(v View, err error) View {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	if v := step(m.Join(mem("c", "r3", 1))); v.Epoch() != 2 || v.Len() != 3 {
		t.Fatalf("join: epoch %d len %d", v.Epoch(), v.Len())
	}
	if _, err := m.Join(mem("c", "r3", 1)); !errors.Is(err, ErrDuplicateMember) {
		t.Fatal(err)
	}
	if _, err := m.Join(Member{ID: "bad"}); !errors.Is(err, ErrInvalidMember) {
		t.Fatal(err)
	}
	if v := step(m.Drain("a")); v.Epoch() != 3 {
		t.Fatalf("drain epoch %d", v.Epoch())
	} else if a, _ := v.Member("a"); !a.Draining {
		t.Fatal("a not draining")
	}
	if v := step(m.Drain("a")); v.Epoch() != 3 {
		t.Fatal("re-drain advanced the epoch")
	}
	if v := step(m.Leave("a")); v.Epoch() != 4 || v.Len() != 2 {
		t.Fatalf("leave: epoch %d len %d", v.Epoch(), v.Len())
	}
	for _, f := range []func(MemberID) (View, error){m.Leave, m.Drain} {
		if _, err := f("a"); !errors.Is(err, ErrUnknownMember) {
			t.Fatal(err)
		}
	}
	if m.Current().Epoch() != 4 {
		t.Fatal("failed changes advanced the epoch")
	}
	// CAS on a stale epoch changes nothing.
	if _, err := m.CompareAndSwap(3, nil); !errors.Is(err, ErrEpochMismatch) {
		t.Fatal(err)
	}
	if v := step(m.CompareAndSwap(4, []Member{mem("z", "r9", 1)})); v.Epoch() != 5 || v.Len() != 1 {
		t.Fatal("CAS")
	}
	m.Close()
	if _, err := m.Join(mem("q", "r", 1)); !errors.Is(err, ErrClosed) {
		t.Fatal(err)
	}
}

func TestMemoryEpochOverflow(t *testing.T) {
	m, err := NewMemory(math.MaxUint64, mem("a", "r1", 1))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if _, err := m.Join(mem("b", "r2", 1)); !errors.Is(err, ErrEpochOverflow) {
		t.Fatal(err)
	}
	if v := m.Current(); v.Epoch() != math.MaxUint64 || v.Len() != 1 {
		t.Fatal("overflowing join changed the view")
	}
	if _, err := NewMemory(0); err == nil {
		t.Fatal("epoch 0 accepted")
	}
}

// Concurrent joins: every one lands, each exactly one epoch.
func TestMemoryConcurrentCAS(t *testing.T) {
	m, _ := NewMemory(1)
	defer m.Close()
	const n = 32
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			if _, err := m.Join(mem(fmt.Sprintf("n%02d", i), "r", 1)); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if v := m.Current(); v.Epoch() != 1+n || v.Len() != n {
		t.Fatalf("epoch %d len %d", v.Epoch(), v.Len())
	}
}

// The publisher never blocks on a watcher that does not read; the watcher
// then finds only the latest view.
func TestWatchDropToLatest(t *testing.T) {
	m, _ := NewMemory(1, mem("a", "r1", 1))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	slow := m.Watch(ctx)
	for i := range 100 {
		if _, err := m.Join(mem(fmt.Sprintf("n%03d", i), "r2", 1)); err != nil {
			t.Fatal(err)
		}
	}
	v := <-slow
	if v.Epoch() != 101 || v.Len() != 101 {
		t.Fatalf("slow watcher got epoch %d", v.Epoch())
	}
	select {
	case v := <-slow:
		t.Fatalf("stale extra view %d", v.Epoch())
	default:
	}

	// A reading watcher sees strictly increasing epochs ending at the last.
	fast := m.Watch(ctx)
	done := make(chan []uint64)
	go func() {
		var seen []uint64
		for v := range fast {
			seen = append(seen, v.Epoch())
			if v.Epoch() == 151 {
				break
			}
		}
		done <- seen
	}()
	for i := range 50 {
		if _, err := m.Join(mem(fmt.Sprintf("m%03d", i), "r3", 1)); err != nil {
			t.Fatal(err)
		}
	}
	seen := <-done
	if !slices.IsSorted(seen) || seen[len(seen)-1] != 151 {
		t.Fatalf("epochs %v", seen)
	}
	for i := 1; i < len(seen); i++ {
		if seen[i] <= seen[i-1] {
			t.Fatalf("epochs not strictly increasing: %v", seen)
		}
	}

	cancel()
	for range fast { // closed by the cancel
	}
	late := m.Watch(context.Background())
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	n := 0
	for range late {
		n++
	}
	if n != 1 {
		t.Fatalf("late watcher got %d views before close", n)
	}
	if _, ok := <-m.Watch(ctx); ok {
		t.Fatal("Watch with a done ctx delivered")
	}
}

func TestHubPublishKeepsTheNewest(t *testing.T) {
	var h Hub
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := h.Watch(ctx)
	<-w // the empty view
	mk := func(epoch uint64) View {
		v, err := NewView(epoch, []Member{{ID: "a", Addr: "127.0.0.1:1", FaultDomain: "d", CapacityBytes: 1 << 30}})
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	if !h.Publish(mk(3)) || h.Publish(mk(2)) || h.Publish(mk(3)) {
		t.Fatal("an older or equal epoch replaced a newer view")
	}
	if got := <-w; got.Epoch() != 3 || h.Current().Epoch() != 3 {
		t.Fatalf("watcher got epoch %d, current %d", got.Epoch(), h.Current().Epoch())
	}
	h.Close()
	if _, ok := <-w; ok || h.Publish(mk(4)) {
		t.Fatal("a closed hub still publishes")
	}
}
