package daemon

import (
	"runtime"
	"runtime/metrics"
	"sync"
)

// A heap floor for a process whose data lives off the Go heap.
//
// The hot tier's payload bytes are mmapped slabs, outside the Go heap, so
// the heap of a node holding gigabytes is a few MiB of index and request
// state. At the runtime's default (GOGC=100, heap minimum 4 MiB) the heap
// goal is then about 4 MiB, and a few MiB of per-request garbage start a GC
// cycle: about 1.8 KB per 64 KiB PUT makes one cycle per couple of thousand
// PUTs, each cycle with two stop-the-world pauses and, on an idle P, a mark
// worker that takes a whole core for the mark phase.
//
// gcFloor raises the heap goal to a floor while the live heap is small, and
// leaves the runtime's own rule alone once it is not: after each GC cycle it
// sets GOGC to the percent that puts the next goal at the floor, never below
// the GOGC the process started with. The goal is therefore
// max(floor, the default goal), so the extra memory is at most the floor,
// and a large live heap (a big block index) keeps GOGC's proportional
// headroom, not a multiple of it. The floor is 1% of the hot capacity, at
// most maxGCFloor: the Go heap's garbage stays a small fraction of what the
// node caches.
//
// An explicit GOGC in the environment wins: the floor is then not applied.

// maxGCFloor bounds the heap floor.
const maxGCFloor = 64 << 20

// runtimeHeapMinimum is the runtime's heap goal floor at GOGC=100; it scales
// with GOGC (heap minimum = 4 MiB × GOGC/100).
const runtimeHeapMinimum = 4 << 20

// gcFloorFor returns the heap floor for a hot tier of capacity bytes.
func gcFloorFor(capacity int64) uint64 {
	return uint64(min(max(capacity/100, 0), maxGCFloor))
}

// gcPercentFor returns the GOGC that puts the next heap goal at floor for a
// live heap of live bytes and roots (stacks and globals) of roots bytes,
// never below base. The goal at GOGC p is max(live + (live+roots)·p/100,
// 4 MiB·p/100), so p is also kept at or below 100·floor/4 MiB. A base at or
// below 0 (GC off, or collect continuously) is returned as it is.
func gcPercentFor(live, roots, floor uint64, base int) int {
	if base <= 0 || live >= floor {
		return base
	}
	p := 100 * (floor - live) / max(live+roots, 1)
	p = min(p, 100*floor/runtimeHeapMinimum)
	return max(int(p), base)
}

// gcTuner applies gcPercentFor after every GC cycle. It learns that a cycle
// ended from a cleanup (runtime.AddCleanup) on a sentinel object: the
// sentinel is unreachable as soon as it is armed, so the first cycle after
// arming collects it and runs the cleanup, which tunes and arms a new one.
type gcTuner struct {
	floor uint64
	base  int
	set   func(int) int // debug.SetGCPercent
	mu    struct {
		sync.Mutex
		stopped bool // guarded by mu
		percent int  // last GOGC set; guarded by mu
	}
	tuned func(percent int) // test hook, called after each tune; nil in production
}

// gcSentinel is the object whose collection marks the end of a GC cycle. It
// holds a pointer so the tiny allocator never batches it with other objects
// (a tiny object's cleanup may be delayed indefinitely).
type gcSentinel struct{ _ *byte }

// newGCTuner returns a tuner for floor over the GOGC base; start starts
// it. set is debug.SetGCPercent outside tests.
func newGCTuner(floor uint64, base int, set func(int) int) *gcTuner {
	t := &gcTuner{floor: floor, base: base, set: set}
	t.mu.percent = base
	return t
}

// start sets GOGC for the current live heap and arms the first cleanup.
func (t *gcTuner) start() { t.tune() }

// arm attaches the cleanup to a fresh sentinel.
func (t *gcTuner) arm() {
	runtime.AddCleanup(&gcSentinel{}, (*gcTuner).onCycle, t)
}

// onCycle runs on the runtime's cleanup goroutine after a GC cycle.
func (t *gcTuner) onCycle() { t.tune() }

// tune sets GOGC from the live heap of the last cycle and arms the next
// cleanup, unless stopped.
func (t *gcTuner) tune() {
	s := []metrics.Sample{
		{Name: "/gc/heap/live:bytes"},
		{Name: "/gc/scan/stack:bytes"},
		{Name: "/gc/scan/globals:bytes"},
	}
	metrics.Read(s)
	var v [3]uint64
	for i := range s {
		if s[i].Value.Kind() == metrics.KindUint64 {
			v[i] = s[i].Value.Uint64()
		}
	}
	p := gcPercentFor(v[0], v[1]+v[2], t.floor, t.base)
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.mu.stopped {
		return
	}
	if p != t.mu.percent {
		t.set(p)
		t.mu.percent = p
	}
	if t.tuned != nil {
		t.tuned(p)
	}
	t.arm()
}

// stop ends the tuning and restores the base GOGC. A cleanup armed before
// stop still runs at the next cycle and does nothing.
func (t *gcTuner) stop() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.mu.stopped {
		return
	}
	t.mu.stopped = true
	if t.mu.percent != t.base {
		t.set(t.base)
		t.mu.percent = t.base
	}
}
