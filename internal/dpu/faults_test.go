package dpu

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gpucache/gpucache/internal/degrade"
	"github.com/gpucache/gpucache/internal/transport"
)

// The offload engine's failpoints, moved here from internal/transport with
// their tests: the helpers below are the transport tests' own, on its
// public API.

const testSubmitBudget = 200 * time.Millisecond

func newReg(t testing.TB, slots, slotSize int) *transport.Registry {
	t.Helper()
	r, err := transport.NewRegistry(transport.RegistryConfig{Slots: slots, SlotSize: slotSize})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := r.Close(); err != nil {
			t.Errorf("registry close: %v", err)
		}
	})
	return r
}

func checkout(t testing.TB, r *transport.Registry, b transport.Binding, n int, e transport.Epoch) *transport.Stage {
	t.Helper()
	st, err := r.Checkout(b, n, e)
	if err != nil {
		t.Fatalf("checkout %s %d @%d: %v", b, n, e, err)
	}
	return st
}

// fill writes a seeded pattern of n bytes into slot i and sets its length.
func fill(st *transport.Stage, i, n int, seed uint64) {
	b := st.Slot(i)[:n]
	rnd := rand.New(rand.NewPCG(seed, uint64(i)))
	for j := range b {
		b[j] = byte(rnd.Uint32())
	}
	st.SetLen(i, n)
}

// checkStats asserts the gauges add up.
func checkStats(t testing.TB, r *transport.Registry) transport.RegistryStats {
	t.Helper()
	s := r.Stats()
	if s.Idle+s.CheckedOut+s.Quarantined != s.Slots {
		t.Fatalf("stats do not add up: %+v", s)
	}
	return s
}

// receiveInto runs m.Receive(into) on a goroutine and sends its outcome: a
// receipt that reports delivery is turned into an error.
func receiveInto(m *transport.Mem, into *transport.Stage) <-chan error {
	out := make(chan error, 1)
	go func() {
		rc, err := m.Receive(context.Background(), into)
		if err == nil {
			err = fmt.Errorf("delivered: %+v", rc)
		}
		out <- err
	}()
	return out
}

// checkMiss asserts a Submit under fault is a miss that names it, ended the
// stage (quarantined), reports nothing delivered, and answered in exactly
// want (synctest).
func checkMiss(t *testing.T, rc transport.Receipt, err error, fault degrade.Fault, el, want time.Duration) {
	t.Helper()
	var m *degrade.Miss
	if !errors.Is(err, degrade.ErrMiss) || !errors.As(err, &m) || m.Fault != fault || !errors.Is(err, transport.ErrStageQuarantined) {
		t.Fatalf("submit under %s: %v", fault, err)
	}
	if rc != (transport.Receipt{}) {
		t.Fatalf("submit under %s reported %+v", fault, rc)
	}
	if el != want {
		t.Fatalf("submit under %s: miss after %v, want exactly %v", fault, el, want)
	}
}

// hangTime is the time to a miss of a fault armed in mode.
func hangTime(mode degrade.Mode) time.Duration {
	if mode == degrade.Hang {
		return testSubmitBudget
	}
	return 0
}

// TestDegradeDPURestart: the offload engine restarts with a Submit in
// flight (the engine here is the Mem transport: nothing here opens a DPU). The Submit is a miss at once (Fail) or at the budget (Hang), its
// stage quarantined; the engine's connection is gone, so the peer delivers
// nothing and later Submits fail until it is reopened; no slot leaks.
func TestDegradeDPURestart(t *testing.T) {
	for _, mode := range []degrade.Mode{degrade.Fail, degrade.Hang} {
		t.Run(fmt.Sprint(mode), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				faults := &degrade.Registry{}
				reg := newReg(t, 4, 4096)
				a, b, err := transport.NewMemPair(0)
				if err != nil {
					t.Fatal(err)
				}
				tx := WithFaults(a, faults, testSubmitBudget)
				defer tx.Close()
				st := checkout(t, reg, "peer", 2, 0)
				fill(st, 0, 4096, 1)
				fill(st, 1, 100, 2)
				into := checkout(t, reg, "peer", 2, 0)
				got := receiveInto(b, into)
				synctest.Wait() // the peer waits, holding its stage

				disarm := faults.Arm(degrade.DPURestart, mode)
				start := time.Now()
				rc, err := tx.Submit(context.Background(), st)
				checkMiss(t, rc, err, degrade.DPURestart, time.Since(start), hangTime(mode))
				disarm()
				if err := <-got; !errors.Is(err, transport.ErrClosed) {
					t.Fatalf("peer: %v", err)
				}
				if faults.Hits(degrade.DPURestart) != 1 {
					t.Fatalf("hits %d", faults.Hits(degrade.DPURestart))
				}
				if stats := checkStats(t, reg); stats.Quarantined != 2 || stats.CheckedOut != 2 || stats.Held != 0 {
					t.Fatalf("after the restart: %+v", stats)
				}
				if err := reg.Release(st); !errors.Is(err, transport.ErrStageEnded) {
					t.Fatalf("the in-flight stage was not quarantined: %v", err)
				}
				if _, err := tx.Submit(context.Background(), into); !errors.Is(err, transport.ErrClosed) || !errors.Is(err, degrade.ErrMiss) {
					t.Fatalf("submit to a restarted engine: %v", err)
				}
				if err := reg.Release(into); err != nil {
					t.Fatal(err)
				}
				if n, err := reg.Reclaim(); n != 2 || err != nil {
					t.Fatalf("reclaim %d %v", n, err)
				}
			})
		})
	}
}

