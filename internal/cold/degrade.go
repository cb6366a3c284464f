package cold

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/gpucache/gpucache/internal/degrade"
)

// Degradable is implemented by a backend that names the degrade faults
// modelling its outages, so WithDegrade checks the right failpoints without
// knowing the backend's type: FS answers to storage_loss and nvme_timeout
// (a local disk gone, or an NVMe device that stops completing I/O), and
// s3store.Store to s3_unavailable and s3_slow. Mem names none: its tests
// inject faults with SetFault, and a test that wants a named fault on Mem
// wraps it in a type that names them.
type Degradable interface {
	// DegradeFaults returns the faults, in the order they are checked: the
	// refusal first, then the slowness.
	DegradeFaults() []degrade.Fault
}

// DegradeFaults returns the faults s names (Degradable), or nil.
func DegradeFaults(s Store) []degrade.Fault {
	if d, ok := s.(Degradable); ok {
		return d.DegradeFaults()
	}
	return nil
}

// DegradeFaults implements Degradable: a lost local store, or an NVMe
// device that stops completing I/O.
func (f *FS) DegradeFaults() []degrade.Fault {
	return []degrade.Fault{degrade.StorageLoss, degrade.NVMeTimeout}
}

// DefaultDegradeBudget is WithDegrade's budget when it is given none: the
// longest deadline any cold-tier caller sets on one store call (the sink's
// PutTimeout), so the decorator never cuts a call its caller lets run.
const DefaultDegradeBudget = 30 * time.Second

// degraded is the Store WithDegrade returns.
type degraded struct {
	s      Store
	reg    *degrade.Registry
	faults []degrade.Fault
	budget time.Duration
}

var (
	_ Store      = (*degraded)(nil)
	_ Degradable = (*degraded)(nil)
	_ Teer       = (*degraded)(nil)
)

// WithDegrade returns s with every operation run through degrade.DoAny, the
// degrade boundary of the cold tier:
//
//   - each operation is bounded by budget (or ctx's deadline, if sooner),
//     so a store that hangs costs at most budget before its caller sees an
//     error; budget <= 0 means DefaultDegradeBudget;
//   - a failure comes back as a *degrade.Miss (errors.Is degrade.ErrMiss)
//     that wraps the backend's error, so every sentinel of this package
//     still matches with errors.Is;
//   - the failpoints s names (DegradeFaults) are checked before each
//     operation. An armed fault does not reach the backend: in Fail mode
//     the operation fails at once, in Hang mode at the deadline, and either
//     way the error wraps ErrUnavailable and the *degrade.Miss naming the
//     fault. ErrUnavailable because that is what the real outage looks like
//     to every caller: refill counts it against the store's health and
//     misses, the sink retries the job later.
//
// reg is nil in production: nothing is injected, and the decorator only
// adds the deadline and the miss type.
func WithDegrade(s Store, reg *degrade.Registry, budget time.Duration) Store {
	if budget <= 0 {
		budget = DefaultDegradeBudget
	}
	return &degraded{s: s, reg: reg, faults: DegradeFaults(s), budget: budget}
}

// DegradeFaults implements Degradable: the wrapped store's faults.
func (d *degraded) DegradeFaults() []degrade.Fault { return d.faults }

// do runs one operation at the degrade boundary.
func do[T any](ctx context.Context, d *degraded, op, key string, fn func(context.Context) (T, error)) (T, error) {
	v, err := degrade.DoAny(ctx, d.reg, d.faults, d.budget, fn)
	var m *degrade.Miss
	if err != nil && errors.As(err, &m) && m.Fault != "" {
		return v, fmt.Errorf("cold %s %q: %w: %w", op, key, ErrUnavailable, err)
	}
	return v, err
}

func (d *degraded) Put(ctx context.Context, key string, body []byte, opts PutOptions) error {
	_, err := do(ctx, d, OpPut, key, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, d.s.Put(ctx, key, body, opts)
	})
	return err
}

func (d *degraded) Head(ctx context.Context, key string) (ObjectInfo, error) {
	return do(ctx, d, OpHead, key, func(ctx context.Context) (ObjectInfo, error) { return d.s.Head(ctx, key) })
}

func (d *degraded) RangeGet(ctx context.Context, key string, off int64, dst []byte) error {
	_, err := do(ctx, d, OpRangeGet, key, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, d.s.RangeGet(ctx, key, off, dst)
	})
	return err
}

// RangeGetTee implements Teer: the wrapped store's RangeGetTee (or its
// RangeGet and one Write) at the degrade boundary, so the decorator does
// not cost the refill its streaming checksum.
func (d *degraded) RangeGetTee(ctx context.Context, key string, off int64, dst []byte, w io.Writer) error {
	_, err := do(ctx, d, OpRangeGet, key, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, RangeGetTee(ctx, d.s, key, off, dst, w)
	})
	return err
}

func (d *degraded) Delete(ctx context.Context, key string) error {
	_, err := do(ctx, d, OpDelete, key, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, d.s.Delete(ctx, key)
	})
	return err
}

func (d *degraded) List(ctx context.Context, prefix string, fn func(ObjectInfo) error) error {
	_, err := do(ctx, d, OpList, prefix, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, d.s.List(ctx, prefix, fn)
	})
	return err
}
