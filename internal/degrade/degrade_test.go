package degrade

import (
	"context"
	"errors"
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
