package tier

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gpucache/gpucache/api/identity"
	"github.com/gpucache/gpucache/internal/cold"
	"github.com/gpucache/gpucache/internal/cold/coldtest"
	"github.com/gpucache/gpucache/internal/cold/pack"
	"github.com/gpucache/gpucache/internal/cold/s3store"
	"github.com/gpucache/gpucache/internal/cold/s3store/s3test"
	"github.com/gpucache/gpucache/internal/degrade"
	"github.com/gpucache/gpucache/internal/security/seal"
	"github.com/gpucache/gpucache/internal/testfix"
)

func countContaining(lines []string, sub string) int {
	n := 0
	for _, l := range lines {
		if strings.Contains(l, sub) {
			n++
		}
	}
	return n
}

// TestOutageThenRecoveryWritesBehind: an S3 outage of many flush
// intervals (far more than the sink's three attempts) while blocks keep
// being evicted, then recovery. Run's own flush loop, on synctest's clock,
// writes every block the tier took during the outage once the store
// answers again; what the write-behind holds (blocks copied, packs queued)
// never exceeds PendingBytes, blocks beyond it are dropped and counted,
// nothing is given up, and the logs carry one line per state change: the
// store down and back, the budget full and free again.
func TestOutageThenRecoveryWritesBehind(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := &degrade.Registry{}
		mem := cold.NewMem()
		logs := &coldtest.LogRecorder{}
		const payload = 1024
		const limit = 48 << 10
		tr := newTier(t, memAsS3{mem}, func(c *Config) {
			c.Faults, c.RefillBudget, c.Sink.PutTimeout = reg, testRefillBudget, time.Second
			c.PendingBytes = limit
			c.Logger = slog.New(logs)
		})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); tr.Run(ctx, time.Second) }()

		// held checks the bound: the tier's own sum of what it holds, and
		// the budget's count, are both within PendingBytes.
		held := func(when string) {
			t.Helper()
			st := tr.Stats()
			if st.HeldBytes > limit || st.PendingBytes+st.SinkBytes > st.HeldBytes || st.LimitBytes != limit {
				t.Fatalf("%s: held %d (batches %d + packs %d), limit %d", when, st.HeldBytes, st.PendingBytes, st.SinkBytes, limit)
			}
		}
		ns := testfix.TinyNamespace("acme")
		d, _ := ns.Digest()
		toks := make([]uint32, 120*16)
		for i := range toks {
			toks[i] = uint32(i)
		}
		ids, _ := identity.Identities(ns, toks)
		var taken []identity.BlockKey // blocks the tier accepted for write-behind
		evict := func(id identity.CacheIdentity) {
			k, _ := id.Key()
			tr.Remember(id)
			before := tr.Stats().Offered
			tr.Evicted(d, k, id.Parent, id.ValidLength, payloadOf(k, payload))
			if tr.Stats().Offered > before {
				taken = append(taken, k)
			}
			held("evict")
		}

		disarm := reg.Arm(degrade.S3Unavailable, degrade.Fail)
		// 12 s of outage: 12 flushes, 8 evictions a second.
		for i := range 96 {
			evict(ids[i])
			if i%8 == 7 {
				time.Sleep(time.Second)
				synctest.Wait()
				held("flush during the outage")
			}
		}
		if mem.Calls()[cold.OpPut] != 0 || len(mem.Keys()) != 0 {
			t.Fatal("the outage let writes through")
		}
		st := tr.Stats()
		if len(taken) == 0 || st.DroppedFull == 0 || !st.WriteDegraded || st.SinkFailed != 0 || st.PacksGivenUp != 0 {
			t.Fatalf("during the outage: %d taken, stats %+v", len(taken), st)
		}
		disarm()
		// Back up: a later flush writes everything that was taken. The
		// probe backoff is at most 30s.
		for range 40 {
			time.Sleep(time.Second)
			synctest.Wait()
			held("flush after the outage")
		}
		// Blocks evicted after the recovery are written as before.
		for i, id := range ids[96:] {
			evict(id)
			if i%8 == 7 {
				time.Sleep(time.Second)
				synctest.Wait()
			}
		}
		dst := make([]byte, payload)
		for i, k := range taken {
			n, res, err := tr.Refill(context.Background(), ns, k, dst)
			if !res.Hit || !bytes.Equal(dst[:n], payloadOf(k, payload)) {
				t.Fatalf("block %d of %d taken during the outage or after: not written behind (%v %v); stats %+v",
					i, len(taken), res, err, tr.Stats())
			}
		}
		st = tr.Stats()
		if st.WriteDegraded || st.WriteOutages != 1 || st.PacksGivenUp != 0 || st.HeldBytes != 0 || st.SinkPending != 0 ||
			st.Offered != uint64(len(taken)) || st.Offered+st.DroppedFull != uint64(len(ids)) {
			t.Fatalf("after the recovery: %d taken, stats %+v", len(taken), st)
		}
		cancel()
		<-done

		lines := logs.Lines(slog.LevelInfo)
		for _, want := range []string{"writes failing", "writes recovered", "budget full", "room again"} {
			if n := countContaining(lines, want); n != 1 {
				t.Fatalf("%d log lines with %q, want 1; lines: %q", n, want, lines)
			}
		}
		if len(lines) != 4 {
			t.Fatalf("%d log lines at Info or above, want the 4 state changes: %q", len(lines), lines)
		}
	})
}

