package daemon

import (
	"runtime"
	"sync"
	"testing"
)

func TestGCFloorFor(t *testing.T) {
	for _, c := range []struct {
		capacity int64
		want     uint64
	}{
		{0, 0},
		{1 << 30, (1 << 30) / 100},
		{5 << 30, (5 << 30) / 100},
		{10 << 30, maxGCFloor},
		{1 << 40, maxGCFloor},
	} {
		if got := gcFloorFor(c.capacity); got != c.want {
			t.Errorf("gcFloorFor(%d) = %d, want %d", c.capacity, got, c.want)
		}
	}
}

// goalAt is the runtime's heap goal at GOGC p (see gcPercentFor).
func goalAt(live, roots uint64, p int) uint64 {
	return max(live+(live+roots)*uint64(p)/100, runtimeHeapMinimum*uint64(p)/100)
}

func TestGCPercentFor(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		name               string
		live, roots, floor uint64
		base               int
	}{
		{"tiny heap, 51 MiB floor", 3 * mib, 256 << 10, 51 * mib, 100},
		{"tiny heap, 64 MiB floor", 2 * mib, 64 << 10, 64 * mib, 100},
		{"heap near the floor", 40 * mib, mib, 64 * mib, 100},
		{"heap above half the floor keeps base", 33 * mib, 0, 64 * mib, 100},
		{"heap above the floor", 100 * mib, mib, 64 * mib, 100},
		{"no heap yet", 0, 0, 64 * mib, 100},
		{"floor below the runtime minimum", 3 * mib, 0, 2 * mib, 100},
		{"higher base", 3 * mib, 0, 64 * mib, 400},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := gcPercentFor(c.live, c.roots, c.floor, c.base)
			if p < c.base {
				t.Fatalf("GOGC %d below base %d", p, c.base)
			}
			goal, def := goalAt(c.live, c.roots, p), goalAt(c.live, c.roots, c.base)
			// The goal is the larger of the floor and the default goal,
			// give or take the integer percent's rounding.
			want := max(c.floor, def)
			slack := (c.live + c.roots) / 100
			if goal > want+slack || goal+slack+uint64(runtimeHeapMinimum/100) < want {
				t.Errorf("GOGC %d: goal %d, want about max(floor %d, default goal %d) = %d", p, goal, c.floor, def, want)
			}
		})
	}
	for _, base := range []int{-1, 0} {
		if p := gcPercentFor(mib, 0, 64*mib, base); p != base {
			t.Errorf("base %d: got %d, want it unchanged", base, p)
		}
	}
}

// TestGCTunerFollowsCycles: the tuner sets GOGC when it starts and again
// after each GC cycle, and stop restores the base. The setter is a fake, so
// the test leaves the process's GOGC alone.
func TestGCTunerFollowsCycles(t *testing.T) {
	var mu sync.Mutex
	var set []int
	tu := newGCTuner(64<<20, 100, func(p int) int {
		mu.Lock()
		defer mu.Unlock()
		set = append(set, p)
		return 0
	})
	tuned := make(chan int, 16)
	tu.tuned = func(p int) {
		select {
		case tuned <- p:
		default:
		}
	}
	tu.start()
	first := <-tuned
	if first <= 100 {
		t.Fatalf("GOGC %d at start with a small heap, want above 100", first)
	}
	for range 2 {
		runtime.GC()
		if p := <-tuned; p <= 100 {
			t.Fatalf("GOGC %d after a cycle with a small heap, want above 100", p)
		}
	}
	tu.stop()
	tu.stop()
	mu.Lock()
	defer mu.Unlock()
	if len(set) == 0 || set[0] != first || set[len(set)-1] != 100 {
		t.Fatalf("GOGC set to %v: want %d first and 100 (the base) last", set, first)
	}
}
