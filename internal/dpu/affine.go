package dpu

import (
	"fmt"
	"sync"
)

// AffineQueue runs one SimQueue on its reactor: a goroutine that executes
// commands as they are submitted. On a BlueField the reactor would be an
// SPDK reactor pinned to an Arm core; here it is a goroutine, pinned to
// nothing, and no SPDK runs.
type AffineQueue struct {
	q        *SimQueue
	stop     chan struct{}
	done     chan struct{}
	stopOnce sync.Once
}

// NewAffineQueue binds q to reactor and starts running it. A reactor other
// than q's own (QueueConfig.Reactor) is refused with ErrReactorMismatch,
// and so is a queue that already runs (ErrAttached) or is closed: in each
// case nothing is started and q is unchanged.
func NewAffineQueue(q *SimQueue, reactor ReactorID) (*AffineQueue, error) {
	if q == nil {
		return nil, fmt.Errorf("%w: nil queue", ErrConfig)
	}
	if reactor != q.Reactor() {
		return nil, fmt.Errorf("%w: queue is affine to reactor %d, asked to run on %d; nothing started", ErrReactorMismatch, q.Reactor(), reactor)
	}
	q.mu.Lock()
	switch {
	case q.mu.closed:
		q.mu.Unlock()
		return nil, ErrClosed
	case q.mu.attached:
		q.mu.Unlock()
		return nil, ErrAttached
	}
	q.mu.attached = true
	q.mu.Unlock()
	a := &AffineQueue{q: q, stop: make(chan struct{}), done: make(chan struct{})}
	go a.run()
	return a, nil
}

func (a *AffineQueue) run() {
	defer close(a.done)
	for {
		select {
		case <-a.q.wake:
			a.q.Process()
		case <-a.stop:
			a.q.Process() // what was submitted before Close completes
			return
		}
	}
}

// Close stops the reactor after it executed what was submitted, waits for
// it, and detaches the queue. Idempotent.
func (a *AffineQueue) Close() error {
	a.stopOnce.Do(func() {
		close(a.stop)
		<-a.done
		a.q.mu.Lock()
		a.q.mu.attached = false
		a.q.mu.Unlock()
	})
	return nil
}
