package refill

import (
	"context"
	"errors"
	"maps"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gpucache/gpucache/internal/cold"
)

// Seed row "Slow or unavailable G4": return Missing without calling the
// object store. Time comes from an injected clock (breaker) and from
// synctest's fake clock (timeouts); nothing sleeps.
func TestSlowOrUnavailableG4ReturnsMissingWithoutCallingStore(t *testing.T) {
	ctx := context.Background()
	ids := chain(t, testNamespace("acme"), 2, 100)
	p, payloads := buildPack(t, ids, 512)
	unavailable := func(context.Context, string, string) error { return cold.ErrUnavailable }

	// assertOpen checks that every entry point misses with BreakerOpen and
	// that the store sees no call at all.
	assertOpen := func(t *testing.T, e *env) {
		t.Helper()
		e.reset()
		for _, name := range slices.Sorted(maps.Keys(entryPoints())) {
			dst := filled(512)
			n, res, err := entryPoints()[name](e.r, ctx, ids[0], dst)
			expectMiss(t, n, res, BreakerOpen, dst)
			if err != nil || !allAA(dst) {
				t.Fatalf("%s: %v", name, err)
			}
		}
		if e.calls() != 0 {
			t.Fatalf("the store saw %d calls while the breaker was open", e.calls())
		}
	}

	t.Run("unavailable", func(t *testing.T) {
		e := newEnv(t, Config{BreakerFailures: 3, BreakerCooldown: 10 * time.Second})
		e.publish(p)
		e.setFault(unavailable)
		for i := range 3 {
			e.reset()
			dst := filled(512)
			n, res, err := e.r.RefillBlock(ctx, ids[0], dst)
			expectMiss(t, n, res, Unavailable, dst)
			if !errors.Is(err, cold.ErrUnavailable) || e.calls() != 1 {
				t.Fatalf("failure %d: %v, %d calls", i, err, e.calls())
			}
		}
		if e.r.Breaker() != Open {
			t.Fatalf("breaker %v after 3 failures", e.r.Breaker())
		}
		assertOpen(t, e)
		e.clock.Advance(10*time.Second - 1)
		assertOpen(t, e)

		// Cool-down over: one probe reaches the healed store and closes
		// the breaker.
		e.clock.Advance(1)
		if e.r.Breaker() != HalfOpen {
			t.Fatalf("breaker %v after the cool-down", e.r.Breaker())
		}
		e.setFault(nil)
		dst := filled(512)
		if n, res, err := e.r.RefillBlock(ctx, ids[0], dst); !res.Hit || err != nil || n != 512 {
			t.Fatalf("probe: %v %v", res, err)
		}
		if e.r.Breaker() != Closed {
			t.Fatalf("breaker %v after a good probe", e.r.Breaker())
		}
	})

	t.Run("slow", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			e := newEnv(t, Config{Timeout: 50 * time.Millisecond, BreakerFailures: 2, BreakerCooldown: time.Minute})
			e.publish(p)
			// The store answers only when the caller gives up.
			e.setFault(func(ctx context.Context, _, _ string) error {
				<-ctx.Done()
				return ctx.Err()
			})
			start := time.Now()
			for i := range 2 {
				dst := filled(512)
				n, res, err := e.r.RefillDegraded(ctx, ids[0], dst)
				expectMiss(t, n, res, Unavailable, dst)
				if !errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("slow call %d: %v", i, err)
				}
			}
			if got := time.Since(start); got != 100*time.Millisecond {
				t.Fatalf("two timeouts took %v of fake time", got)
			}
			if e.r.Breaker() != Open {
				t.Fatalf("breaker %v after 2 timeouts", e.r.Breaker())
			}
			// Missing at once, without touching the slow store.
			start = time.Now()
			assertOpen(t, e)
			if time.Since(start) != 0 {
				t.Fatal("an open breaker waited")
			}
		})
	})

	t.Run("half-open lets one probe through", func(t *testing.T) {
		e := newEnv(t, Config{BreakerFailures: 1, BreakerCooldown: time.Second})
		e.publish(p)
		e.setFault(unavailable)
		if _, res, _ := e.r.RefillBlock(ctx, ids[0], filled(512)); res.Reason != Unavailable {
			t.Fatal(res)
		}
		e.clock.Advance(time.Second)

		entered, release := make(chan struct{}), make(chan error)
		e.setFault(func(context.Context, string, string) error {
			entered <- struct{}{}
			return <-release
		})
		done := make(chan Result)
		go func() {
			_, res, _ := e.r.RefillBlock(ctx, ids[0], filled(512))
			done <- res
		}()
		<-entered // the probe is inside the store
		e.reset()
		dst := filled(512)
		n, res, _ := e.r.RefillBlock(ctx, ids[1], dst)
		expectMiss(t, n, res, BreakerOpen, dst)
		if e.calls() != 0 {
			t.Fatal("a second call reached the store during the probe")
		}
		release <- cold.ErrUnavailable
		if res := <-done; res.Reason != Unavailable {
			t.Fatalf("probe: %v", res)
		}
		// The failed probe reopened the breaker for a full cool-down.
		if e.r.Breaker() != Open {
			t.Fatalf("breaker %v after a failed probe", e.r.Breaker())
		}
		assertOpen(t, e)
		e.clock.Advance(time.Second)
		e.setFault(nil)
		dst = filled(512)
		if _, res, _ := e.r.RefillBlock(ctx, ids[1], dst); !res.Hit || string(dst) != string(payloads[1]) {
			t.Fatalf("second probe: %v", res)
		}
		if e.r.Breaker() != Closed {
			t.Fatalf("breaker %v", e.r.Breaker())
		}
	})

	t.Run("only consecutive failures count", func(t *testing.T) {
		e := newEnv(t, Config{BreakerFailures: 3})
		e.publish(p)
		outcome := func(fail bool) {
			t.Helper()
			if fail {
				e.setFault(unavailable)
			} else {
				e.setFault(nil)
			}
			e.r.RefillBlock(ctx, ids[0], filled(512))
		}
		for _, fail := range []bool{true, true, false, true, true} {
			outcome(fail)
		}
		if e.r.Breaker() != Closed {
			t.Fatal("a success did not reset the failure count")
		}
		outcome(true)
		if e.r.Breaker() != Open {
			t.Fatal("3 consecutive failures did not open the breaker")
		}
	})

	t.Run("answers from the store are not failures", func(t *testing.T) {
		e := newEnv(t, Config{BreakerFailures: 1})
		e.publish(p)
		other := chain(t, testNamespace("globex"), 1, 1)[0]
		for range 5 {
			if _, res, _ := e.r.RefillBlock(ctx, other, filled(512)); res.Reason != NotFound {
				t.Fatal(res)
			}
		}
		e.put(p.Object.Key, make([]byte, len(p.Object.Body)))
		if _, res, _ := e.r.RefillBlock(ctx, ids[0], filled(512)); res.Reason != Corrupt {
			t.Fatal(res)
		}
		if e.r.Breaker() != Closed {
			t.Fatal("a healthy store's answers opened the breaker")
		}
	})

	t.Run("the caller giving up is not a store failure", func(t *testing.T) {
		e := newEnv(t, Config{BreakerFailures: 1})
		e.publish(p)
		cctx, cancel := context.WithCancel(ctx)
		e.setFault(func(ctx context.Context, _, _ string) error {
			cancel()
			<-ctx.Done()
			return ctx.Err()
		})
		if _, res, err := e.r.RefillBlock(cctx, ids[0], filled(512)); res.Reason != Unavailable || !errors.Is(err, context.Canceled) {
			t.Fatalf("%v %v", res, err)
		}
		// An already-cancelled caller does not reach the store at all.
		e.reset()
		if _, res, _ := e.r.RefillBlock(cctx, ids[0], filled(512)); res.Reason != Unavailable || e.calls() != 0 {
			t.Fatalf("%v, %d calls", res, e.calls())
		}
		if e.r.Breaker() != Closed {
			t.Fatal("cancellation opened the breaker")
		}
	})
}