// permanentStore refuses every Put with an error the sink does not retry.
type permanentStore struct{ *cold.Mem }

var errQuota = errors.New("quota exceeded (test)")

func (p permanentStore) Put(context.Context, string, []byte, cold.PutOptions) error { return errQuota }

// TestGivenUpPacksReleaseTheirBytes: a pack the store refuses for good is
// given up at the flush that failed it: its bytes go back to the budget,
// and the loss is counted and logged once for the flush.
func TestGivenUpPacksReleaseTheirBytes(t *testing.T) {
	logs := &coldtest.LogRecorder{}
	tr := newTier(t, permanentStore{cold.NewMem()}, func(c *Config) { c.Logger = slog.New(logs); c.PackBlocks = 4 })
	ns := testfix.TinyNamespace("acme")
	d, _ := ns.Digest()
	ids, _ := identity.Identities(ns, make([]uint32, 12*16))
	for _, id := range ids {
		k, _ := id.Key()
		tr.Remember(id)
		tr.Evicted(d, k, id.Parent, id.ValidLength, payloadOf(k, 1024))
	}
	if st := tr.Stats(); st.HeldBytes == 0 || st.HeldBytes != st.PendingBytes {
		t.Fatalf("before the flush: %+v", st)
	}
	rep := tr.Flush(context.Background(), true)
	if rep.Failed != 3 || !errors.Is(rep.Err, errQuota) {
		t.Fatalf("flush: %+v", rep)
	}
	st := tr.Stats()
	if st.PacksGivenUp != 3 || st.BlocksGivenUp != 12 || st.BytesGivenUp == 0 || st.HeldBytes != 0 || st.SinkPending != 0 || st.SinkFailed != 3 {
		t.Fatalf("after the flush: %+v", st)
	}
	lines := logs.Lines(slog.LevelWarn)
	if n := countContaining(lines, "gave up packs"); n != 1 {
		t.Fatalf("%d 'gave up' lines, want 1 for the flush: %q", n, lines)
	}
}

// TestBlockCostCoversPackMetadata: what a block takes from the budget
// (blockCost) covers its payload and its share of the pack Build makes, so
// a pack never needs more than its blocks reserved: from one block to
// PackBlocks, sealed and not, with short and long token lists and
// namespaces.
func TestBlockCostCoversPackMetadata(t *testing.T) {
	kr := seal.New(nil)
	if err := kr.Add(seal.KeyID(strings.Repeat("k", seal.MaxKeyIDLen)), bytes.Repeat([]byte{1}, 32), time.Time{}); err != nil {
		t.Fatal(err)
	}
	long := testfix.TinyNamespace("acme")
	long.ModelID = strings.Repeat("m", 256)
	long.Adapter = strings.Repeat("a", 256)
	for _, ns := range []identity.Namespace{testfix.TinyNamespace("a"), long} {
		for _, blockTokens := range []uint32{1, 16, 256} {
			ns.Layout.BlockTokens = blockTokens
			for _, n := range []int{1, 2, 64} {
				for _, sealer := range []pack.Sealer{nil, kr} {
					name := fmt.Sprintf("ns%d/tokens%d/blocks%d/sealed%v", len(ns.ModelID), blockTokens, n, sealer != nil)
					t.Run(name, func(t *testing.T) {
						tr := newTier(t, cold.NewMem(), func(c *Config) { c.PackBlocks = 64 })
						ids, err := identity.Identities(ns, make([]uint32, n*int(blockTokens)))
						if err != nil {
							t.Fatal(err)
						}
						blocks := make([]pack.Block, n)
						var cost int64
						for i, id := range ids {
							k, _ := id.Key()
							blocks[i] = pack.Block{Identity: id, Payload: payloadOf(k, 100)}
							tr.Remember(id)
							tr.mu.Lock()
							cost += tr.costLocked(tr.mu.tails[k], 100)
							tr.mu.Unlock()
						}
						p, err := pack.BuildWith(ns, blocks, pack.Options{Sealer: sealer})
						if err != nil {
							t.Fatal(err)
						}
						if int64(p.Size()) > cost {
							t.Fatalf("pack of %d bytes, its blocks reserved %d", p.Size(), cost)
						}
					})
				}
			}
		}
	}
}

