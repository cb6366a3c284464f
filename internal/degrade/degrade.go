// Package degrade turns faults into clean misses. Every place that can fail
// on the way to a block (the cold store, the transport, the control plane)
// asks Do, which bounds the call by a deadline and turns any failure into a
// typed miss: no payload, nothing permanent, and a bounded time to the
// answer.
//
// Faults are injectable by name through a Registry (failpoints), so a test
// can make "s3_unavailable" or "control_plane_loss" happen on demand and see
// the miss. Production code passes a nil *Registry, which injects nothing
// and costs one nil check.
//
// Where each failpoint is checked, what the fault does there and the bound
// on its time to a miss are in docs/FAILURES.md: the cold store's faults in
// cold.WithDegrade (under cold/tier), dpu_restart and gpu_reset on the DPU
// path (dpu.WithFaults), nic_flap in the TCP transport (TCPConfig.Faults),
// and control_plane_loss in the daemon.
package degrade

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Fault names an injectable fault.
type Fault string

// The faults a node must survive as clean misses (the degrade contract in
// docs/CONTRACTS.md, "Where the contracts come from").
const (
	DPURestart       Fault = "dpu_restart"
	GPUReset         Fault = "gpu_reset"
	NICFlap          Fault = "nic_flap"
	StorageLoss      Fault = "storage_loss"
	NVMeTimeout      Fault = "nvme_timeout"
	ControlPlaneLoss Fault = "control_plane_loss"
	S3Slow           Fault = "s3_slow"
	S3Unavailable    Fault = "s3_unavailable"
	FlashIOError     Fault = "flash_io_error"
)

// Faults lists every named fault.
func Faults() []Fault {
	return []Fault{DPURestart, GPUReset, NICFlap, StorageLoss, NVMeTimeout, ControlPlaneLoss, S3Slow, S3Unavailable, FlashIOError}
}

// ErrMiss wraps every miss Do reports; errors.Is(err, ErrMiss) tells a
// degraded answer from a programming error.
var ErrMiss = errors.New("gpucache/degrade: miss")

// ErrInjected is the cause of a miss a failpoint caused.
var ErrInjected = errors.New("gpucache/degrade: injected fault")

// Miss is a degraded answer: which fault (or "" for a real failure), and why.
type Miss struct {
	Fault Fault
	Cause error
	After time.Duration // how long the call ran before it was abandoned
}

func (m *Miss) Error() string {
	if m.Fault != "" {
		return fmt.Sprintf("gpucache/degrade: miss after %v (%s): %v", m.After, m.Fault, m.Cause)
	}
	return fmt.Sprintf("gpucache/degrade: miss after %v: %v", m.After, m.Cause)
}

// Is makes errors.Is(err, ErrMiss) true.
func (m *Miss) Is(target error) bool { return target == ErrMiss }

// Unwrap returns the cause.
func (m *Miss) Unwrap() error { return m.Cause }

// Mode is what an armed failpoint does.
type Mode int

const (
	// Fail returns the failure at once.
	Fail Mode = iota
	// Hang blocks until the caller's deadline: a slow or silent peer.
	Hang
)

// String returns "fail" or "hang".
func (m Mode) String() string {
	switch m {
	case Fail:
		return "fail"
	case Hang:
		return "hang"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// Registry holds armed failpoints. The zero value and a nil *Registry are
// usable and inject nothing.
type Registry struct {
	mu    sync.Mutex
	armed map[Fault]Mode // guarded by mu
	hits  map[Fault]int  // guarded by mu
}

// Arm makes f happen, in mode m, at every check until the returned disarm
// function is called.
func (r *Registry) Arm(f Fault, m Mode) (disarm func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.armed == nil {
		r.armed, r.hits = make(map[Fault]Mode), make(map[Fault]int)
	}
	r.armed[f] = m
	return func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		delete(r.armed, f)
	}
}

// Hits reports how many times f fired.
func (r *Registry) Hits(f Fault) int {
	if r == nil {
		return 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.hits[f]
}

// Check reports whether f is armed, and in which mode, counting a hit when
// it is. Do checks around an operation; Check is for a site where the fault
// acts inside one (a link that drops in the middle of a frame, a reset that
// voids registrations), so the site itself carries the fault out. A nil
// *Registry or an empty f is never armed.
func (r *Registry) Check(f Fault) (Mode, bool) {
	if r == nil || f == "" {
		return 0, false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	m, ok := r.armed[f]
	if ok {
		r.hits[f]++
	}
	return m, ok
}

// Do runs fn under a deadline of at most budget (or ctx's, if sooner) and
// returns its result, or a *Miss (errors.Is ErrMiss) when fn fails, when the
// deadline passes, or when the failpoint f is armed. fn must honour its
// context: Do returns when fn does, and fn is given a context that ends at
// the deadline, so the time to a miss is bounded by budget plus however long
// fn takes to notice its context.
//
// An error of fn that already is a miss (a nested Do, or a site that
// carried out a fault with Check) is returned as it is, so the first *Miss
// errors.As finds is the one that names the fault.
func Do[T any](ctx context.Context, r *Registry, f Fault, budget time.Duration, fn func(context.Context) (T, error)) (T, error) {
	return DoAny(ctx, r, []Fault{f}, budget, fn)
}

// DoAny is Do for a site that several faults can hit: a read from S3 can be
// slow (S3Slow) or refused (S3Unavailable). The first armed fault of fs, in
// order, fires, and fn is not called.
func DoAny[T any](ctx context.Context, r *Registry, fs []Fault, budget time.Duration, fn func(context.Context) (T, error)) (T, error) {
	var zero T
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, budget)
	defer cancel()
	if r != nil {
		for _, f := range fs {
			m, ok := r.Check(f)
			if !ok {
				continue
			}
			if m == Hang {
				<-ctx.Done()
			}
			return zero, &Miss{Fault: f, Cause: ErrInjected, After: time.Since(start)}
		}
	}
	v, err := fn(ctx)
	if err == nil && ctx.Err() == nil {
		return v, nil
	}
	if err == nil {
		err = ctx.Err()
	}
	if errors.Is(err, ErrMiss) {
		return zero, err
	}
	return zero, &Miss{Cause: err, After: time.Since(start)}
}