// TestDegradeGPUReset: the GPU's registrations are void with a Submit in
// flight. The Submit is a miss at once (Fail) or at the budget (Hang); the
// registry's epoch advances and every live stage is quarantined: the
// submitted one, one idle in its owner's hands, and one a peer's Receive
// holds, which then refuses the next frame instead of delivering into
// quarantined memory. Idle slots lose their binding; no slot leaks.
func TestDegradeGPUReset(t *testing.T) {
	for _, mode := range []degrade.Mode{degrade.Fail, degrade.Hang} {
		t.Run(fmt.Sprint(mode), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				faults := &degrade.Registry{}
				reg := newReg(t, 8, 4096)
				a, b, err := transport.NewMemPair(0)
				if err != nil {
					t.Fatal(err)
				}
				tx := WithFaults(a, faults, testSubmitBudget)
				defer tx.Close()
				if err := reg.Release(checkout(t, reg, "old", 1, 0)); err != nil { // an idle bound slot
					t.Fatal(err)
				}
				other := checkout(t, reg, "peer", 1, 0)
				into := checkout(t, reg, "peer", 2, 0)
				got := receiveInto(b, into)
				st := checkout(t, reg, "peer", 2, 0)
				fill(st, 0, 4096, 1)
				synctest.Wait() // the peer waits, holding its stage

				disarm := faults.Arm(degrade.GPUReset, mode)
				start := time.Now()
				rc, err := tx.Submit(context.Background(), st)
				checkMiss(t, rc, err, degrade.GPUReset, time.Since(start), hangTime(mode))
				disarm()
				if faults.Hits(degrade.GPUReset) != 1 {
					t.Fatalf("hits %d", faults.Hits(degrade.GPUReset))
				}
				stats := checkStats(t, reg)
				if stats.Epoch != 1 || stats.Quarantined != 5 || stats.CheckedOut != 0 || stats.IdleBound != 0 || stats.Held != 2 || stats.Invalidations != 1 {
					t.Fatalf("after the reset: %+v", stats)
				}
				for _, x := range []*transport.Stage{st, other} {
					if err := reg.Release(x); !errors.Is(err, transport.ErrStageEnded) {
						t.Fatalf("a stage outlived the reset: %v", err)
					}
				}
				if _, err := reg.Checkout("peer", 1, 0); !errors.Is(err, transport.ErrStaleEpoch) {
					t.Fatalf("checkout under the old epoch: %v", err)
				}

				// A frame sent after the reset finds the peer's stage ended:
				// nothing is copied, neither side reports delivery.
				fresh := checkout(t, reg, "peer", 2, 1)
				fill(fresh, 0, 10, 3)
				if rc, err := tx.Submit(context.Background(), fresh); !errors.Is(err, degrade.ErrMiss) || rc != (transport.Receipt{}) {
					t.Fatalf("submit to a reset peer stage: %+v %v", rc, err)
				}
				if err := <-got; !errors.Is(err, transport.ErrStageQuarantined) {
					t.Fatalf("peer: %v", err)
				}
				if err := reg.Release(fresh); err != nil {
					t.Fatal(err)
				}
				if n, err := reg.Reclaim(); n != 5 || err != nil {
					t.Fatalf("reclaim %d %v", n, err)
				}
			})
		})
	}
}

// A nil engine stays nil behind WithFaults.
func TestWithFaultsNil(t *testing.T) {
	if tr := WithFaults(nil, &degrade.Registry{}, time.Second); tr != nil {
		t.Fatalf("WithFaults(nil) = %v", tr)
	}
}
