package server

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"testing"

	"github.com/gpucache/gpucache/client"
	"github.com/gpucache/gpucache/internal/hot"
	"github.com/gpucache/gpucache/internal/testfix"
)

// benchServer serves a hot tier of capacity bytes on loopback until the
// benchmark ends, and returns a one-connection client of it.
func benchServer(b *testing.B, capacity int64) *client.Client {
	b.Helper()
	store, err := hot.New(hot.Config{CapacityBytes: capacity, MinClass: 16 << 10, MaxClass: 1 << 20, SlabBytes: 4 << 20})
	if err != nil {
		b.Fatal(err)
	}
	srv, err := New(Config{Store: store, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	c, err := client.Dial(context.Background(), client.Config{Addr: ln.Addr().String(), Conns: 1})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		c.Close()
		srv.Shutdown(context.Background())
		<-served
		store.Close()
	})
	return c
}

// benchBlocks returns a chain of n blocks of size bytes.
func benchBlocks(b *testing.B, n, size int) (client.Namespace, []client.PutBlock) {
	b.Helper()
	ns := testNamespace("default")
	tokens := make([]uint32, int(ns.Layout.BlockTokens)*n)
	for i := range tokens {
		tokens[i] = uint32(i)
	}
	ids, err := client.Identities(ns, tokens)
	if err != nil {
		b.Fatal(err)
	}
	payloads := make([][]byte, n)
	for i := range payloads {
		payloads[i] = testfix.Payload(size, byte(i))
	}
	return ns, client.BlocksOf(ids, payloads)
}

// benchBatch is the blocks per GET or PUT request.
const benchBatch = 4

var benchSizes = []int{64 << 10, 1 << 20}

// BenchmarkServerGet measures the server's GET path over loopback TCP: the
// response is one writev of the header, the table and the slab views.
func BenchmarkServerGet(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(fmt.Sprintf("%dKiB", size>>10), func(b *testing.B) {
			c := benchServer(b, 64<<20)
			ns, blocks := benchBlocks(b, benchBatch, size)
			ctx := context.Background()
			if st, err := c.Put(ctx, ns, blocks); err != nil || st[0] != client.StatusStored {
				b.Fatalf("put: %v %v", st, err)
			}
			keys := make([]client.BlockKey, len(blocks))
			for i := range blocks {
				keys[i] = blocks[i].Key
			}
			b.SetBytes(int64(size * benchBatch))
			b.ResetTimer()
			for b.Loop() {
				for _, r := range c.Get(ctx, ns, keys) {
					if !r.Hit {
						b.Fatalf("miss: %v", r.Reason)
					}
				}
			}
		})
	}
}

// BenchmarkServerPut measures the server's PUT path over loopback TCP: each
// payload is read straight into a reserved slab slot. The blocks cycle
// through a ring twice the tier's capacity, so every PUT stores (LRU evicts
// the block the ring comes back to).
func BenchmarkServerPut(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(fmt.Sprintf("%dKiB", size>>10), func(b *testing.B) {
			const capacity = 16 << 20
			ring := max(2*capacity/size, 2*benchBatch)
			ring -= ring % benchBatch
			c := benchServer(b, capacity)
			ns, blocks := benchBlocks(b, ring, size)
			ctx := context.Background()
			b.SetBytes(int64(size * benchBatch))
			b.ResetTimer()
			i := 0
			for b.Loop() {
				st, err := c.Put(ctx, ns, blocks[i:i+benchBatch])
				if err != nil {
					b.Fatal(err)
				}
				for _, s := range st {
					if s != client.StatusStored {
						b.Fatalf("put status %v", s)
					}
				}
				i = (i + benchBatch) % ring
			}
		})
	}
}
