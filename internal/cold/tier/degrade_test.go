package tier

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gpucache/gpucache/api/identity"
	"github.com/gpucache/gpucache/internal/cold"
	"github.com/gpucache/gpucache/internal/cold/refill"
	"github.com/gpucache/gpucache/internal/cold/s3store/s3test"
	"github.com/gpucache/gpucache/internal/degrade"
	"github.com/gpucache/gpucache/internal/testfix"
)

// memAsS3 is a Mem store that names S3's faults, so the S3 failpoints run
// under synctest's fake clock, which makes the bound on the time to a miss
// exact (a real server's network I/O cannot run in a bubble).
// TestDegradeS3RealServer checks the same on versitygw.
type memAsS3 struct{ *cold.Mem }

func (memAsS3) DegradeFaults() []degrade.Fault {
	return []degrade.Fault{degrade.S3Unavailable, degrade.S3Slow}
}

const testRefillBudget = 300 * time.Millisecond

// storeKeys lists every object key of s.
func storeKeys(t *testing.T, s cold.Store) []string {
	t.Helper()
	var keys []string
	if err := s.List(context.Background(), "", func(o cold.ObjectInfo) error {
		keys = append(keys, o.Key)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return keys
}

// checkDegradedRefill writes two blocks behind, refills the first (so its
// pointer and manifest are cached), arms fault in mode, and checks that a
// refill of either block is a clean miss: n is 0, Missing(Unavailable), an
// error wrapping degrade.ErrMiss that names the fault, no payload byte in
// dst, nothing written to the store, and an answer within the refill
// budget: exactly (0 for Fail, the budget for Hang) when exact, which
// synctest allows, else within budget+50ms of wall time. Disarmed, both
// blocks refill again: no failure was cached.
func checkDegradedRefill(t *testing.T, store cold.Store, fault degrade.Fault, mode degrade.Mode, exact bool) {
	reg := &degrade.Registry{}
	tr := newTier(t, store, func(c *Config) { c.Faults, c.RefillBudget = reg, testRefillBudget })
	ctx := context.Background()
	ns := testfix.TinyNamespace("acme")
	ids := writeBehind(t, tr, ns, 2, 1)
	keys := make([]identity.BlockKey, len(ids))
	for i, id := range ids {
		keys[i], _ = id.Key()
	}
	dst := make([]byte, 4096)
	if n, res, err := tr.Refill(ctx, ns, keys[0], dst); !res.Hit || err != nil || !bytes.Equal(dst[:n], payloadOf(keys[0], 1024)) {
		t.Fatalf("warm refill: %v %v", res, err)
	}
	before := storeKeys(t, store)

	disarm := reg.Arm(fault, mode)
	for i, k := range keys { // keys[0] cached (payload read only), keys[1] cold (pointer read)
		clear(dst)
		start := time.Now()
		n, res, err := tr.Refill(ctx, ns, k, dst)
		el := time.Since(start)
		var m *degrade.Miss
		if n != 0 || res != refill.Missing(refill.Unavailable) || !errors.Is(err, degrade.ErrMiss) || !errors.As(err, &m) || m.Fault != fault {
			t.Fatalf("block %d under %s: n=%d %v %v", i, fault, n, res, err)
		}
		if slices.ContainsFunc(dst, func(b byte) bool { return b != 0 }) {
			t.Fatalf("block %d under %s: payload bytes in dst after a miss", i, fault)
		}
		want := time.Duration(0)
		if mode == degrade.Hang {
			want = testRefillBudget
		}
		if exact && el != want {
			t.Fatalf("block %d under %s: miss after %v, want exactly %v", i, fault, el, want)
		}
		if !exact && el > testRefillBudget+50*time.Millisecond {
			t.Fatalf("block %d under %s: miss after %v, budget %v", i, fault, el, testRefillBudget)
		}
	}
	disarm()
	if h := reg.Hits(fault); h < len(keys) {
		t.Fatalf("%s fired %d times for %d refills", fault, h, len(keys))
	}
	if after := storeKeys(t, store); !slices.Equal(before, after) {
		t.Fatalf("store changed during the fault: %d keys, then %d", len(before), len(after))
	}
	if st := tr.Stats(); st.RefillMisses != uint64(len(keys)) || st.RefillHits != 1 {
		t.Fatalf("stats %+v", st)
	}
	for i, k := range keys {
		if n, res, err := tr.Refill(ctx, ns, k, dst); !res.Hit || err != nil || !bytes.Equal(dst[:n], payloadOf(k, 1024)) {
			t.Fatalf("block %d after disarm: %v %v", i, res, err)
		}
	}
}

func TestDegradeS3Slow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		checkDegradedRefill(t, memAsS3{cold.NewMem()}, degrade.S3Slow, degrade.Hang, true)
	})
}

func TestDegradeS3Unavailable(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		checkDegradedRefill(t, memAsS3{cold.NewMem()}, degrade.S3Unavailable, degrade.Fail, true)
	})
}

