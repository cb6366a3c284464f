package reqbuf

import (
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gpucache/gpucache/api/wire"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestFairShare: the fair share divides what the pre-session
// bucket leaves, is never below the largest request, and never above the
// budget.
func TestFairShare(t *testing.T) {
	lim := wire.Limits{MaxBatch: wire.DefaultMaxBatch}
	pre, need := PreSessionBuffers(lim), MaxRequestCost(lim)
	for _, tc := range []struct {
		total  int64
		shares int
		want   int64
	}{
		{128 << 20, 2, (128<<20 - pre) / 2},
		{128 << 20, 4, (128<<20 - pre) / 4},
		{128 << 20, 100, need},
		{need, 1, need},
		{need, 2, need},
	} {
		if got := FairShare(tc.total, lim, tc.shares); got != tc.want {
			t.Errorf("total %d, %d shares: %d, want %d", tc.total, tc.shares, got, tc.want)
		}
	}
}

// TestWaitersDueTogetherAreAllRefused: when several waiters' waits end at
// the same instant and the first one refused gives its bytes back, the
// others are refused too rather than taking those bytes (which, when a
// select's coin chose the freed case, left a tenant's own refused tables
// holding its share and starved its next request). Each round, eight
// connections of one tenant each hold part of its share and wait, at the
// same instant, for more; each refused one gives back what it held, as a
// refused table does.
func TestWaitersDueTogetherAreAllRefused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const wait, waiters, each = time.Second, 8, 1 << 10
		for round := range 100 {
			b := New(1<<20, 1<<10, waiters*each)
			var refused sync.WaitGroup
			var took atomic.Int32
			for range waiters {
				if ok, _ := b.Acquire("acme", each, wait, nil); !ok {
					t.Fatal("a charge within the share did not fit")
				}
			}
			for range waiters {
				refused.Go(func() {
					if ok, _ := b.Acquire("acme", each, wait, nil); ok {
						took.Add(1)
						return
					}
					b.Release("acme", each)
				})
			}
			refused.Wait()
			if n := took.Load(); n != 0 {
				t.Fatalf("round %d: %d waiters whose wait was over took bytes given back at that instant", round, n)
			}
			if h := b.HeldBy("acme"); h != 0 {
				t.Fatalf("round %d: acme holds %d bytes after every waiter was refused", round, h)
			}
		}
	})
}

// TestBudgetSharesAndTotal: a charge must fit its owner's share (the
// tenant share, or the pre-session bucket) and the total; one larger than
// either is refused at once, without waiting; what is given back can be
// taken again.
func TestBudgetSharesAndTotal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const wait = time.Second
		b := New(100, 10, 60)
		for _, tc := range []struct {
			owner         string
			n             int64
			ok, atShare   bool
			waited, fails uint64
		}{
			{PreSession, 11, false, true, 0, 1}, // above the bucket: at once
			{"acme", 61, false, true, 0, 1},     // above the share: at once
			{"acme", 60, true, false, 0, 0},
			{"beta", 50, false, false, 1, 1}, // 40 left of the total: waits, refused
			{PreSession, 10, true, false, 0, 0},
			{"acme", 1, false, true, 1, 1}, // acme at its share: waits, refused
		} {
			before := b.Stats()
			start := time.Now()
			ok, atShare := b.Acquire(tc.owner, tc.n, wait, nil)
			if !ok {
				b.Refused(atShare)
			}
			after := b.Stats()
			if ok != tc.ok || atShare != tc.atShare {
				t.Fatalf("%q takes %d: ok %v at share %v, want %v %v", tc.owner, tc.n, ok, atShare, tc.ok, tc.atShare)
			}
			if w := after.Waits - before.Waits; w != tc.waited || time.Since(start) != time.Duration(w)*wait {
				t.Fatalf("%q takes %d: %d waits in %v, want %d", tc.owner, tc.n, w, time.Since(start), tc.waited)
			}
			if r := after.Refused - before.Refused; r != tc.fails {
				t.Fatalf("%q takes %d: %d refusals, want %d", tc.owner, tc.n, r, tc.fails)
			}
		}
		if s := b.Stats(); s.InUse != 70 || s.PreSessionHeld != 10 || s.ShareRefused != 3 || s.Refused != 4 {
			t.Fatalf("stats %+v", s)
		}
		b.Release("acme", 60)
		b.Release(PreSession, 10)
		if b.InUse() != 0 || b.HeldBy("acme") != 0 || b.HeldBy(PreSession) != 0 {
			t.Fatalf("%d bytes in use after every charge was given back", b.InUse())
		}
		if ok, _ := b.Acquire("beta", 60, wait, nil); !ok {
			t.Fatal("a charge within the share and the total did not fit an empty budget")
		}
	})
}

