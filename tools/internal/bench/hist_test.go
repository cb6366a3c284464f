package bench

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func TestBucketsAreContiguous(t *testing.T) {
	prevHi := uint64(0)
	for i := 1; i < numBuckets; i++ {
		lo, hi := bucketBounds(i)
		if lo != prevHi+1 || hi < lo {
			t.Fatalf("bucket %d: [%d, %d] after %d", i, lo, hi, prevHi)
		}
		if bucketOf(lo) != i || bucketOf(hi) != i {
			t.Fatalf("bucket %d: bounds map to %d, %d", i, bucketOf(lo), bucketOf(hi))
		}
		// Relative width under 1/subCount.
		if lo >= subCount && float64(hi-lo+1)/float64(lo) > 1.0/subCount+1e-12 {
			t.Fatalf("bucket %d too wide: [%d, %d]", i, lo, hi)
		}
		prevHi = hi
	}
	if prevHi != math.MaxUint64 {
		t.Fatalf("last bucket ends at %d", prevHi)
	}
}

func TestQuantiles(t *testing.T) {
	var h Histogram
	if h.Quantile(0.5) != 0 || h.Mean() != 0 {
		t.Fatal("empty histogram")
	}
	// 1..1000 µs: the q-quantile is q·1000 µs, within the bucket error.
	for i := 1; i <= 1000; i++ {
		h.Record(time.Duration(i) * time.Microsecond)
	}
	for _, tc := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 500 * time.Microsecond}, {0.9, 900 * time.Microsecond}, {0.99, 990 * time.Microsecond},
		{0.999, 999 * time.Microsecond}, {1, 1000 * time.Microsecond}, {0, time.Microsecond}} {
		got := h.Quantile(tc.q)
		if got < tc.want || float64(got-tc.want) > float64(tc.want)/subCount {
			t.Errorf("q%v = %v, want %v (+%.1f%%)", tc.q, got, tc.want, 100.0/subCount)
		}
	}
	if h.Count() != 1000 || time.Duration(h.min) != time.Microsecond || h.Max() != time.Millisecond {
		t.Fatalf("count %d min %v max %v", h.Count(), time.Duration(h.min), h.Max())
	}
	if m := h.Mean(); m != 500500*time.Nanosecond {
		t.Fatalf("mean %v", m)
	}
}

// Random samples: every quantile is within one bucket of the exact one,
// and merging per-goroutine histograms equals recording into one.
func TestQuantilesMatchSortAndMerge(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var all Histogram
	parts := make([]Histogram, 4)
	var vals []time.Duration
	for i := range 20000 {
		v := time.Duration(rng.ExpFloat64() * float64(200*time.Microsecond))
		vals = append(vals, v)
		all.Record(v)
		parts[i%4].Record(v)
	}
	var merged Histogram
	for i := range parts {
		merged.Merge(&parts[i])
	}
	slices.Sort(vals)
	for _, q := range []float64{0.5, 0.9, 0.99, 0.999} {
		exact := vals[int(math.Ceil(q*float64(len(vals))))-1]
		got := all.Quantile(q)
		if got < exact || float64(got-exact) > float64(exact)/subCount+1 {
			t.Errorf("q%v = %v, exact %v", q, got, exact)
		}
		if m := merged.Quantile(q); m != got {
			t.Errorf("merged q%v = %v, want %v", q, m, got)
		}
	}
	if merged.Count() != all.Count() || merged.Max() != all.Max() || merged.min != all.min {
		t.Fatal("merge lost records")
	}
}

func TestRecordDoesNotAllocate(t *testing.T) {
	var h Histogram
	if n := testing.AllocsPerRun(100, func() { h.Record(1234567) }); n != 0 {
		t.Fatalf("%v allocations per Record", n)
	}
}

func BenchmarkRecord(b *testing.B) {
	var h Histogram
	for i := 0; b.Loop(); i++ {
		h.Record(time.Duration(i))
	}
}
