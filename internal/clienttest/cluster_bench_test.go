package clienttest_test

import (
	"context"
	"testing"

	"github.com/gpucache/gpucache/api/wire"
	. "github.com/gpucache/gpucache/client"
	"github.com/gpucache/gpucache/internal/server/servertest"
)

// BenchmarkRoutedGet is the cost of cluster routing end to end: one GET of
// a batch of 8 cached 64 KiB blocks, every block a hit, issued
//   - direct: by a plain Client to a single node;
//   - cluster-1: by a Cluster over a single node without a cluster (epoch 0,
//     every key local): the routing layer alone;
//   - cluster-3: by a Cluster over three nodes on loopback, where the batch
//     splits by owner and the groups go out in parallel.
//
// All servers and the client share this machine's cores, so cluster-3
// shows the cost of fan-out on one host, not the throughput of three.
func BenchmarkRoutedGet(b *testing.B) {
	const batch, size = 8, 64 << 10
	ns := testNS("acme")
	blocks := testBlocks(b, ns, 64, size, 3)
	ctx := context.Background()
	run := func(b *testing.B, get func(keys []BlockKey) []GetResult) {
		b.SetBytes(batch * size)
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			off := (i * batch) % len(blocks)
			i++
			for _, r := range get(keysOf(blocks[off : off+batch])) {
				if !r.Hit {
					b.Fatalf("miss: %v", r.Reason)
				}
			}
		}
	}
	b.Run("direct", func(b *testing.B) {
		rs := servertest.Start(b, "127.0.0.1:0", wire.Limits{})
		c, err := Dial(ctx, Config{Addr: rs.Addr, Tenant: "acme", Conns: 2})
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		if _, err := c.Put(ctx, ns, blocks); err != nil {
			b.Fatal(err)
		}
		run(b, func(keys []BlockKey) []GetResult { return c.Get(ctx, ns, keys) })
	})
	for _, n := range []int{1, 3} {
		b.Run(map[int]string{1: "cluster-1", 3: "cluster-3"}[n], func(b *testing.B) {
			var seeds []string
			if n == 1 {
				seeds = []string{servertest.Start(b, "127.0.0.1:0", wire.Limits{}).Addr}
			} else {
				for _, nd := range startCluster(b, n).nodes {
					seeds = append(seeds, nd.addr)
				}
			}
			c, err := DialCluster(ctx, ClusterConfig{Seeds: seeds, Node: Config{Tenant: "acme", Conns: 2}, RefreshInterval: -1})
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			if st, err := c.Put(ctx, ns, blocks); err != nil {
				b.Fatal(err)
			} else {
				for _, s := range st {
					if s != StatusStored {
						b.Fatalf("put: %v", s)
					}
				}
			}
			run(b, func(keys []BlockKey) []GetResult { return c.Get(ctx, ns, keys) })
		})
	}
}