// TestWaiterWokenByReleaseAndShare: a waiter takes its bytes as soon as
// they are given back, or as soon as a larger share lets it through, and
// gives up when done closes.
func TestWaiterWokenByReleaseAndShare(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const wait = time.Minute
		b := New(100, 10, 50)
		if ok, _ := b.Acquire("acme", 50, wait, nil); !ok {
			t.Fatal("a charge within the share did not fit")
		}
		var got sync.WaitGroup
		took := make(chan bool, 1)
		got.Go(func() {
			ok, _ := b.Acquire("acme", 20, wait, nil)
			took <- ok
		})
		synctest.Wait()
		b.Release("acme", 30)
		got.Wait()
		if !<-took {
			t.Fatal("a waiter did not take the bytes given back")
		}

		got.Go(func() {
			ok, _ := b.Acquire("acme", 20, wait, nil) // acme holds 40 of 50
			took <- ok
		})
		synctest.Wait()
		b.SetShare(60)
		got.Wait()
		if !<-took || b.HeldBy("acme") != 60 || b.Share() != 60 {
			t.Fatalf("a larger share did not let the waiter through: acme holds %d of %d", b.HeldBy("acme"), b.Share())
		}

		done := make(chan struct{})
		got.Go(func() {
			ok, _ := b.Acquire("acme", 1, wait, done)
			took <- ok
		})
		synctest.Wait()
		close(done)
		got.Wait()
		if <-took {
			t.Fatal("a waiter took bytes after done closed")
		}
	})
}

// TestCosts: what a buffer costs (nothing up to Keep), and the bounds of
// the budget under the default limits.
func TestCosts(t *testing.T) {
	if BufCost(Keep) != 0 || BufCost(Keep+1) != Keep+1 {
		t.Errorf("BufCost: %d at Keep, %d above", BufCost(Keep), BufCost(Keep+1))
	}
	if TableDecodeCost(1000) != 1500 {
		t.Errorf("TableDecodeCost(1000) = %d", TableDecodeCost(1000))
	}
	lim := wire.Limits{MaxBatch: wire.DefaultMaxBatch}
	if got, want := MaxRequestCost(wire.Limits{}), MaxRequestCost(lim); got != want {
		t.Errorf("MaxRequestCost with no MaxBatch %d, with the default %d", got, want)
	}
	if t0 := int64(FillTableMax(lim)); MaxRequestCost(lim) != t0+TableDecodeCost(uint32(t0)) {
		t.Errorf("MaxRequestCost %d for a table of %d", MaxRequestCost(lim), t0)
	}
	if got := PreSessionBuffers(lim); got != PreSessionBodies*int64(ControlBodyMax(lim)) || int64(ControlBodyMax(lim)) <= Keep {
		t.Errorf("pre-session bucket %d for bodies of %d", got, ControlBodyMax(lim))
	}
	need := MaxRequestCost(lim)
	if CheckShare(need, need, lim) != nil || CheckShare(need-1, 2*need, lim) == nil || CheckShare(need+1, need, lim) == nil {
		t.Error("CheckShare accepts a share outside [MaxRequestCost, total] or refuses one inside")
	}
}
