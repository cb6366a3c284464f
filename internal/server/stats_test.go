package server

import (
	"math"
	"runtime"
	"runtime/metrics"
	"testing"
)

func TestQuantileNanos(t *testing.T) {
	h := &metrics.Float64Histogram{
		Buckets: []float64{0, 1e-6, 1e-5, 1e-4, math.Inf(1)},
		Counts:  []uint64{50, 40, 9, 1},
	}
	for _, c := range []struct {
		q    float64
		want uint64
	}{
		{0.50, 1e3},  // the 50th sample is in [0, 1 µs)
		{0.90, 1e4},  // the 90th in [1 µs, 10 µs)
		{0.99, 1e5},  // the 99th in [10 µs, 100 µs)
		{1, 1e5},     // the top bucket is open: its lower bound
		{0.999, 1e5}, // the 100th sample
	} {
		if got := quantileNanos(h, c.q); got != c.want {
			t.Errorf("q%v = %d ns, want %d", c.q, got, c.want)
		}
	}
	if got := quantileNanos(&metrics.Float64Histogram{Buckets: []float64{0, 1}, Counts: []uint64{0}}, 0.99); got != 0 {
		t.Errorf("empty histogram: %d, want 0", got)
	}
	if got := histCount(h); got != 100 {
		t.Errorf("histCount = %d, want 100", got)
	}
}

// TestReadRuntimeStoppingWithinTotal: every GC cycle adds two stop-the-world
// pauses, and the stopping part of a pause never exceeds the whole pause, so
// the stopping figures are at most the total ones.
func TestReadRuntimeStoppingWithinTotal(t *testing.T) {
	before := ReadRuntime()
	runtime.GC()
	runtime.GC()
	rt := ReadRuntime()
	if rt.GCCycles < before.GCCycles+2 {
		t.Errorf("cycles %d -> %d after two runtime.GC", before.GCCycles, rt.GCCycles)
	}
	if rt.Pauses < before.Pauses+4 {
		t.Errorf("pauses %d -> %d after two cycles, want at least 4 more", before.Pauses, rt.Pauses)
	}
	if rt.PauseMaxNanos == 0 || rt.StopMaxNanos == 0 {
		t.Errorf("max pause %d ns, max stopping %d ns: want both recorded", rt.PauseMaxNanos, rt.StopMaxNanos)
	}
	if rt.StopP99Nanos > rt.PauseP99Nanos || rt.StopMaxNanos > rt.PauseMaxNanos {
		t.Errorf("stopping p99/max %d/%d ns exceed the pause's %d/%d ns", rt.StopP99Nanos, rt.StopMaxNanos, rt.PauseP99Nanos, rt.PauseMaxNanos)
	}
}

// TestStatReportsPauseSplit: STAT carries the GC pause count and the
// stopping and non-GC pause figures beside the total.
func TestStatReportsPauseSplit(t *testing.T) {
	ts := startServer(t, nil)
	got := map[string]bool{}
	for _, e := range ts.srv.Stats() {
		got[e.Name] = true
	}
	for _, name := range []string{"go_gc_cycles", "go_gc_pauses", "go_gc_pause_p99_ns", "go_gc_stop_p99_ns", "go_gc_stop_max_ns",
		"go_other_pause_p99_ns", "go_other_pause_max_ns"} {
		if !got[name] {
			t.Errorf("STAT lacks %s", name)
		}
	}
}