// The breaker's state machine on its own, including a straggler: a call
// admitted while closed that finishes after the breaker opened.
func TestBreakerStateMachine(t *testing.T) {
	c := newClock()
	b := newBreaker(2, time.Second, c.Now)
	straggler, ok := b.admit()
	if !ok {
		t.Fatal("closed breaker refused")
	}
	for range 2 {
		tk, _ := b.admit()
		b.done(tk, failed)
	}
	if b.state() != Open {
		t.Fatal("not open")
	}
	b.done(straggler, succeeded) // must not close it
	if b.state() != Open {
		t.Fatal("a straggler's success closed an open breaker")
	}
	if _, ok := b.admit(); ok {
		t.Fatal("open breaker admitted")
	}
	c.Advance(time.Second)
	probe, ok := b.admit()
	if !ok || !probe.probe {
		t.Fatal("no probe after the cool-down")
	}
	if _, ok := b.admit(); ok {
		t.Fatal("two probes at once")
	}
	b.done(probe, neutral) // says nothing: another probe may go
	if b.state() != HalfOpen {
		t.Fatalf("state %v after a neutral probe", b.state())
	}
	probe, ok = b.admit()
	if !ok {
		t.Fatal("no probe after a neutral one")
	}
	b.done(probe, succeeded)
	if b.state() != Closed {
		t.Fatal("good probe did not close")
	}
	for _, s := range []BreakerState{Closed, Open, HalfOpen, 9} {
		if s.String() == "" {
			t.Fatal("state name")
		}
	}
}
