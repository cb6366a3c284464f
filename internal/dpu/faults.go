package dpu

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gpucache/gpucache/internal/degrade"
	"github.com/gpucache/gpucache/internal/transport"
)

// engineFaults are the failpoints WithFaults checks, in order.
var engineFaults = []degrade.Fault{degrade.DPURestart, degrade.GPUReset}

// faulty is the Transport WithFaults returns.
type faulty struct {
	t      transport.Transport
	reg    *degrade.Registry
	budget time.Duration
}

var _ transport.Transport = (*faulty)(nil)

// WithFaults returns t, the offload engine's transport, behind the degrade
// boundary with the engine's two failpoints: every Submit runs through
// degrade.DoAny, bounded by budget (or ctx's deadline, if sooner; budget <=
// 0 means transport.DefaultSubmitBudget), and every failure is a miss: the
// error wraps degrade.ErrMiss as well as the transport's own sentinel, and
// the receipt is the zero Receipt. A nil t gives a nil Transport.
//
// reg arms the failpoints, checked before each Submit reaches t, in this
// order. In Fail mode the fault happens at once; in Hang mode the engine
// first goes silent and the fault happens at the deadline.
//
//   - DPURestart: the offload engine (on a DPU; in this build whatever
//     Transport t is, since nothing here opens a DPU) restarts with the
//     transfer in flight. The engine may have read part of the stage and
//     its registration died with it, so the stage is quarantined (it has
//     ended; Reclaim clears and unbinds its slots), and the engine's
//     connections died too, so t is closed: later Submits fail with
//     transport.ErrClosed until the caller reopens it.
//   - GPUReset: the GPU's memory registrations are void. The stage's
//     registry is invalidated (transport.Registry.Invalidate): the epoch
//     advances and every live stage, this one and any other, is
//     quarantined. t stays open: the link is fine.
//
// reg is nil in production: nothing is injected.
func WithFaults(t transport.Transport, reg *degrade.Registry, budget time.Duration) transport.Transport {
	if t == nil {
		return nil
	}
	if budget <= 0 {
		budget = transport.DefaultSubmitBudget
	}
	return &faulty{t: t, reg: reg, budget: budget}
}

// Name returns the wrapped transport's name.
func (f *faulty) Name() string { return f.t.Name() }

// Close closes the wrapped transport.
func (f *faulty) Close() error { return f.t.Close() }

// Submit submits s through the wrapped transport at the degrade boundary.
// Ownership is t's: the stage stays with the caller unless the error wraps
// transport.ErrStageQuarantined.
func (f *faulty) Submit(ctx context.Context, s *transport.Stage) (transport.Receipt, error) {
	rc, err := degrade.DoAny(ctx, f.reg, engineFaults, f.budget, func(ctx context.Context) (transport.Receipt, error) {
		return f.t.Submit(ctx, s)
	})
	if err == nil {
		return rc, nil
	}
	var m *degrade.Miss
	if errors.As(err, &m) {
		switch m.Fault {
		case degrade.DPURestart:
			_ = s.Registry().Quarantine(s) // ErrStageEnded: already ended, nothing to do
			_ = f.t.Close()
			return transport.Receipt{}, fmt.Errorf("gpucache/dpu: %s submit: the engine restarted with the transfer in flight: %w: %w", f.t.Name(), transport.ErrStageQuarantined, err)
		case degrade.GPUReset:
			_, _, _ = s.Registry().Invalidate() // ErrEpochOverflow still quarantined every stage
			return transport.Receipt{}, fmt.Errorf("gpucache/dpu: %s submit: GPU reset: registrations invalidated: %w: %w", f.t.Name(), transport.ErrStageQuarantined, err)
		}
	}
	return transport.Receipt{}, err
}
