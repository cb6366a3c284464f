package transport

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gpucache/gpucache/internal/degrade"
)

// DefaultSubmitBudget is WithFaults' budget when it is given none: TCP's
// default IOTimeout, so wrapping a transport adds no deadline of its own.
const DefaultSubmitBudget = 30 * time.Second

// engineFaults are the failpoints WithFaults checks, in order. NICFlap is
// not among them: a link drops in the middle of a frame, so TCP checks it
// itself (TCPConfig.Faults).
var engineFaults = []degrade.Fault{degrade.DPURestart, degrade.GPUReset}

// faulty is the Transport WithFaults returns.
type faulty struct {
	t      Transport
	reg    *degrade.Registry
	budget time.Duration
}

var _ Transport = (*faulty)(nil)

// WithFaults returns t behind the degrade boundary: every Submit runs
// through degrade.DoAny, bounded by budget (or ctx's deadline, if sooner;
// budget <= 0 means DefaultSubmitBudget), and every failure is a miss:
// the error wraps degrade.ErrMiss as well as the transport's own sentinel
// (ErrStageQuarantined, ErrBroken, ...), and the receipt is the zero
// Receipt, so nothing that failed is reported as delivered. A nil t gives
// a nil Transport, so a caller's `rdma != nil` stays honest
// (SubmitPreferringRDMA).
//
// reg arms two failpoints, checked before each Submit reaches t, in this
// order. In Fail mode the fault happens at once; in Hang mode the engine
// first goes silent and the fault happens at the deadline.
//
//   - DPURestart: the offload engine (NIXL on a DPU; in this build
//     whatever Transport t is, since NIXL refuses to open) restarts with
//     the transfer in flight. The engine may have read part of the stage
//     and its registration died with it, so the stage is quarantined (it
//     has ended; Reclaim clears and unbinds its slots), and the engine's
//     connections died too, so t is closed: later Submits fail with
//     ErrClosed until the caller reopens it.
//   - GPUReset: the GPU's memory registrations are void. The stage's
//     Registry is invalidated (Registry.Invalidate): the epoch advances and
//     every live stage, this one and any other, is quarantined. t stays
//     open: the link is fine.
//
// reg is nil in production: nothing is injected.
func WithFaults(t Transport, reg *degrade.Registry, budget time.Duration) Transport {
	if t == nil {
		return nil
	}
	if budget <= 0 {
		budget = DefaultSubmitBudget
	}
	return &faulty{t: t, reg: reg, budget: budget}
}

// Name returns the wrapped transport's name.
func (f *faulty) Name() string { return f.t.Name() }

// Close closes the wrapped transport.
func (f *faulty) Close() error { return f.t.Close() }

// Submit submits s through the wrapped transport at the degrade boundary.
// Ownership is t's: the stage stays with the caller unless the error wraps
// ErrStageQuarantined.
func (f *faulty) Submit(ctx context.Context, s *Stage) (Receipt, error) {
	rc, err := degrade.DoAny(ctx, f.reg, engineFaults, f.budget, func(ctx context.Context) (Receipt, error) {
		return f.t.Submit(ctx, s)
	})
	if err == nil {
		return rc, nil
	}
	var m *degrade.Miss
	if errors.As(err, &m) {
		switch m.Fault {
		case degrade.DPURestart:
			_ = s.reg.Quarantine(s) // ErrStageEnded: already ended, nothing to do
			_ = f.t.Close()
			return Receipt{}, fmt.Errorf("gpucache/transport: %s submit: the engine restarted with the transfer in flight: %w: %w", f.t.Name(), ErrStageQuarantined, err)
		case degrade.GPUReset:
			_, _, _ = s.reg.Invalidate() // ErrEpochOverflow still quarantined every stage
			return Receipt{}, fmt.Errorf("gpucache/transport: %s submit: GPU reset: registrations invalidated: %w: %w", f.t.Name(), ErrStageQuarantined, err)
		}
	}
	return Receipt{}, err
}
