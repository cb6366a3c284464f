package ratelimit

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gpucache/gpucache/internal/testfix"
)

func mustNew(t testing.TB, cfg Config) *Limiter {
	t.Helper()
	l, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestBurstThenRefill(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := mustNew(t, Config{Tenants: map[string]Limit{"a": {OpsPerSec: 10, OpsBurst: 5}}})
		for i := range 5 {
			if ok, _ := l.Allow("a", 1, 0); !ok {
				t.Fatalf("op %d within burst refused", i)
			}
		}
		ok, d := l.Allow("a", 1, 0)
		if ok || d != 100*time.Millisecond {
			t.Fatalf("6th op: ok=%v retry=%v, want refused 100ms", ok, d)
		}
		time.Sleep(300 * time.Millisecond) // 3 tokens
		for i := range 3 {
			if ok, _ := l.Allow("a", 1, 0); !ok {
				t.Fatalf("refilled op %d refused", i)
			}
		}
		if ok, _ := l.Allow("a", 1, 0); ok {
			t.Fatal("op beyond refill admitted")
		}
		time.Sleep(time.Hour) // refill caps at burst
		for i := range 5 {
			if ok, _ := l.Allow("a", 1, 0); !ok {
				t.Fatalf("op %d after long idle refused", i)
			}
		}
		if ok, _ := l.Allow("a", 1, 0); ok {
			t.Fatal("refill exceeded burst")
		}
	})
}

func TestBytesLimitIndependentOfOps(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := mustNew(t, Config{Tenants: map[string]Limit{
			"a": {OpsPerSec: 1000, OpsBurst: 1000, BytesPerSec: 1000, BytesBurst: 1000},
		}})
		if ok, _ := l.Allow("a", 1, 1000); !ok {
			t.Fatal("first 1000 bytes refused")
		}
		ok, d := l.Allow("a", 1, 500)
		if ok || d != 500*time.Millisecond {
			t.Fatalf("bytes over: ok=%v d=%v, want 500ms", ok, d)
		}
		// Ops still available: zero-byte ops pass even with the byte bucket empty.
		for i := range 100 {
			if ok, _ := l.Allow("a", 1, 0); !ok {
				t.Fatalf("zero-byte op %d refused", i)
			}
		}
		// Refused requests consume nothing: ops bucket has 1000-1-100 left.
		if ok, _ := l.Allow("a", 899, 0); !ok {
			t.Fatal("refused request consumed ops tokens")
		}
		if ok, _ := l.Allow("a", 1, 0); ok {
			t.Fatal("ops bucket should now be empty")
		}
		// And an ops-only limit does not restrict bytes.
		l2 := mustNew(t, Config{Default: Limit{OpsPerSec: 1, OpsBurst: 10}})
		if ok, _ := l2.Allow("x", 1, 1<<40); !ok {
			t.Fatal("unlimited bytes dimension refused")
		}
	})
}

func TestRetryAfterIsExact(t *testing.T) {
	limits := []Limit{
		{OpsPerSec: 10, OpsBurst: 5},
		{OpsPerSec: 3, OpsBurst: 2},   // 1/3 s is not a whole number of ns
		{OpsPerSec: 7.3, OpsBurst: 1}, // fractional rate
		{BytesPerSec: 1 << 20, BytesBurst: 4096},
		{OpsPerSec: 100, OpsBurst: 10, BytesPerSec: 999, BytesBurst: 3000},
	}
	for i, lim := range limits {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				l := mustNew(t, Config{Default: lim})
				checked := 0
				for step := range 50 {
					bytes := int64(step*37%900 + 1)
					ok, d := l.Allow("t", 1, bytes)
					if ok {
						continue
					}
					checked++
					if d <= 0 {
						t.Fatalf("refused with retryAfter %v", d)
					}
					if d > 1 {
						// One nanosecond early must still be refused (minimal).
						time.Sleep(d - 1)
						if ok, d2 := l.Allow("t", 1, bytes); ok || d2 != 1 {
							t.Fatalf("step %d: 1ns before retryAfter: ok=%v d=%v", step, ok, d2)
						}
						time.Sleep(time.Nanosecond)
					} else {
						time.Sleep(d)
					}
					if ok, d2 := l.Allow("t", 1, bytes); !ok {
						t.Fatalf("step %d: refused after waiting retryAfter=%v (new %v)", step, d, d2)
					}
				}
				if checked == 0 {
					t.Fatal("never rate limited; test ineffective")
				}
			})
		})
	}
}

