package clienttest_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpucache/gpucache/api/wire"
	. "github.com/gpucache/gpucache/client"
	"github.com/gpucache/gpucache/internal/server/servertest"
)

// BenchmarkStampede: 32 clients need the same uncached 64-block chain at
// once. "coordinated" uses GetOrFill (one fill per block, the others wait);
// "uncoordinated" has every client compute every block and PUT it, which is
// what engines do without a shared fill directory. Each block's compute is
// simulated as 200µs of wall time (a stand-in for prefill on a GPU; the
// figure of interest is fills run and time to all-complete, not CPU).
func BenchmarkStampede(b *testing.B) {
	const clients, blocks, size = 32, 64, 16 << 10
	const computeCost = 200 * time.Microsecond
	rs := servertest.Start(b, "127.0.0.1:0", wire.Limits{})
	for _, mode := range []string{"coordinated", "uncoordinated"} {
		b.Run(mode, func(b *testing.B) {
			cs := make([]*Client, clients)
			for i := range cs {
				c, err := Dial(context.Background(), Config{Addr: rs.Addr, Tenant: "acme", Conns: 1})
				if err != nil {
					b.Fatal(err)
				}
				defer c.Close()
				cs[i] = c
			}
			var fills atomic.Int64
			round := 0
			for b.Loop() {
				round++
				ns := testNS("acme")
				ns.ModelID = fmt.Sprintf("bench-%s-%d-%d", mode, round, time.Now().UnixNano())
				tokens := make([]uint32, blocks*int(ns.Layout.BlockTokens))
				for i := range tokens {
					tokens[i] = uint32(i)
				}
				keys, _ := Chain(ns, tokens)
				ids, _ := Identities(ns, tokens)
				fill := func(_ context.Context, idx []int) ([][]byte, error) {
					out := make([][]byte, len(idx))
					for k, i := range idx {
						time.Sleep(computeCost) // simulated prefill, not synchronization
						fills.Add(1)
						out[k] = blockPayload(keys[i], size)
					}
					return out, nil
				}
				var wg sync.WaitGroup
				for _, c := range cs {
					wg.Go(func() {
						ctx := context.Background()
						if mode == "coordinated" {
							if _, _, err := c.GetOrFill(ctx, ns, tokens, fill); err != nil {
								b.Error(err)
							}
							return
						}
						idx := make([]int, blocks)
						for i := range idx {
							idx[i] = i
						}
						data, _ := fill(ctx, idx)
						c.Put(ctx, ns, BlocksOf(ids, data))
					})
				}
				wg.Wait()
			}
			b.ReportMetric(float64(fills.Load())/float64(b.N), "fills/op")
		})
	}
}
