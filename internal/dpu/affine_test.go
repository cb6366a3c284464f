package dpu

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"go.uber.org/goleak"
)

// A mismatched reactor id is refused and nothing starts: no goroutine,
// the queue not attached, and the same queue can still be bound to its
// own reactor afterwards.
func TestAffineQueueRejectsMismatchedReactor(t *testing.T) {
	q := newQueue(t, QueueConfig{Reactor: 3, Slots: 2, SlotSize: 512, Depth: 2, Blocks: 2})
	aq, err := NewAffineQueue(q, 4)
	if !errors.Is(err, ErrReactorMismatch) || aq != nil {
		t.Fatalf("mismatched reactor: %v %v", aq, err)
	}
	goleak.VerifyNone(t)
	if attached(q) {
		t.Fatal("queue attached after a refusal")
	}
	if err := q.Submit(Command{Op: OpWrite, Slot: 0, Len: 1}); err != nil {
		t.Fatal(err)
	}
	if _, ok := q.Reap(); ok {
		t.Fatal("a refused reactor executed a command")
	}
	if _, err := NewAffineQueue(nil, 0); !errors.Is(err, ErrConfig) {
		t.Fatalf("nil queue: %v", err)
	}

	aq, err = NewAffineQueue(q, 3)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewAffineQueue(q, 3); !errors.Is(err, ErrAttached) {
		t.Fatalf("second reactor: %v", err)
	}
	c, err := q.WaitReap(context.Background())
	if err != nil || c.Label != NotRunHardware {
		t.Fatalf("the reactor ran the waiting command: %+v %v", c, err)
	}
	if err := aq.Close(); err != nil {
		t.Fatal(err)
	}
	<-aq.done
	if attached(q) {
		t.Fatal("attached after Close")
	}
	aq.Close() // idempotent
}

// On its reactor the queue round-trips bytes with no Process call from the
// caller: Submit, then WaitReap.
func TestAffineQueueRoundTrip(t *testing.T) {
	q := newQueue(t, QueueConfig{Slots: 2, SlotSize: 8192, Depth: 4, Blocks: 4})
	aq, err := NewAffineQueue(q, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer aq.Close()
	want := pattern(8192, 9)
	copy(q.Slot(0), want)
	ctx := context.Background()
	if err := q.Submit(Command{ID: 1, Op: OpWrite, Slot: 0, Block: 2, Len: len(want)}); err != nil {
		t.Fatal(err)
	}
	if c, err := q.WaitReap(ctx); err != nil || c.Err != nil || c.Label != NotRunHardware {
		t.Fatalf("write %+v %v", c, err)
	}
	if err := q.Submit(Command{ID: 2, Op: OpRead, Slot: 1, Block: 2}); err != nil {
		t.Fatal(err)
	}
	c, err := q.WaitReap(ctx)
	if err != nil || c.Err != nil || c.Label != NotRunHardware || !bytes.Equal(q.Slot(1)[:c.Len], want) {
		t.Fatalf("read %+v %v", c, err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := q.WaitReap(cctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("wait with nothing submitted: %v", err)
	}
}

// attached reports whether an AffineQueue runs q.
func attached(q *SimQueue) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.mu.attached
}