func TestDegradeStorageLoss(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fs, err := cold.NewFS(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		checkDegradedRefill(t, fs, degrade.StorageLoss, degrade.Fail, true)
	})
}

func TestDegradeNVMeTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fs, err := cold.NewFS(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		checkDegradedRefill(t, fs, degrade.NVMeTimeout, degrade.Hang, true)
	})
}

// TestDegradeS3RealServer runs both S3 faults against a real S3 server
// (versitygw, skipped when it is not installed): the failpoints are the
// s3store backend's own (cold.DegradeFaults), and the bound is wall time.
func TestDegradeS3RealServer(t *testing.T) {
	store := s3test.NewStore(t, "degrade/")
	for _, tc := range []struct {
		fault degrade.Fault
		mode  degrade.Mode
	}{{degrade.S3Unavailable, degrade.Fail}, {degrade.S3Slow, degrade.Hang}} {
		t.Run(string(tc.fault), func(t *testing.T) {
			checkDegradedRefill(t, store, tc.fault, tc.mode, false)
		})
	}
}

// TestDegradeS3UnavailableWriteBehind: an S3 outage during a flush leaves
// the pack queued, with nothing written and no job failed for good, and
// the next flush after the outage publishes it; eviction never waits for
// the store. An unavailable store fails each PUT at once, a slow one at
// the sink's PutTimeout.
func TestDegradeS3UnavailableWriteBehind(t *testing.T) {
	for _, tc := range []struct {
		fault degrade.Fault
		mode  degrade.Mode
		after time.Duration
	}{{degrade.S3Unavailable, degrade.Fail, 0}, {degrade.S3Slow, degrade.Hang, time.Second}} {
		t.Run(string(tc.fault), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				reg := &degrade.Registry{}
				mem := cold.NewMem()
				tr := newTier(t, memAsS3{mem}, func(c *Config) {
					c.Faults, c.RefillBudget, c.Sink.PutTimeout = reg, testRefillBudget, time.Second
				})
				ctx := context.Background()
				ns := testfix.TinyNamespace("acme")
				d, _ := ns.Digest()
				ids, _ := identity.Identities(ns, make([]uint32, 4*16))
				disarm := reg.Arm(tc.fault, tc.mode)
				for _, id := range ids {
					k, _ := id.Key()
					tr.Remember(id)
					tr.Evicted(d, k, id.Parent, id.ValidLength, payloadOf(k, 1024))
				}
				start := time.Now()
				rep := tr.Flush(ctx, true)
				if el := time.Since(start); el != tc.after {
					t.Fatalf("flush under %s took %v, want %v", tc.fault, el, tc.after)
				}
				if rep.Attempted != 1 || rep.Retried != 1 || rep.Completed != 0 || rep.Failed != 0 || rep.Remaining != 1 ||
					!errors.Is(rep.Err, cold.ErrUnavailable) || !errors.Is(rep.Err, degrade.ErrMiss) {
					t.Fatalf("flush under %s: %+v", tc.fault, rep)
				}
				if keys := mem.Keys(); len(keys) != 0 || mem.Calls()[cold.OpPut] != 0 {
					t.Fatalf("the outage let %d objects (%d puts) through", len(keys), mem.Calls()[cold.OpPut])
				}
				if st := tr.Stats(); st.SinkFailed != 0 || st.PacksQueued != 1 {
					t.Fatalf("stats under %s: %+v", tc.fault, st)
				}
				disarm()
				if reg.Hits(tc.fault) != 1 {
					t.Fatalf("hits %d", reg.Hits(tc.fault))
				}
				if rep := tr.Flush(ctx, false); rep.Completed != 1 || rep.Remaining != 0 || rep.Err != nil {
					t.Fatalf("flush after the outage: %+v", rep)
				}
				dst := make([]byte, 1024)
				for _, id := range ids {
					k, _ := id.Key()
					if n, res, err := tr.Refill(ctx, ns, k, dst); !res.Hit || !bytes.Equal(dst[:n], payloadOf(k, 1024)) {
						t.Fatalf("refill after the outage: %v %v", res, err)
					}
				}
			})
		})
	}
}

// TestRefillBudgetDefaults: the budget defaults to Refill.Timeout, else 2s,
// and is the refiller's Timeout.
func TestRefillBudgetDefaults(t *testing.T) {
	for _, tc := range []struct {
		budget, timeout, want time.Duration
	}{{0, 0, 2 * time.Second}, {0, time.Second, time.Second}, {500 * time.Millisecond, time.Second, 500 * time.Millisecond}} {
		tr := newTier(t, cold.NewMem(), func(c *Config) { c.RefillBudget, c.Refill.Timeout = tc.budget, tc.timeout })
		if tr.cfg.RefillBudget != tc.want || tr.rf.Config().Timeout != tc.want {
			t.Fatalf("%+v: budget %v, refill timeout %v", tc, tr.cfg.RefillBudget, tr.rf.Config().Timeout)
		}
	}
	if _, err := New(Config{Store: cold.NewMem(), RefillBudget: -1}); err == nil {
		t.Fatal("a negative budget was accepted")
	}
}
