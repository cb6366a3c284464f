package refill

import (
	"context"
	"fmt"
	"testing"

	"github.com/gpucache/gpucache/internal/cold"
	"github.com/gpucache/gpucache/internal/cold/pack"
)

var benchSizes = []int{64 << 10, 256 << 10, 1 << 20}

// benchSetup stores an 8-block pack of blocks of size bytes in a cold.Mem.
func benchSetup(b *testing.B, size int) (*cold.Mem, *pack.Pack, *pack.Manifest) {
	b.Helper()
	ids := chain(b, testNamespace("acme"), 8, 1)
	p, _ := buildPack(b, ids, size)
	mem := cold.NewMem()
	for _, o := range append([]pack.Object{p.Object, p.Manifest}, p.Pointers...) {
		if err := mem.Put(context.Background(), o.Key, o.Body, cold.PutOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	m, err := pack.DecodeManifest(p.Manifest.Body)
	if err != nil {
		b.Fatal(err)
	}
	return mem, p, m
}

// BenchmarkRefill is a full RefillBlock: pointer, manifest (read, digest,
// decode), identity check, payload read and SHA-256, against an in-memory
// store. Compare with BenchmarkRawRangeGet of the same bytes.
func BenchmarkRefill(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(sizeName(size), func(b *testing.B) {
			mem, _, _ := benchSetup(b, size)
			r, err := New(mem, Config{})
			if err != nil {
				b.Fatal(err)
			}
			id := chain(b, testNamespace("acme"), 8, 1)[3]
			dst := make([]byte, size)
			ctx := context.Background()
			b.SetBytes(int64(size))
			b.ReportAllocs()
			for b.Loop() {
				if n, res, err := r.RefillBlock(ctx, id, dst); !res.Hit || n != size {
					b.Fatal(res, err)
				}
			}
		})
	}
}

// BenchmarkRawRangeGet reads the same payload range with one RangeGet and no
// checks: the floor under BenchmarkRefill.
func BenchmarkRawRangeGet(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(sizeName(size), func(b *testing.B) {
			mem, p, m := benchSetup(b, size)
			rg := m.Ranges[3]
			dst := make([]byte, size)
			ctx := context.Background()
			b.SetBytes(int64(size))
			b.ReportAllocs()
			for b.Loop() {
				if err := mem.RangeGet(ctx, p.Object.Key, int64(rg.Offset), dst); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func sizeName(n int) string {
	if n >= 1<<20 {
		return fmt.Sprintf("%dMiB", n>>20)
	}
	return fmt.Sprintf("%dKiB", n>>10)
}