// TestOutageRealS3: the same against a real S3 server (versitygw) that is
// stopped for more than three flushes and started again on the same port
// and data: nothing is given up, and every block evicted during the outage
// is written by the first flush after it and refills byte-identical.
func TestOutageRealS3(t *testing.T) {
	srv := s3test.NewServer(t)
	srv.Start(t)
	cfg := s3store.Default()
	cfg.Endpoint, cfg.Bucket, cfg.Prefix = srv.Endpoint, s3test.Bucket, "outage/"
	cfg.AccessKey, cfg.SecretKey = srv.AccessKey, srv.SecretKey
	cfg.Timeout, cfg.MaxAttempts = 5*time.Second, 1
	store, err := s3store.New(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	logs := &coldtest.LogRecorder{}
	tr := newTier(t, store, func(c *Config) { c.PendingBytes = 1 << 20; c.Logger = slog.New(logs) })
	ctx := context.Background()
	ns := testfix.TinyNamespace("acme")
	d, _ := ns.Digest()
	toks := make([]uint32, 40*16)
	for i := range toks {
		toks[i] = uint32(i)
	}
	ids, _ := identity.Identities(ns, toks)
	evict := func(ids []identity.CacheIdentity) {
		for _, id := range ids {
			k, _ := id.Key()
			tr.Remember(id)
			tr.Evicted(d, k, id.Parent, id.ValidLength, payloadOf(k, 4096))
		}
	}
	evict(ids[:8])
	if rep := tr.Flush(ctx, true); rep.Completed != 1 || rep.Err != nil {
		t.Fatalf("flush before the outage: %+v", rep)
	}

	srv.Stop(t)
	for i := range 4 { // 4 flushes of 8 blocks each: more than MaxWriteAttempts
		evict(ids[8+8*i : 16+8*i])
		if rep := tr.Flush(ctx, true); rep.Completed != 0 || rep.Failed != 0 || !rep.Outage {
			t.Fatalf("flush %d during the outage: %+v", i, rep)
		}
	}
	if st := tr.Stats(); st.SinkPending != 4 || st.SinkFailed != 0 || st.PacksGivenUp != 0 || !st.WriteDegraded || st.HeldBytes > 1<<20 {
		t.Fatalf("stats during the outage: %+v", st)
	}

	srv.Start(t)
	if rep := tr.Flush(ctx, true); rep.Completed != 4 || rep.Err != nil || rep.Remaining != 0 {
		t.Fatalf("flush after the outage: %+v", rep)
	}
	dst := make([]byte, 4096)
	for i, id := range ids {
		k, _ := id.Key()
		if n, res, err := tr.Refill(ctx, ns, k, dst); !res.Hit || !bytes.Equal(dst[:n], payloadOf(k, 4096)) {
			t.Fatalf("block %d after the outage: %v %v", i, res, err)
		}
	}
	if st := tr.Stats(); st.WriteDegraded || st.HeldBytes != 0 || st.WriteOutages != 1 {
		t.Fatalf("stats after the outage: %+v", st)
	}
	lines := logs.Lines(slog.LevelInfo)
	if countContaining(lines, "writes failing") != 1 || countContaining(lines, "writes recovered") != 1 {
		t.Fatalf("log lines %q, want one 'writes failing' and one 'writes recovered'", lines)
	}
}
