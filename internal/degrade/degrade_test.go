package degrade

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestNilRegistryInjectsNothing(t *testing.T) {
	var r *Registry
	v, err := Do(context.Background(), r, S3Unavailable, time.Second, func(context.Context) (int, error) { return 7, nil })
	if err != nil || v != 7 || r.Hits(S3Unavailable) != 0 {
		t.Fatalf("v=%d err=%v", v, err)
	}
}

// TestEveryFaultIsAMissWithinTheBudget arms each named fault in each mode
// and checks the answer is a typed miss with no value, within the budget
// (synctest's fake clock makes the bound exact).
func TestEveryFaultIsAMissWithinTheBudget(t *testing.T) {
	for _, f := range Faults() {
		for _, mode := range []Mode{Fail, Hang} {
			synctest.Test(t, func(t *testing.T) {
				r := &Registry{}
				disarm := r.Arm(f, mode)
				called := false
				start := time.Now()
				v, err := Do(context.Background(), r, f, 50*time.Millisecond, func(context.Context) ([]byte, error) {
					called = true
					return []byte("payload"), nil
				})
				el := time.Since(start)
				var m *Miss
				if !errors.As(err, &m) || !errors.Is(err, ErrMiss) || !errors.Is(err, ErrInjected) || m.Fault != f || v != nil || called {
					t.Fatalf("%s/%d: v=%q err=%v called=%v", f, mode, v, err, called)
				}
				if el > 50*time.Millisecond || (mode == Hang && el != 50*time.Millisecond) {
					t.Fatalf("%s/%d: answered after %v", f, mode, el)
				}
				if r.Hits(f) != 1 {
					t.Fatalf("hits %d", r.Hits(f))
				}
				disarm()
				if v, err := Do(context.Background(), r, f, time.Second, func(context.Context) ([]byte, error) { return []byte("ok"), nil }); err != nil || string(v) != "ok" {
					t.Fatalf("after disarm: %q %v", v, err)
				}
			})
		}
	}
}

// TestSlowPeerIsAMissAtTheDeadline: a call that honours its context but
// would take longer than the budget is abandoned at the budget.
func TestSlowPeerIsAMissAtTheDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		_, err := Do(context.Background(), nil, "", 200*time.Millisecond, func(ctx context.Context) (int, error) {
			select {
			case <-time.After(time.Hour):
				return 1, nil
			case <-ctx.Done():
				return 0, ctx.Err()
			}
		})
		if !errors.Is(err, ErrMiss) || !errors.Is(err, context.DeadlineExceeded) || time.Since(start) != 200*time.Millisecond {
			t.Fatalf("err=%v after %v", err, time.Since(start))
		}
	})
}

func TestRealFailureIsAMiss(t *testing.T) {
	boom := errors.New("connection refused")
	_, err := Do(context.Background(), nil, S3Unavailable, time.Second, func(context.Context) (int, error) { return 0, boom })
	var m *Miss
	if !errors.As(err, &m) || !errors.Is(err, boom) || m.Fault != "" {
		t.Fatalf("err=%v", err)
	}
	// A caller's cancellation is a miss too, never a hang.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = Do(ctx, nil, "", time.Hour, func(ctx context.Context) (int, error) { <-ctx.Done(); return 0, ctx.Err() })
	if !errors.Is(err, ErrMiss) || !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled: %v", err)
	}
}

// TestDoAnyFiresTheFirstArmedFault: a site several faults can hit fires the
// first armed one, in the order given, and counts only that one.
func TestDoAnyFiresTheFirstArmedFault(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := &Registry{}
		sites := []Fault{S3Unavailable, S3Slow}
		defer r.Arm(S3Slow, Hang)()
		start := time.Now()
		_, err := DoAny(context.Background(), r, sites, time.Second, func(context.Context) (int, error) { return 1, nil })
		var m *Miss
		if !errors.As(err, &m) || m.Fault != S3Slow || time.Since(start) != time.Second {
			t.Fatalf("err=%v after %v", err, time.Since(start))
		}
		disarm := r.Arm(S3Unavailable, Fail)
		start = time.Now()
		_, err = DoAny(context.Background(), r, sites, time.Second, func(context.Context) (int, error) { return 1, nil })
		if !errors.As(err, &m) || m.Fault != S3Unavailable || time.Since(start) != 0 {
			t.Fatalf("err=%v after %v", err, time.Since(start))
		}
		disarm()
		if r.Hits(S3Slow) != 1 || r.Hits(S3Unavailable) != 1 {
			t.Fatalf("hits slow %d unavailable %d", r.Hits(S3Slow), r.Hits(S3Unavailable))
		}
	})
}

// TestNestedMissKeepsItsFault: a miss fn returns (a nested Do, or a site
// that carried a fault out with Check) is not wrapped in a second miss, so
// errors.As finds the fault.
func TestNestedMissKeepsItsFault(t *testing.T) {
	r := &Registry{}
	defer r.Arm(NICFlap, Fail)()
	_, err := Do(context.Background(), nil, "", time.Second, func(ctx context.Context) (int, error) {
		if _, ok := r.Check(NICFlap); ok {
			return 0, fmt.Errorf("submit: %w", &Miss{Fault: NICFlap, Cause: ErrInjected})
		}
		return 1, nil
	})
	var m *Miss
	if !errors.As(err, &m) || m.Fault != NICFlap || !errors.Is(err, ErrMiss) || r.Hits(NICFlap) != 1 {
		t.Fatalf("err=%v", err)
	}
	var nilReg *Registry
	if _, ok := nilReg.Check(NICFlap); ok {
		t.Fatal("a nil registry reported an armed fault")
	}
}
