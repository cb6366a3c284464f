package replay_test

import (
	"testing"

	"github.com/gpucache/gpucache/internal/policy"
	"github.com/gpucache/gpucache/tools/internal/replay"
	"github.com/gpucache/gpucache/tools/internal/workload"
)

// floorCapacities are the capacities adaptive's floor is checked at, in
// percent of the trace's unique blocks (ADR 0021).
var floorCapacities = []float64{1, 2, 5, 10, 20, 50}

// checkFloor asserts that adaptive stays at or above 0.99× LRU on both
// prefix-hit ratio and compute saved (under the default cost model) at
// every floorCapacities point.
func checkFloor(t *testing.T, reqs []replay.Request) {
	t.Helper()
	for _, pct := range floorCapacities {
		lru, err := replay.Simulate(reqs, "lru", pct/100, nil)
		if err != nil {
			t.Fatal(err)
		}
		ad, err := replay.Simulate(reqs, policy.AdaptiveName, pct/100, nil)
		if err != nil {
			t.Fatal(err)
		}
		if ad.HitRatio < 0.99*lru.HitRatio || ad.ModelComputeSaved < 0.99*lru.ModelComputeSaved {
			t.Errorf("%v%%: adaptive hit %.4f compute %.4f, lru hit %.4f compute %.4f: below 0.99× LRU",
				pct, ad.HitRatio, ad.ModelComputeSaved, lru.HitRatio, lru.ModelComputeSaved)
		}
	}
}

// TestAdaptiveFloorGenerated: adaptive's floor (never below
// 0.99× LRU on prefix-hit ratio or compute saved, at 1-50% capacity) on
// short generated traces of every shape, with seeds the evaluation in
// docs/BENCHMARKS.md did not use.
func TestAdaptiveFloorGenerated(t *testing.T) {
	for _, shape := range workload.Shapes() {
		t.Run(string(shape), func(t *testing.T) {
			c := workload.Default(shape)
			c.Requests, c.Seed = 1000, 11
			reqs, err := workload.Generate(c)
			if err != nil {
				t.Fatal(err)
			}
			checkFloor(t, reqs)
		})
	}
}
