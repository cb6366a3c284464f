package transport

import (
	"context"
	"time"

	"github.com/gpucache/gpucache/internal/degrade"
)

// DefaultSubmitBudget is Bounded's budget when it is given none: TCP's
// default IOTimeout, so wrapping a transport adds no deadline of its own.
const DefaultSubmitBudget = 30 * time.Second

// bounded is the Transport Bounded returns.
type bounded struct {
	t      Transport
	budget time.Duration
}

var _ Transport = (*bounded)(nil)

// Bounded returns t behind the degrade boundary: every Submit runs through
// degrade.Do, bounded by budget (or ctx's deadline, if sooner; budget <= 0
// means DefaultSubmitBudget), and every failure is a miss: the error wraps
// degrade.ErrMiss as well as the transport's own sentinel
// (ErrStageQuarantined, ErrBroken, ...), and the receipt is the zero
// Receipt, so nothing that failed is reported as delivered. A nil t gives
// a nil Transport, so a caller's `rdma != nil` stays honest
// (SubmitPreferringRDMA).
//
// Bounded checks no failpoint of its own. The link's fault (nic_flap) is
// TCP's (TCPConfig.Faults); the offload engine's faults (dpu_restart,
// gpu_reset) are on the DPU path, dpu.WithFaults (internal/dpu).
func Bounded(t Transport, budget time.Duration) Transport {
	if t == nil {
		return nil
	}
	if budget <= 0 {
		budget = DefaultSubmitBudget
	}
	return &bounded{t: t, budget: budget}
}

// Name returns the wrapped transport's name.
func (b *bounded) Name() string { return b.t.Name() }

// Close closes the wrapped transport.
func (b *bounded) Close() error { return b.t.Close() }

// Submit submits s through the wrapped transport at the degrade boundary.
// Ownership is t's: the stage stays with the caller unless the error wraps
// ErrStageQuarantined.
func (b *bounded) Submit(ctx context.Context, s *Stage) (Receipt, error) {
	rc, err := degrade.Do(ctx, nil, "", b.budget, func(ctx context.Context) (Receipt, error) {
		return b.t.Submit(ctx, s)
	})
	if err != nil {
		return Receipt{}, err
	}
	return rc, nil
}
