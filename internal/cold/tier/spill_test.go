package tier

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gpucache/gpucache/api/identity"
	"github.com/gpucache/gpucache/internal/cold"
	"github.com/gpucache/gpucache/internal/cold/s3store"
	"github.com/gpucache/gpucache/internal/cold/s3store/s3test"
	"github.com/gpucache/gpucache/internal/degrade"
	"github.com/gpucache/gpucache/internal/hot"
	"github.com/gpucache/gpucache/internal/testfix"
)

// spillFixture is a real hot tier holding n remembered blocks of size
// bytes (no eviction), one block the tier never saw, and its Exporter.
type spillFixture struct {
	hs   *hot.Store
	ns   identity.Namespace
	ids  []identity.CacheIdentity // the remembered blocks' identities
	keys []identity.BlockKey
	size int
}

func newSpillFixture(t testing.TB, tr *Tier, n, size int) *spillFixture {
	t.Helper()
	capacity := (int64(n+1)*int64(size)*5/4 + 8<<20) &^ (4<<20 - 1)
	hs, err := hot.New(hot.Config{CapacityBytes: capacity, MinClass: 16 << 10, MaxClass: 1 << 20, SlabBytes: 4 << 20, OnEvict: tr.Evicted})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hs.Close() })
	f := &spillFixture{hs: hs, ns: testfix.TinyNamespace("acme"), size: size}
	d, _ := f.ns.Digest()
	tokens := make([]uint32, (n+1)*16)
	for i := range tokens {
		tokens[i] = uint32(i)
	}
	ids, err := identity.Identities(f.ns, tokens)
	if err != nil {
		t.Fatal(err)
	}
	f.ids = ids[:n]
	for i, id := range ids {
		k, _ := id.Key()
		res, err := hs.ReserveBlock(d, k, id.Parent, hot.BlockMeta{Tokens: id.ValidLength}, size)
		if err != nil {
			t.Fatal(err)
		}
		copy(res.Buf, payloadOf(k, size))
		hs.Commit(res)
		if i < n { // the last block stays unknown to the tier (a cold refill)
			tr.Remember(id)
			f.keys = append(f.keys, k)
		}
	}
	if ev := hs.Stats().Evictions; ev != 0 {
		t.Fatalf("%d evictions: the fixture must hold every block", ev)
	}
	return f
}

func (f *spillFixture) export(from uint32, max int, fn func(ns identity.NamespaceDigest, key, parent identity.BlockKey, tokens uint32, payload []byte) bool) (uint32, bool) {
	return f.hs.Export(from, max, fn)
}

// TestSpillWritesHotBlocksToCold: every remembered block still in DRAM is
// written to the cold tier and refills byte-identical; the block the tier
// never saw is skipped; the hot tier keeps all of them; a second Spill
// writes nothing twice; the pending budget forces flushes mid-walk and
// drops nothing.
func TestSpillWritesHotBlocksToCold(t *testing.T) {
	store := cold.NewMem()
	const n, size = 300, 32 << 10
	// A budget of 40 blocks and packs of 8: the walk must flush mid-chunk.
	tr := newTier(t, store, func(c *Config) { c.PendingBytes = 40 * size })
	f := newSpillFixture(t, tr, n, size)
	ctx := context.Background()

	rep := tr.Spill(ctx, f.export)
	t.Logf("spill %+v", rep)
	if !rep.Complete || rep.Err != nil || rep.Blocks != n || rep.Bytes != n*size || rep.Skipped != 1 || rep.Failed != 0 || rep.Pending != 0 {
		t.Fatalf("spill report %+v", rep)
	}
	if want := (n + 7) / 8; rep.Packs < want {
		t.Fatalf("%d packs for %d blocks in packs of 8", rep.Packs, n)
	}
	st := tr.Stats()
	if st.Spilled != n || st.DroppedFull != 0 || st.PendingBytes != 0 || st.Offered != 0 {
		t.Fatalf("stats %+v", st)
	}
	if got := f.hs.Stats(); got.Evictions != 0 || got.Deletes != 0 || got.Blocks != n+1 {
		t.Fatalf("the spill changed the hot tier: %+v", got)
	}
	d, _ := f.ns.Digest()
	dst := make([]byte, 64<<10)
	for _, k := range f.keys {
		if v, ok := f.hs.Acquire(d, k); !ok {
			t.Fatal("a spilled block left the hot tier")
		} else {
			f.hs.Release(v)
		}
		nb, res, err := tr.Refill(ctx, f.ns, k, dst)
		if !res.Hit || err != nil || !bytes.Equal(dst[:nb], payloadOf(k, size)) {
			t.Fatalf("refill of a spilled block: %v %v", res, err)
		}
	}
	// Spilled blocks are forgotten: spilling again, or evicting them later,
	// writes nothing twice.
	puts := store.Calls()[cold.OpPut]
	if rep := tr.Spill(ctx, f.export); !rep.Complete || rep.Blocks != 0 || rep.Skipped != n+1 {
		t.Fatalf("second spill %+v", rep)
	}
	if got := store.Calls()[cold.OpPut]; got != puts {
		t.Fatalf("second spill wrote %d objects", got-puts)
	}
}

