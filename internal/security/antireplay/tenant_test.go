package antireplay

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

func newTenantWindow(t *testing.T, c *clock, total, perTenant int) *Window {
	t.Helper()
	w, err := New(Config{Window: 5 * time.Minute, MaxNonces: total, TenantNonces: perTenant, Now: c.Now})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// TestFloodOneTenantOthersFresh: one tenant's flood of stamps does not
// refuse another's fresh ones, at the unit level: a
// tenant floods future-dated stamps, many times its budget. Before per-tenant
// budgets the flood filled the shared memory and raised a global floor, so
// every other tenant's fresh stamp was refused for the whole window.
func TestFloodOneTenantOthersFresh(t *testing.T) {
	c := newClock()
	const budget = 64
	w := newTenantWindow(t, c, 4*budget, budget)
	flood := map[[16]byte]bool{}
	for i := range 20 * budget {
		n := nonce(1_000_000 + uint64(i))
		switch err := w.CheckStamp("reader", Stamp{UnixNano: c.Now().Add(DefaultMaxFuture).UnixNano(), Nonce: n}); {
		case err == nil:
			flood[n] = true
		case !errors.Is(err, ErrWindowFull):
			t.Fatalf("flood %d: %v", i, err)
		}
	}
	if got := w.TenantLen("reader"); got > budget {
		t.Fatalf("flooding tenant holds %d nonces, budget %d", got, budget)
	}
	// Every other tenant's fresh requests pass, old-but-in-window ones too,
	// up to their own budget.
	for _, tenant := range []string{"writer", "filler"} {
		for i := range budget {
			ts := c.Now().Add(-time.Duration(i) * time.Second)
			if err := w.CheckStamp(tenant, Stamp{UnixNano: ts.UnixNano(), Nonce: nonce(uint64(i))}); err != nil {
				t.Fatalf("%s request %d (ts now-%ds) after another tenant's flood: %v", tenant, i, i, err)
			}
		}
		for i := range budget {
			if err := w.CheckStamp(tenant, Stamp{UnixNano: c.Now().UnixNano(), Nonce: nonce(uint64(i))}); !errors.Is(err, ErrReplay) {
				t.Fatalf("%s replay %d: %v, want ErrReplay", tenant, i, err)
			}
		}
	}
	// No flood nonce is ever accepted twice.
	for n := range flood {
		if err := w.CheckStamp("reader", Stamp{UnixNano: c.Now().UnixNano(), Nonce: n}); err == nil {
			t.Fatal("flooding tenant's replay accepted")
		}
	}
	if w.Len() > 4*budget {
		t.Fatalf("Len %d > MaxNonces %d", w.Len(), 4*budget)
	}
}

// TestFutureBound: a stamp may be at most MaxFuture ahead of the clock,
// independently of how far behind (Window) it may be.
func TestFutureBound(t *testing.T) {
	c := newClock()
	w := newTenantWindow(t, c, 0, 0)
	cases := []struct {
		skew time.Duration
		want error
	}{
		{DefaultMaxFuture, nil},
		{DefaultMaxFuture + time.Nanosecond, ErrFuture},
		{time.Minute, ErrFuture},
		{4 * time.Minute, ErrFuture},
		{-5 * time.Minute, nil},
		{-5*time.Minute - time.Nanosecond, ErrStale},
	}
	for i, tc := range cases {
		err := w.CheckStamp("a", Stamp{UnixNano: c.Now().Add(tc.skew).UnixNano(), Nonce: nonce(uint64(i))})
		if tc.want == nil && err != nil || tc.want != nil && !errors.Is(err, tc.want) {
			t.Errorf("skew %v: err = %v, want %v", tc.skew, err, tc.want)
		}
	}
	w2, err := New(Config{Window: time.Minute, MaxFuture: 30 * time.Second, Now: c.Now})
	if err != nil {
		t.Fatal(err)
	}
	if err := w2.CheckStamp("a", Stamp{UnixNano: c.Now().Add(30 * time.Second).UnixNano(), Nonce: nonce(1)}); err != nil {
		t.Fatal(err)
	}
	if err := w2.CheckStamp("a", Stamp{UnixNano: c.Now().Add(31 * time.Second).UnixNano(), Nonce: nonce(2)}); !errors.Is(err, ErrFuture) {
		t.Fatal(err)
	}
	// A future stamp is remembered until it has aged out of the window.
	c.Advance(90 * time.Second)
	if err := w2.CheckStamp("a", Stamp{UnixNano: c.Now().Add(-time.Minute).UnixNano(), Nonce: nonce(1)}); !errors.Is(err, ErrReplay) {
		t.Fatalf("future stamp replayed at the window's edge: %v", err)
	}
}

// A tenant at its budget fails closed for itself only: its floor rises, the
// other tenants' does not.
func TestTenantBudgetFailsClosedForOwner(t *testing.T) {
	c := newClock()
	w := newTenantWindow(t, c, 4, 2)
	t0 := c.Now()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(w.CheckStamp("a", Stamp{UnixNano: t0.UnixNano(), Nonce: nonce(1)}))
	must(w.CheckStamp("a", Stamp{UnixNano: t0.Add(2 * time.Second).UnixNano(), Nonce: nonce(2)}))
	if err := w.CheckStamp("a", Stamp{UnixNano: t0.UnixNano(), Nonce: nonce(3)}); !errors.Is(err, ErrWindowFull) {
		t.Fatalf("a at budget, not newer: %v", err)
	}
	must(w.CheckStamp("a", Stamp{UnixNano: t0.Add(time.Second).UnixNano(), Nonce: nonce(4)})) // evicts nonce 1; a's floor = t0
	if err := w.CheckStamp("a", Stamp{UnixNano: t0.UnixNano(), Nonce: nonce(1)}); !errors.Is(err, ErrWindowFull) {
		t.Fatalf("evicted replay: %v", err)
	}
	// b is untouched by a's floor and budget.
	must(w.CheckStamp("b", Stamp{UnixNano: t0.UnixNano(), Nonce: nonce(1)}))
	must(w.CheckStamp("b", Stamp{UnixNano: t0.Add(-time.Minute).UnixNano(), Nonce: nonce(2)}))
	if w.TenantLen("a") != 2 || w.TenantLen("b") != 2 || w.Len() != 4 {
		t.Fatalf("lens a=%d b=%d total=%d", w.TenantLen("a"), w.TenantLen("b"), w.Len())
	}
}

// The total is per-tenant budget × MaxTenants; a tenant beyond that many
// with live nonces is refused until one ages out, and a tenant's state (and
// so its floor) is never dropped while it still vouches for anything.
func TestTenantSlots(t *testing.T) {
	c := newClock()
	w := newTenantWindow(t, c, 5, 2)
	if w.MaxTenants() != 2 {
		t.Fatalf("MaxTenants = %d, want 2", w.MaxTenants())
	}
	t0 := c.Now()
	for _, tenant := range []string{"a", "b"} {
		if err := w.CheckStamp(tenant, Stamp{UnixNano: t0.UnixNano(), Nonce: nonce(1)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.CheckStamp("c", Stamp{UnixNano: t0.UnixNano(), Nonce: nonce(1)}); !errors.Is(err, ErrWindowFull) {
		t.Fatalf("third tenant: %v, want ErrWindowFull", err)
	}
	// a fills its budget and evicts nonce 1: a's floor is t0 and survives
	// the sweep c's request triggers.
	if err := w.CheckStamp("a", Stamp{UnixNano: t0.Add(2 * time.Second).UnixNano(), Nonce: nonce(2)}); err != nil {
		t.Fatal(err)
	}
	if err := w.CheckStamp("a", Stamp{UnixNano: t0.Add(3 * time.Second).UnixNano(), Nonce: nonce(3)}); err != nil {
		t.Fatal(err)
	}
	if err := w.CheckStamp("c", Stamp{UnixNano: t0.UnixNano(), Nonce: nonce(1)}); !errors.Is(err, ErrWindowFull) {
		t.Fatalf("third tenant: %v, want ErrWindowFull", err)
	}
	if err := w.CheckStamp("a", Stamp{UnixNano: t0.UnixNano(), Nonce: nonce(1)}); !errors.Is(err, ErrWindowFull) {
		t.Fatalf("a's evicted nonce: %v, want ErrWindowFull", err)
	}
	c.Advance(5*time.Minute + time.Second) // b's only nonce and a's floor age out
	if err := w.CheckStamp("c", Stamp{UnixNano: c.Now().UnixNano(), Nonce: nonce(1)}); err != nil {
		t.Fatalf("third tenant after b aged out: %v", err)
	}
	if err := w.CheckStamp("a", Stamp{UnixNano: t0.UnixNano(), Nonce: nonce(1)}); !errors.Is(err, ErrStale) {
		t.Fatalf("a's evicted nonce after the window: %v, want ErrStale", err)
	}
	if w.Len() > 4 {
		t.Fatalf("Len %d > budget × MaxTenants", w.Len())
	}
}

// TestManyTenantsNoReplay: a seeded mix of tenants (one more than fit),
// timestamps and exact replays of accepted stamps; the bounds hold and no
// replay is ever accepted.
func TestManyTenantsNoReplay(t *testing.T) {
	c := newClock()
	w := newTenantWindow(t, c, 40, 10)
	rng := rand.New(rand.NewPCG(3, 4))
	type stamp struct {
		tenant string
		ts     time.Time
		n      [16]byte
	}
	var accepted []stamp
	outcomes := map[string]int{}
	for i := range 20000 {
		if i%20 == 0 {
			c.Advance(time.Duration(rng.Int64N(int64(3 * time.Second))))
		}
		if len(accepted) > 0 && rng.IntN(3) == 0 {
			s := accepted[rng.IntN(len(accepted))]
			if err := w.CheckStamp(s.tenant, Stamp{UnixNano: s.ts.UnixNano(), Nonce: s.n}); err == nil {
				t.Fatalf("replay accepted: %+v", s)
			}
			continue
		}
		s := stamp{
			tenant: fmt.Sprintf("t%d", rng.IntN(5)),
			ts:     c.Now().Add(time.Duration(rng.Int64N(int64(5*time.Minute+DefaultMaxFuture))) - 5*time.Minute),
			n:      nonce(rng.Uint64()),
		}
		err := w.CheckStamp(s.tenant, Stamp{UnixNano: s.ts.UnixNano(), Nonce: s.n})
		switch {
		case err == nil:
			accepted = append(accepted, s)
			outcomes["ok"]++
		case errors.Is(err, ErrWindowFull):
			outcomes["full"]++
		default:
			t.Fatalf("fresh in-window stamp: %v", err)
		}
		for j := range 5 {
			if n := w.TenantLen(fmt.Sprintf("t%d", j)); n > 10 {
				t.Fatalf("tenant holds %d > 10", n)
			}
		}
		if w.Len() > 40 {
			t.Fatalf("Len %d > 40", w.Len())
		}
	}
	if outcomes["ok"] == 0 || outcomes["full"] == 0 {
		t.Fatalf("the mix did not exercise the bounds: %v", outcomes)
	}
	t.Logf("outcomes: %v", outcomes)
}
