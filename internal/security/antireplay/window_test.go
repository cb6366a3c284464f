package antireplay

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// clock is an injectable clock; tests move it, they never sleep.
type clock struct{ ns atomic.Int64 }

func newClock() *clock {
	c := &clock{}
	c.ns.Store(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC).UnixNano())
	return c
}
func (c *clock) Now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *clock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

func nonce(i uint64) [16]byte {
	var n [16]byte
	binary.BigEndian.PutUint64(n[:], i)
	binary.BigEndian.PutUint64(n[8:], ^i)
	return n
}

func newWindow(t *testing.T, c *clock, max int) *Window {
	t.Helper()
	w, err := New(Config{Window: 5 * time.Minute, MaxNonces: max, Now: c.Now})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func TestFreshAcceptedReplayRejected(t *testing.T) {
	c := newClock()
	w := newWindow(t, c, 0)
	if err := w.CheckStamp("a", Stamp{UnixNano: c.Now().UnixNano(), Nonce: nonce(1)}); err != nil {
		t.Fatalf("fresh: %v", err)
	}
	if err := w.CheckStamp("a", Stamp{UnixNano: c.Now().UnixNano(), Nonce: nonce(1)}); !errors.Is(err, ErrReplay) {
		t.Fatalf("exact replay: %v", err)
	}
	// Same nonce, another timestamp: still a replay while remembered.
	if err := w.CheckStamp("a", Stamp{UnixNano: c.Now().Add(time.Second).UnixNano(), Nonce: nonce(1)}); !errors.Is(err, ErrReplay) {
		t.Fatalf("replay with new ts: %v", err)
	}
	if err := w.CheckStamp("a", Stamp{UnixNano: c.Now().UnixNano(), Nonce: nonce(2)}); err != nil {
		t.Fatalf("fresh nonce: %v", err)
	}
	if w.Len() != 2 {
		t.Fatalf("Len = %d", w.Len())
	}
}

func TestTenantIsolation(t *testing.T) {
	c := newClock()
	w := newWindow(t, c, 0)
	for _, tenant := range []string{"a", "b", ""} {
		if err := w.CheckStamp(tenant, Stamp{UnixNano: c.Now().UnixNano(), Nonce: nonce(7)}); err != nil {
			t.Fatalf("tenant %q: %v", tenant, err)
		}
	}
	for _, tenant := range []string{"a", "b", ""} {
		if err := w.CheckStamp(tenant, Stamp{UnixNano: c.Now().UnixNano(), Nonce: nonce(7)}); !errors.Is(err, ErrReplay) {
			t.Fatalf("tenant %q replay: %v", tenant, err)
		}
	}
}

// A replay of a request the Window has already forgotten is stale, so
// forgetting is safe.
func TestReplayAfterExpiryIsStale(t *testing.T) {
	c := newClock()
	w := newWindow(t, c, 0)
	ts := c.Now()
	if err := w.CheckStamp("a", Stamp{UnixNano: ts.UnixNano(), Nonce: nonce(1)}); err != nil {
		t.Fatal(err)
	}
	c.Advance(5*time.Minute + time.Nanosecond)
	if err := w.CheckStamp("a", Stamp{UnixNano: c.Now().UnixNano(), Nonce: nonce(2)}); err != nil { // triggers expiry
		t.Fatal(err)
	}
	if w.Len() != 1 {
		t.Fatalf("old nonce not forgotten: Len = %d", w.Len())
	}
	if err := w.CheckStamp("a", Stamp{UnixNano: ts.UnixNano(), Nonce: nonce(1)}); !errors.Is(err, ErrStale) {
		t.Fatalf("replay after expiry: %v, want ErrStale", err)
	}
	// Right at the edge it is still remembered: a replay, not accepted.
	c2 := newClock()
	w2 := newWindow(t, c2, 0)
	ts2 := c2.Now()
	_ = w2.CheckStamp("a", Stamp{UnixNano: ts2.UnixNano(), Nonce: nonce(1)})
	c2.Advance(5 * time.Minute)
	if err := w2.CheckStamp("a", Stamp{UnixNano: ts2.UnixNano(), Nonce: nonce(1)}); !errors.Is(err, ErrReplay) {
		t.Fatalf("replay at window edge: %v, want ErrReplay", err)
	}
}

func TestClockSkew(t *testing.T) {
	c := newClock()
	w := newWindow(t, c, 0)
	const win, ahead = 5 * time.Minute, DefaultMaxFuture
	cases := []struct {
		skew time.Duration
		want error
	}{
		{-(win - time.Second), nil},
		{ahead - time.Second, nil},
		{-win, nil},
		{ahead, nil},
		{-(win + time.Second), ErrStale},
		{ahead + time.Second, ErrFuture},
		{-(win + time.Nanosecond), ErrStale},
		{ahead + time.Nanosecond, ErrFuture},
		{win, ErrFuture},
	}
	for i, tc := range cases {
		err := w.CheckStamp("a", Stamp{UnixNano: c.Now().Add(tc.skew).UnixNano(), Nonce: nonce(uint64(i))})
		if tc.want == nil && err != nil || tc.want != nil && !errors.Is(err, tc.want) {
			t.Errorf("skew %v: err = %v, want %v", tc.skew, err, tc.want)
		}
	}
}

func TestExtremeTimestamps(t *testing.T) {
	c := newClock()
	w := newWindow(t, c, 0)
	if err := w.CheckStamp("a", Stamp{UnixNano: time.Unix(0, 0).UnixNano(), Nonce: nonce(1)}); !errors.Is(err, ErrStale) {
		t.Fatal(err)
	}
	if err := w.CheckStamp("a", Stamp{UnixNano: 1<<63 - 1}); !errors.Is(err, ErrFuture) {
		t.Fatal(err)
	}
	if err := w.CheckStamp("a", Stamp{UnixNano: -1 << 63}); !errors.Is(err, ErrStale) {
		t.Fatal(err)
	}
}

// Under a flood the memory bound holds and no replay is ever accepted.
func TestFloodBoundedNoReplay(t *testing.T) {
	c := newClock()
	const max = 64
	w := newTenantWindow(t, c, max, max/4) // room for the 4 tenants
	rng := rand.New(rand.NewPCG(1, 2))
	type key struct {
		tenant string
		n      [16]byte
	}
	type sent struct {
		key
		ts time.Time
	}
	accepted := map[key]bool{}
	var history []sent
	counts := map[string]int{}
	for i := range 20000 {
		if i%10 == 0 {
			c.Advance(time.Duration(rng.IntN(int(2 * time.Second))))
		}
		var s sent
		if len(history) > 0 && rng.IntN(3) == 0 {
			s = history[rng.IntN(len(history))] // replay something old
		} else {
			s = sent{
				key: key{tenant: fmt.Sprintf("t%d", rng.IntN(4)), n: nonce(rng.Uint64())},
				ts:  c.Now().Add(time.Duration(rng.Int64N(int64(10*time.Minute))) - 5*time.Minute),
			}
			history = append(history, s)
		}
		err := w.CheckStamp(s.tenant, Stamp{UnixNano: s.ts.UnixNano(), Nonce: s.n})
		switch {
		case err == nil:
			if accepted[s.key] {
				t.Fatalf("replay accepted: %+v", s)
			}
			accepted[s.key] = true
			counts["ok"]++
		default:
			kind := "unexpected"
			for name, e := range map[string]error{"replay": ErrReplay, "stale": ErrStale, "future": ErrFuture, "full": ErrWindowFull} {
				if errors.Is(err, e) {
					kind = name
				}
			}
			if kind == "unexpected" {
				t.Fatalf("unexpected error %v", err)
			}
			counts[kind]++
		}
		if n := w.Len(); n > max {
			t.Fatalf("Len %d > MaxNonces %d", n, max)
		}
	}
	if counts["ok"] == 0 || counts["full"] == 0 || counts["replay"] == 0 {
		t.Fatalf("flood did not exercise the bound: %v", counts)
	}
	t.Logf("outcomes: %v", counts)
}

// When full, the oldest nonce is evicted and its timestamp becomes a floor.
func TestWindowFullFloor(t *testing.T) {
	c := newClock()
	w := newWindow(t, c, 2)
	t0 := c.Now()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(w.CheckStamp("a", Stamp{UnixNano: t0.UnixNano(), Nonce: nonce(1)}))
	must(w.CheckStamp("a", Stamp{UnixNano: t0.Add(2 * time.Second).UnixNano(), Nonce: nonce(2)}))
	// Full, and not newer than the oldest: rejected, nothing evicted.
	if err := w.CheckStamp("a", Stamp{UnixNano: t0.UnixNano(), Nonce: nonce(3)}); !errors.Is(err, ErrWindowFull) {
		t.Fatalf("got %v", err)
	}
	// Newer: evicts nonce 1 (ts t0); floor = t0.
	must(w.CheckStamp("a", Stamp{UnixNano: t0.Add(time.Second).UnixNano(), Nonce: nonce(4)}))
	if w.Len() != 2 {
		t.Fatalf("Len = %d", w.Len())
	}
	// The evicted nonce cannot come back: it is at the floor.
	if err := w.CheckStamp("a", Stamp{UnixNano: t0.UnixNano(), Nonce: nonce(1)}); !errors.Is(err, ErrWindowFull) {
		t.Fatalf("evicted replay: %v", err)
	}
	// Once the window start passes the floor, normal rules apply again.
	c.Advance(5*time.Minute + time.Nanosecond)
	if err := w.CheckStamp("a", Stamp{UnixNano: t0.UnixNano(), Nonce: nonce(1)}); !errors.Is(err, ErrStale) {
		t.Fatalf("after floor passes: %v", err)
	}
	must(w.CheckStamp("a", Stamp{UnixNano: c.Now().UnixNano(), Nonce: nonce(5)}))
}

func TestConfig(t *testing.T) {
	for _, bad := range []Config{
		{Window: -1}, {MaxNonces: -1}, {MaxFuture: -1}, {TenantNonces: -1},
		{Window: time.Second, MaxFuture: 2 * time.Second},
		{MaxNonces: 100, TenantNonces: 101},
	} {
		if _, err := New(bad); !errors.Is(err, ErrConfig) {
			t.Errorf("%+v: %v", bad, err)
		}
	}
	w, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	if w.past != int64(5*time.Minute) || w.future != int64(5*time.Second) || w.perTenant != 1<<16 ||
		w.MaxTenants() != 16 || w.now == nil {
		t.Fatalf("defaults not applied: %v %v %d %d", time.Duration(w.past), time.Duration(w.future), w.perTenant, w.MaxTenants())
	}
	// A small total caps the default per-tenant budget; a short window caps
	// the default future bound.
	if w, err = New(Config{Window: time.Second, MaxNonces: 100}); err != nil {
		t.Fatal(err)
	}
	if w.perTenant != 100 || w.MaxTenants() != 1 || w.future != int64(time.Second) {
		t.Fatalf("capped defaults: %d %d %v", w.perTenant, w.MaxTenants(), time.Duration(w.future))
	}
}

func TestConcurrentCheck(t *testing.T) {
	c := newClock()
	w := newTenantWindow(t, c, 100, 20) // room for the 5 tenants
	const workers, iters = 4, 500
	var ok atomic.Int64
	var wg sync.WaitGroup
	for g := range workers {
		wg.Go(func() {
			for i := range iters {
				// Every worker sends the same nonces for tenant "shared":
				// exactly one acceptance per nonce is allowed.
				if w.CheckStamp("shared", Stamp{UnixNano: c.Now().UnixNano(), Nonce: nonce(uint64(i))}) == nil {
					ok.Add(1)
				}
				_ = w.CheckStamp(fmt.Sprintf("own%d", g), Stamp{UnixNano: c.Now().UnixNano(), Nonce: nonce(uint64(i))})
				if w.Len() > 100 || w.TenantLen("shared") > 20 {
					t.Errorf("Len %d > 100 or shared's %d > 20", w.Len(), w.TenantLen("shared"))
				}
			}
		})
	}
	wg.Go(func() {
		for range iters {
			c.Advance(time.Millisecond)
		}
	})
	wg.Wait()
	if n := ok.Load(); n > iters {
		t.Fatalf("%d acceptances for %d distinct nonces", n, iters)
	}
}