// TestSpillStopsWhenTheStoreFails: with the cold store unavailable, the
// first flush completes nothing and Spill stops at once with
// ErrSpillStalled instead of copying the rest of DRAM into a queue the
// store cannot take; the queued packs stay for a later flush. A cancelled
// ctx stops it before any work.
func TestSpillStopsWhenTheStoreFails(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := &degrade.Registry{}
		const n, size = 300, 32 << 10
		tr := newTier(t, memAsS3{cold.NewMem()}, func(c *Config) {
			c.Faults, c.PendingBytes, c.Sink.PutTimeout = reg, 40*size, time.Second
		})
		f := newSpillFixture(t, tr, n, size)
		disarm := reg.Arm(degrade.S3Unavailable, degrade.Fail)
		rep := tr.Spill(context.Background(), f.export)
		disarm()
		if rep.Complete || !errors.Is(rep.Err, ErrSpillStalled) || !errors.Is(rep.Err, cold.ErrUnavailable) ||
			rep.Blocks == 0 || rep.Blocks >= n || rep.Packs != 0 || rep.Pending == 0 {
			t.Fatalf("spill with the store down: %+v", rep)
		}
		if rep := tr.Flush(context.Background(), true); rep.Err != nil || rep.Remaining != 0 {
			t.Fatalf("flush after the outage: %+v", rep)
		}

		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if rep := tr.Spill(ctx, f.export); !errors.Is(rep.Err, context.Canceled) || rep.Blocks != 0 {
			t.Fatalf("spill with a cancelled ctx: %+v", rep)
		}
	})
}

// dropsFirstPut is a store whose first Put fails as a dropped connection
// would (cold.ErrUnavailable, a transient error).
type dropsFirstPut struct {
	cold.Store
	dropped atomic.Bool
}

func (s *dropsFirstPut) Put(ctx context.Context, key string, body []byte, opts cold.PutOptions) error {
	if s.dropped.CompareAndSwap(false, true) {
		return fmt.Errorf("put %s: connection reset by peer: %w", key, cold.ErrUnavailable)
	}
	return s.Store.Put(ctx, key, body, opts)
}

// TestSpillRidesOutATransientError: the first flush's only pack fails to
// write; the flush is retried at once, and the spill completes with every
// block written.
func TestSpillRidesOutATransientError(t *testing.T) {
	const n, size = 100, 32 << 10
	store := &dropsFirstPut{Store: cold.NewMem()}
	// One pack per flush, so the failed round completes nothing.
	tr := newTier(t, store, func(c *Config) { c.PendingBytes, c.PackBlocks = 40*size, 64 })
	f := newSpillFixture(t, tr, n, size)
	rep := tr.Spill(context.Background(), f.export)
	if !store.dropped.Load() || !rep.Complete || rep.Err != nil || rep.Blocks != n || rep.Failed != 0 || rep.Pending != 0 {
		t.Fatalf("spill after one dropped write: %+v", rep)
	}
	dst := make([]byte, size)
	for _, k := range f.keys {
		if nb, res, err := tr.Refill(context.Background(), f.ns, k, dst); !res.Hit || !bytes.Equal(dst[:nb], payloadOf(k, size)) {
			t.Fatalf("refill: %v %v", res, err)
		}
	}
}