func TestRetryAfterIsMaxOfDimensions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := mustNew(t, Config{Default: Limit{OpsPerSec: 1, OpsBurst: 1, BytesPerSec: 100, BytesBurst: 100}})
		if ok, _ := l.Allow("t", 1, 100); !ok {
			t.Fatal("first refused")
		}
		ok, d := l.Allow("t", 1, 50) // ops needs 1s, bytes 0.5s
		if ok || d != time.Second {
			t.Fatalf("ok=%v d=%v want 1s", ok, d)
		}
	})
}

func TestOversizedRequestGoesIntoDebt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := mustNew(t, Config{Default: Limit{BytesPerSec: 100, BytesBurst: 100}})
		if ok, _ := l.Allow("t", 1, 250); !ok {
			t.Fatal("oversized request refused on full bucket")
		}
		ok, d := l.Allow("t", 1, 1) // balance -150, need 1 -> 1.51s
		if ok || d != 1510*time.Millisecond {
			t.Fatalf("after debt: ok=%v d=%v", ok, d)
		}
		ok, d = l.Allow("t", 1, 250) // needs full bucket (100) -> 2.5s
		if ok || d != 2500*time.Millisecond {
			t.Fatalf("oversized after debt: ok=%v d=%v", ok, d)
		}
		time.Sleep(d)
		if ok, _ := l.Allow("t", 1, 250); !ok {
			t.Fatal("oversized refused after retryAfter")
		}
	})
}

// take charges one operation to tenant and reports whether it was admitted.
func take(l *Limiter, tenant string) bool {
	ok, _ := l.Allow(tenant, 1, 0)
	return ok
}

func TestTenantsIsolated(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := mustNew(t, Config{
			Default: Limit{OpsPerSec: 5, OpsBurst: 5},
			Tenants: map[string]Limit{"A": {OpsPerSec: 10, OpsBurst: 10}, "B": {OpsPerSec: 10, OpsBurst: 10}},
		})
		for take(l, "A") {
		}
		for _, tenant := range []string{"B", "unknown-1", "unknown-2"} {
			if ok, d := l.Allow(tenant, 1, 0); !ok {
				t.Fatalf("tenant %s affected by A: refused, retry after %v", tenant, d)
			}
		}
		// Unknown tenants each get their own default bucket.
		for take(l, "unknown-1") {
		}
		if ok, d := l.Allow("unknown-2", 1, 0); !ok {
			t.Fatalf("unknown-2 affected by unknown-1: refused, retry after %v", d)
		}
		if got := l.Limit("zzz"); got.OpsPerSec != 5 || got.OpsBurst != 5 {
			t.Fatalf("default limit = %+v", got)
		}
	})
}

func TestUnlimitedAndZeroCost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := mustNew(t, Config{}) // zero default: unlimited
		for range 10000 {
			if ok, _ := l.Allow("x", 1, 1<<30); !ok {
				t.Fatal("unlimited refused")
			}
		}
		l2 := mustNew(t, Config{Default: Limit{OpsPerSec: 1, OpsBurst: 1}})
		l2.Allow("x", 1, 0)
		if ok, _ := l2.Allow("x", 0, 0); !ok {
			t.Fatal("zero-cost request refused")
		}
		if ok, _ := l2.Allow("x", -5, -5); !ok {
			t.Fatal("negative-cost request refused")
		}
		if ok, _ := l2.Allow("x", 1, 0); ok {
			t.Fatal("negative cost refunded tokens")
		}
	})
}

func TestClockBackwards(t *testing.T) {
	c := testfix.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)) // runs backwards: not a synctest bubble
	l := mustNew(t, Config{Now: c.Now, Default: Limit{OpsPerSec: 1, OpsBurst: 1}})
	l.Allow("x", 1, 0)
	c.Advance(-time.Hour)
	if ok, _ := l.Allow("x", 1, 0); ok {
		t.Fatal("backwards clock refilled")
	}
	c.Advance(time.Hour + time.Second)
	if ok, _ := l.Allow("x", 1, 0); !ok {
		t.Fatal("not refilled after clock recovered")
	}
}

