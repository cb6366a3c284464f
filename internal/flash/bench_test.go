package flash

import (
	"context"
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/gpucache/gpucache/api/identity"
	"github.com/gpucache/gpucache/internal/hot"
	"github.com/gpucache/gpucache/internal/testfix"
)

// The benchmarks run in b.TempDir(): point TMPDIR at the disk to measure
// (a real one, not tmpfs, for figures worth reporting).

// benchTier opens a tier for blocks of size and returns it with the
// namespace digest its blocks use (its tenant known).
func benchTier(b *testing.B, direct string, size int) (*Tier, identity.NamespaceDigest) {
	b.Helper()
	seg := int64(64 * mib)
	for seg < int64(size)+2*align {
		seg *= 2
	}
	tr, err := Open(Config{Dir: b.TempDir(), Capacity: 16 * seg, SegmentBytes: seg, WriteBuffer: max(64*mib, 2*int64(size)), Direct: direct})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { tr.Close() })
	ns := testfix.RawNamespace("bench", "m1")
	d, err := ns.Digest()
	if err != nil {
		b.Fatal(err)
	}
	tr.Stored(identity.CacheIdentity{Namespace: ns, Tokens: []uint32{1}, ValidLength: 1}, d, identity.BlockKey{})
	return tr, d
}

// benchFilled is benchTier with n blocks of size written to flash (64
// MiB of them, at least 4), keys benchKey(0..n-1).
func benchFilled(b *testing.B, direct string, size int) (*Tier, identity.NamespaceDigest, int) {
	b.Helper()
	tr, d := benchTier(b, direct, size)
	n := max(4, (64*mib)/size)
	payload := testfix.Payload(size, 1)
	for i := range n {
		for !tr.Evicted(d, benchKey(i), identity.BlockKey{}, 16, payload) {
			if err := tr.Flush(context.Background()); err != nil {
				b.Fatal(err)
			}
		}
	}
	if err := tr.Flush(context.Background()); err != nil {
		b.Fatal(err)
	}
	return tr, d, n
}

func benchKey(i int) identity.BlockKey {
	var k identity.BlockKey
	binary.LittleEndian.PutUint64(k[:], uint64(i)+1)
	return k
}

// BenchmarkFlashRead refills blocks written to flash into a 4 KiB-aligned
// buffer, as the DRAM slot is: one pread (O_DIRECT in direct mode) and
// the checksum.
func BenchmarkFlashRead(b *testing.B) {
	for _, mode := range []string{DirectAuto, DirectOff} {
		for _, size := range []int{1 * mib, 32 * mib} {
			b.Run(fmt.Sprintf("%s/%dMiB", mode, size/mib), func(b *testing.B) {
				tr, d, n := benchFilled(b, mode, size)
				if mode == DirectAuto && !tr.Direct() {
					b.Logf("auto mode is buffered here")
				}
				slot := alignedBuf(size)
				alloc := func(int) ([]byte, bool) { return slot, true }
				ns := testfix.RawNamespace("bench", "m1")
				b.SetBytes(int64(size))
				for i := 0; b.Loop(); i++ {
					if _, ok := tr.Refill(context.Background(), ns, d, benchKey(i%n), alloc); !ok {
						b.Fatal("miss")
					}
				}
			})
		}
	}
}

// BenchmarkFlashRefillPublish is BenchmarkFlashRead as a DRAM miss does
// it: reserve a hot-tier slot, refill into it, publish and pin it
// (CommitAcquire), release, and delete it again so the next read misses
// DRAM too. Against BenchmarkFlashRead of the same size it is the cost of
// publishing a flash hit into DRAM.
func BenchmarkFlashRefillPublish(b *testing.B) {
	for _, size := range []int{1 * mib, 32 * mib} {
		b.Run(fmt.Sprintf("%s/%dMiB", DirectAuto, size/mib), func(b *testing.B) {
			tr, d, n := benchFilled(b, DirectAuto, size)
			store := benchStore(b, size)
			ns := testfix.RawNamespace("bench", "m1")
			b.SetBytes(int64(size))
			for i := 0; b.Loop(); i++ {
				key := benchKey(i % n)
				var r hot.Reservation
				alloc := func(m int) ([]byte, bool) {
					var err error
					r, err = store.ReserveBlock(d, key, identity.BlockKey{}, hot.BlockMeta{Demand: true, Tenant: "bench"}, m)
					return r.Buf, err == nil
				}
				if _, ok := tr.Refill(context.Background(), ns, d, key, alloc); !ok {
					b.Fatal("miss")
				}
				publish(b, store, r, d, key)
			}
		})
	}
}

// BenchmarkFlashPublish is BenchmarkFlashRefillPublish without the read:
// reserve the slot, publish and pin it, release, delete. The disk of a
// shared machine changes speed from one second to the next, so the cost
// of publishing is this figure over BenchmarkFlashRead's, not the
// difference of two reads.
func BenchmarkFlashPublish(b *testing.B) {
	for _, size := range []int{1 * mib, 32 * mib} {
		b.Run(fmt.Sprintf("%dMiB", size/mib), func(b *testing.B) {
			store := benchStore(b, size)
			var d identity.NamespaceDigest
			b.SetBytes(int64(size))
			for i := 0; b.Loop(); i++ {
				key := benchKey(i % 4)
				r, err := store.ReserveBlock(d, key, identity.BlockKey{}, hot.BlockMeta{Demand: true, Tenant: "bench"}, size)
				if err != nil {
					b.Fatal(err)
				}
				publish(b, store, r, d, key)
			}
		})
	}
}

// benchStore is a hot store with room for a few blocks of size.
func benchStore(b *testing.B, size int) *hot.Store {
	b.Helper()
	store, err := hot.New(hot.Config{CapacityBytes: int64(4 * size), MinClass: 16 << 10, MaxClass: size, SlabBytes: 2 * size, Prefault: hot.PrefaultPopulate})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { store.Close() })
	return store
}

// publish publishes and pins the reserved block, releases it and deletes
// it, so the next read of its key misses DRAM again.
func publish(b *testing.B, store *hot.Store, r hot.Reservation, d identity.NamespaceDigest, key identity.BlockKey) {
	v, ok := store.CommitAcquire(r)
	if !ok {
		b.Fatal("not published")
	}
	store.Release(v)
	store.Delete(d, key)
}

// BenchmarkFlashWrite offers 1 MiB blocks through Evicted and writes them
// (Flush when the write buffer is full, and at the end, inside the timed
// part: the figure is bytes on flash and synced, not bytes copied).
func BenchmarkFlashWrite(b *testing.B) {
	for _, mode := range []string{DirectAuto, DirectOff} {
		b.Run(mode+"/1MiB", func(b *testing.B) {
			const size = 1 * mib
			tr, d := benchTier(b, mode, size)
			payload := testfix.Payload(size, 2)
			ctx := context.Background()
			b.SetBytes(size)
			b.ResetTimer()
			for i := range b.N {
				for !tr.Evicted(d, benchKey(i), identity.BlockKey{}, 16, payload) {
					if err := tr.Flush(ctx); err != nil {
						b.Fatal(err)
					}
				}
			}
			if err := tr.Flush(ctx); err != nil {
				b.Fatal(err)
			}
		})
	}
}