// BenchmarkSpill is the drain spill's rate: 128 cached blocks of 1 MiB
// (128 MiB) spilled with the production pack and pending defaults, to the
// fs cold tier (a temp directory) and to a real S3 server (versitygw on
// loopback). Every iteration writes to an empty store (a new directory or
// key prefix), so every pack is a real write. It bounds how much DRAM a
// drain_timeout lets a node hand over.
func BenchmarkSpill(b *testing.B) {
	const n, size = 128, 1 << 20
	stores := []struct {
		name string
		open func(b *testing.B) func(i int) cold.Store
	}{
		{"fs", func(b *testing.B) func(int) cold.Store {
			return func(int) cold.Store {
				s, err := cold.NewFS(b.TempDir())
				if err != nil {
					b.Fatal(err)
				}
				return s
			}
		}},
		{"s3", func(b *testing.B) func(int) cold.Store {
			endpoint, ak, sk := s3test.Start(b)
			return func(i int) cold.Store {
				cfg := s3store.Default()
				cfg.Endpoint, cfg.Bucket, cfg.Prefix = endpoint, s3test.Bucket, fmt.Sprintf("spill-bench-%d/", i)
				cfg.AccessKey, cfg.SecretKey = ak, sk
				s, err := s3store.New(context.Background(), cfg)
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(s.Close)
				return s
			}
		}},
	}
	for _, st := range stores {
		b.Run(st.name, func(b *testing.B) {
			fresh := st.open(b)
			f := newSpillFixture(b, newTier(b, cold.NewMem(), nil), n, size)
			b.SetBytes(n * size)
			i := 0
			for b.Loop() {
				b.StopTimer()
				i++
				tr := newTier(b, fresh(i), func(c *Config) { c.PackBlocks = 0 })
				for _, id := range f.ids {
					tr.Remember(id)
				}
				b.StartTimer()
				if rep := tr.Spill(context.Background(), f.export); !rep.Complete || rep.Blocks != n || rep.Packs != 2 || rep.Failed != 0 {
					b.Fatalf("spill %+v", rep)
				}
			}
		})
	}
}

// TestSpillLeavesPacksForTheFinalFlush: a store whose writes hang (the
// s3_slow failpoint, until the caller's deadline) holds the spill to its
// deadline: every block is copied into a pack (Walked) but none is
// written, and Stats counts those blocks as queued; a later Flush writes
// them and counts them written. A Flush whose ctx has ended builds no
// pack, and a Run stopped by Close does not flush on its way out.
func TestSpillLeavesPacksForTheFinalFlush(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := &degrade.Registry{}
		const n, size = 20, 32 << 10
		tr := newTier(t, memAsS3{cold.NewMem()}, func(c *Config) {
			c.Faults, c.Sink.PutTimeout = reg, time.Minute
		})
		f := newSpillFixture(t, tr, n, size)
		disarm := reg.Arm(degrade.S3Slow, degrade.Hang)
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		rep := tr.Spill(ctx, f.export)
		cancel()
		disarm()
		if !rep.Walked || rep.Complete || rep.Blocks != n || rep.Packs != 0 || rep.Pending != 3 || !errors.Is(rep.Err, context.DeadlineExceeded) {
			t.Fatalf("spill against a hanging store: %+v", rep)
		}
		if st := tr.Stats(); st.SinkBlocks != n || st.SinkPending != 3 || st.BlocksWritten != 0 || st.BatchedBlocks != 0 {
			t.Fatalf("after the spill: %d blocks queued in %d packs, %d written, %d batched", st.SinkBlocks, st.SinkPending, st.BlocksWritten, st.BatchedBlocks)
		}
		if r := tr.Flush(context.Background(), true); r.Completed != 3 || r.Remaining != 0 {
			t.Fatalf("final flush: %+v", r)
		}
		if st := tr.Stats(); st.SinkBlocks != 0 || st.BlocksWritten != n {
			t.Fatalf("after the final flush: %d blocks queued, %d written", st.SinkBlocks, st.BlocksWritten)
		}

		// Evicted blocks wait in a batch: a Flush past its deadline leaves
		// them there, and so does a Run stopped by Close.
		d := mustDigest(t, f.ns)
		for i, k := range f.keys[:4] {
			tr.Remember(f.ids[i])
			tr.Evicted(d, k, f.ids[i].Parent, 0, payloadOf(k, size))
		}
		ended, cancel := context.WithCancel(context.Background())
		cancel()
		tr.Flush(ended, true)
		if st := tr.Stats(); st.BatchedBlocks != 4 || st.PacksBuilt != 3 {
			t.Fatalf("a flush past its deadline: %d blocks batched, %d packs built", st.BatchedBlocks, st.PacksBuilt)
		}
		runCtx, stop := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); tr.Run(runCtx, time.Hour) }()
		tr.Close()
		stop()
		<-done
		if st := tr.Stats(); st.BatchedBlocks != 4 || st.PacksBuilt != 3 {
			t.Fatalf("Run stopped by Close flushed: %d blocks batched, %d packs built", st.BatchedBlocks, st.PacksBuilt)
		}
	})
}

func mustDigest(t *testing.T, ns identity.Namespace) identity.NamespaceDigest {
	t.Helper()
	d, err := ns.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d
}
