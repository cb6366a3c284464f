package refill

import (
	"context"
	"testing"
	"time"

	"github.com/gpucache/gpucache/internal/cold"
	"github.com/gpucache/gpucache/internal/cold/pack"
	"github.com/gpucache/gpucache/internal/cold/s3store/s3test"
)

// BenchmarkS3RefillVsRaw compares, against the same real S3 server
// (versitygw on loopback, started by s3test) and the same bytes, a full
// RefillBlock (pointer, manifest, identity check, payload read, SHA-256)
// with one raw RangeGet of the payload range. The target is
// refill >= 80% of raw.
func BenchmarkS3RefillVsRaw(b *testing.B) {
	store := s3test.NewStore(b, "bench/")
	ctx := context.Background()
	for _, size := range benchSizes {
		ids := chain(b, testNamespace("acme"), 8, 1)
		p, _ := buildPack(b, ids, size)
		for _, o := range append([]pack.Object{p.Object, p.Manifest}, p.Pointers...) {
			if err := store.Put(ctx, o.Key, o.Body, cold.PutOptions{}); err != nil {
				b.Fatal(err)
			}
		}
		m, err := pack.DecodeManifest(p.Manifest.Body)
		if err != nil {
			b.Fatal(err)
		}
		k, _ := ids[3].Key()
		rng, _ := m.Find(k)
		dst := make([]byte, size)
		b.Run("raw/"+sizeName(size), func(b *testing.B) {
			b.SetBytes(int64(size))
			for b.Loop() {
				if err := store.RangeGet(ctx, p.Object.Key, int64(rng.Offset), dst); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("refill-cached/"+sizeName(size), func(b *testing.B) {
			r, err := New(store, Config{ManifestCache: 64, PointerTTL: time.Minute})
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(size))
			for b.Loop() {
				if n, res, err := r.RefillBlock(ctx, ids[3], dst); !res.Hit || n != size {
					b.Fatal(res, err)
				}
			}
		})
		b.Run("refill/"+sizeName(size), func(b *testing.B) {
			r, err := New(store, Config{})
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(size))
			for b.Loop() {
				if n, res, err := r.RefillBlock(ctx, ids[3], dst); !res.Hit || n != size {
					b.Fatal(res, err)
				}
			}
		})
	}
}
