package admin

import (
	"strings"
	"testing"

	"github.com/gpucache/gpucache/api/wire"
)

// TestHistogramsExported: the server's latency histograms appear on
// /metrics as classic histograms gpucache_<name> with their labels, one
// cumulative _bucket per bound plus +Inf, _sum and _count; without a
// source there are none.
func TestHistogramsExported(t *testing.T) {
	h := New(func() []wire.StatEntry { return nil })
	if _, body := get(t, h, "/metrics"); strings.Contains(body, "gpucache_request_seconds") {
		t.Fatal("histograms exported without a source")
	}
	bounds := []float64{16e-6, 32e-6, 64e-6}
	h.SetHistograms(func() []Histogram {
		return []Histogram{
			{Name: "request_seconds", LabelNames: []string{"op", "tier"}, LabelValues: []string{"get", "dram"},
				Bounds: bounds, Counts: []uint64{3, 0, 1, 2}, Sum: 1.5},
			{Name: "request_seconds", LabelNames: []string{"op", "tier"}, LabelValues: []string{"get", "flash"},
				Bounds: bounds, Counts: []uint64{0, 0, 0, 0}},
			{Name: "fill_wait_seconds", LabelNames: []string{"path", "outcome"}, LabelValues: []string{"refill", "finished"},
				Bounds: bounds, Counts: []uint64{0, 1, 0, 0}, Sum: 0.00002},
		}
	})
	_, body := get(t, h, "/metrics")
	for _, want := range []string{
		"# TYPE gpucache_request_seconds histogram\n",
		`gpucache_request_seconds_bucket{op="get",tier="dram",le="1.6e-05"} 3` + "\n",
		`gpucache_request_seconds_bucket{op="get",tier="dram",le="3.2e-05"} 3` + "\n",
		`gpucache_request_seconds_bucket{op="get",tier="dram",le="6.4e-05"} 4` + "\n",
		`gpucache_request_seconds_bucket{op="get",tier="dram",le="+Inf"} 6` + "\n",
		`gpucache_request_seconds_sum{op="get",tier="dram"} 1.5` + "\n",
		`gpucache_request_seconds_count{op="get",tier="dram"} 6` + "\n",
		`gpucache_request_seconds_count{op="get",tier="flash"} 0` + "\n",
		"# TYPE gpucache_fill_wait_seconds histogram\n",
		`gpucache_fill_wait_seconds_bucket{outcome="finished",path="refill",le="3.2e-05"} 1` + "\n",
		`gpucache_fill_wait_seconds_count{outcome="finished",path="refill"} 1` + "\n",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	if n := strings.Count(body, "gpucache_request_seconds_bucket{"); n != 2*(len(bounds)+1) {
		t.Errorf("%d request_seconds buckets, want %d", n, 2*(len(bounds)+1))
	}
	if t.Failed() {
		t.Log(body)
	}
}