func TestBurstDefaultsAndValidation(t *testing.T) {
	l := mustNew(t, Config{Default: Limit{OpsPerSec: 2.5, BytesPerSec: 0.5}})
	if got := l.Limit("x"); got.OpsBurst != 3 || got.BytesBurst != 1 {
		t.Fatalf("defaults: %+v", got)
	}
	bad := []Config{
		{Default: Limit{OpsBurst: -1}},
		{Tenants: map[string]Limit{"a": {BytesBurst: -1}}},
	}
	for _, cfg := range bad {
		if _, err := New(cfg); err == nil {
			t.Errorf("New(%+v) succeeded", cfg)
		}
	}
}

func TestBoundedTableEvictsLRU(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := mustNew(t, Config{MaxTenants: 32,
			Default: Limit{OpsPerSec: 1, OpsBurst: 1},
			Tenants: map[string]Limit{"pinned": {OpsPerSec: 1, OpsBurst: 1}},
		})
		take(l, "pinned")
		for i := range 1000 {
			take(l, fmt.Sprintf("t%d", i))
		}
		if n := l.Len(); n > 32 {
			t.Fatalf("table grew to %d > 32", n)
		}
		// Configured tenants are never evicted: still exhausted.
		if take(l, "pinned") {
			t.Fatal("pinned tenant lost its state")
		}
		// The most recently used dynamic tenant survives.
		if take(l, "t999") {
			t.Fatal("most recent tenant evicted")
		}
	})
}

func TestConcurrentUse(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := mustNew(t, Config{MaxTenants: 8,
			Default: Limit{OpsPerSec: 1000, OpsBurst: 100},
			Tenants: map[string]Limit{"A": {OpsPerSec: 1, OpsBurst: 500}},
		})
		var wg sync.WaitGroup
		var admittedA atomic.Int64
		for g := range 8 {
			wg.Go(func() {
				for i := range 2000 {
					if take(l, "A") {
						admittedA.Add(1)
					}
					l.Allow(fmt.Sprintf("dyn%d", (g*7+i)%40), 1, 10)
					if i%100 == 0 {
						time.Sleep(time.Microsecond)
					}
				}
			})
		}
		wg.Wait()
		// 500 burst + at most ~1 refill over the tiny advanced time.
		if n := admittedA.Load(); n < 500 || n > 501 {
			t.Fatalf("A admitted %d, want 500..501", n)
		}
		if n := l.Len(); n > 8 {
			t.Fatalf("table %d > 8", n)
		}
	})
}

func BenchmarkAllowParallel(b *testing.B) {
	tenants := map[string]Limit{}
	names := make([]string, 64)
	for i := range names {
		names[i] = fmt.Sprintf("tenant-%d", i)
		tenants[names[i]] = Limit{OpsPerSec: 1e9, OpsBurst: 1e9, BytesPerSec: 1e12, BytesBurst: 1e12}
	}
	l := mustNew(b, Config{Tenants: tenants})
	var next atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		name := names[int(next.Add(1))%len(names)]
		for pb.Next() {
			l.Allow(name, 1, 4096)
		}
	})
}

func BenchmarkAllowParallelDynamic(b *testing.B) {
	l := mustNew(b, Config{Default: Limit{OpsPerSec: 1e9, OpsBurst: 1e9}})
	var next atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		name := fmt.Sprintf("dyn-%d", next.Add(1))
		for pb.Next() {
			l.Allow(name, 1, 4096)
		}
	})
}

func TestChargeGoesIntoDebt(t *testing.T) {
	now := time.Unix(1000, 0)
	l, err := New(Config{Default: Limit{BytesPerSec: 100, BytesBurst: 100}, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	if ok, _ := l.Allow("a", 1, 1); !ok {
		t.Fatal("first request refused")
	}
	l.Charge("a", 0, 299) // served 300 bytes in all: 200 in debt
	ok, wait := l.Allow("a", 1, 1)
	if ok || wait < 2010*time.Millisecond || wait > 2011*time.Millisecond {
		t.Fatalf("in debt: ok=%v wait=%v, want refused for 2.01s", ok, wait)
	}
	now = now.Add(wait)
	if ok, _ := l.Allow("a", 1, 1); !ok {
		t.Fatal("refused after the debt was repaid")
	}
	if ok, _ := l.Allow("b", 1, 1); !ok {
		t.Fatal("another tenant is charged for a's debt")
	}
}
