package dpu

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
)

// AgentConfig configures an ArmAgent.
type AgentConfig struct {
	// Queue sizes the storage queue the agent runs in simulation.
	Queue QueueConfig
	// Devices names what OpenDOCA and OpenSPDK probe (dpu_bf3 build).
	Devices OpenConfig
	// Logger receives the refusals. Default: discard.
	Logger *slog.Logger
}

// Status is what an agent reports about itself.
type Status struct {
	// OffloadActive is false in every build: no storage command ever ran
	// on a DPU. Printed as offload_active.
	OffloadActive bool
	// Hardware is NotRunHardware.
	Hardware string
	// Simulated reports whether the storage queue runs in simulation.
	Simulated bool
	// Refusals are the errors of the opens Start tried (DOCA, SPDK).
	Refusals []error
}

// ArmAgent is the agent that would run on a BlueField's Arm cores and own
// the storage queue. In every build it tries DOCA and SPDK, records their
// refusals, and runs the queue in simulation on the host, with
// offload_active false.
type ArmAgent struct {
	cfg AgentConfig

	mu struct {
		sync.Mutex
		started  bool
		closed   bool
		refusals []error      // guarded by mu
		queue    *SimQueue    // guarded by mu
		reactor  *AffineQueue // guarded by mu
		// offloadActive is never set to true: nothing here can offload.
		offloadActive bool
	}
}

// NewArmAgent checks cfg and returns an agent that has not started.
func NewArmAgent(cfg AgentConfig) (*ArmAgent, error) {
	if _, err := cfg.Queue.withDefaults(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &ArmAgent{cfg: cfg}, nil
}

// Start tries to open DOCA and SPDK (both refuse: ErrNotRunHardware),
// logs each refusal, then runs the storage queue in simulation on its
// reactor. It leaves offload_active false and returns nil: the agent runs,
// offloading nothing. A second Start returns an error and changes nothing.
func (a *ArmAgent) Start(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case a.mu.closed:
		return ErrClosed
	case a.mu.started:
		return errors.New("gpucache/dpu: agent already started")
	}
	var refusals []error
	if _, err := OpenDOCA(a.cfg.Devices); err != nil {
		refusals = append(refusals, err)
	}
	if _, err := OpenSPDK(a.cfg.Devices); err != nil {
		refusals = append(refusals, err)
	}
	for _, err := range refusals {
		a.cfg.Logger.Warn("dpu offload refused; the storage queue runs in simulation", "hardware", NotRunHardware, "err", err)
	}
	q, err := NewSimQueue(a.cfg.Queue)
	if err != nil {
		return err
	}
	r, err := NewAffineQueue(q, q.Reactor())
	if err != nil {
		return fmt.Errorf("gpucache/dpu: agent reactor: %w", err)
	}
	a.mu.started, a.mu.refusals, a.mu.queue, a.mu.reactor = true, refusals, q, r
	return nil
}

// Queue is the storage queue Start made, or nil before Start.
func (a *ArmAgent) Queue() *SimQueue {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.mu.queue
}

// Status reports the agent's state: OffloadActive false, Hardware
// NOT_RUN_HARDWARE.
func (a *ArmAgent) Status() Status {
	a.mu.Lock()
	defer a.mu.Unlock()
	return Status{OffloadActive: a.mu.offloadActive, Hardware: NotRunHardware,
		Simulated: a.mu.queue != nil, Refusals: append([]error(nil), a.mu.refusals...)}
}

// Close stops the reactor and closes the queue. Idempotent.
func (a *ArmAgent) Close() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.mu.closed {
		return nil
	}
	a.mu.closed = true
	if a.mu.reactor != nil {
		_ = a.mu.reactor.Close()
		_ = a.mu.queue.Close()
	}
	return nil
}
