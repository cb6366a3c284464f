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
// This is the groundwork of issue 6: the registry, the fault names and the
// bounded-miss decision. Wiring each failpoint into its code path is part of
// that issue.
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

// The faults of issue 6 (and the seed's V3 degrade hooks).
const (
	DPURestart       Fault = "dpu_restart"
	GPUReset         Fault = "gpu_reset"
	NICFlap          Fault = "nic_flap"
	StorageLoss      Fault = "storage_loss"
	NVMeTimeout      Fault = "nvme_timeout"
	ControlPlaneLoss Fault = "control_plane_loss"
	S3Slow           Fault = "s3_slow"
	S3Unavailable    Fault = "s3_unavailable"
)

// Faults lists every named fault.
func Faults() []Fault {
	return []Fault{DPURestart, GPUReset, NICFlap, StorageLoss, NVMeTimeout, ControlPlaneLoss, S3Slow, S3Unavailable}
}

// ErrMiss wraps every miss Do reports; errors.Is(err, ErrMiss) tells a
// degraded answer from a programming error.
var ErrMiss = errors.New("gpucache/degrade: miss")

// ErrInjected is the cause of a miss a failpoint caused.
var ErrInjected = errors.New("injected fault")

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

// check returns the mode of f if armed.
func (r *Registry) check(f Fault) (Mode, bool) {
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
func Do[T any](ctx context.Context, r *Registry, f Fault, budget time.Duration, fn func(context.Context) (T, error)) (T, error) {
	var zero T
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, budget)
	defer cancel()
	if m, ok := r.check(f); ok {
		if m == Hang {
			<-ctx.Done()
		}
		return zero, &Miss{Fault: f, Cause: ErrInjected, After: time.Since(start)}
	}
	v, err := fn(ctx)
	if err == nil && ctx.Err() == nil {
		return v, nil
	}
	if err == nil {
		err = ctx.Err()
	}
	return zero, &Miss{Cause: err, After: time.Since(start)}
}
