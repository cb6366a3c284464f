package replay

import (
	"testing"

	"github.com/gpucache/gpucache/internal/policy"
)

// BenchmarkSimulate replays the whole conversation trace (12,031 requests,
// 288,500 block accesses) through one policy at 10% capacity per
// iteration.
func BenchmarkSimulate(b *testing.B) {
	reqs := conversationTrace(b)
	for _, name := range []string{"lru", "prefix", policy.ChainTTLName, OptName} {
		b.Run(name, func(b *testing.B) {
			var r Result
			for b.Loop() {
				var err error
				if r, err = Simulate(reqs, name, 0.10, nil); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(r.HitRatio, "hit_ratio")
			b.ReportMetric(float64(r.Blocks)*float64(b.N)/b.Elapsed().Seconds(), "blocks/s")
		})
	}
}
