package dpu

import (
	"bytes"
	"errors"
	"testing"
)

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i*7)
	}
	return b
}

func newQueue(t *testing.T, cfg QueueConfig) *SimQueue {
	t.Helper()
	q, err := NewSimQueue(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	return q
}

// Bytes written from one slab slot to a block come back, equal, into
// another slot, through the submit and complete rings; every completion is
// labelled NOT_RUN_HARDWARE and simulated.
func TestSimQueueRoundTrip(t *testing.T) {
	q := newQueue(t, QueueConfig{Slots: 4, SlotSize: 4096, Depth: 4, Blocks: 8})
	want := pattern(3000, 5)
	copy(q.Slot(0), want)
	if err := q.Submit(Command{ID: 1, Op: OpWrite, Slot: 0, Block: 6, Len: len(want)}); err != nil {
		t.Fatal(err)
	}
	if _, ok := q.Reap(); ok {
		t.Fatal("a completion before Process")
	}
	if n := q.Process(); n != 1 {
		t.Fatalf("processed %d", n)
	}
	c, ok := q.Reap()
	if !ok || c.ID != 1 || c.Err != nil || c.Len != len(want) || c.Label != NotRunHardware || !c.Simulated {
		t.Fatalf("write completion %+v %v", c, ok)
	}
	if err := q.Submit(Command{ID: 2, Op: OpRead, Slot: 3, Block: 6}); err != nil {
		t.Fatal(err)
	}
	q.Process()
	c, ok = q.Reap()
	if !ok || c.ID != 2 || c.Err != nil || c.Len != len(want) || c.Label != NotRunHardware || !c.Simulated {
		t.Fatalf("read completion %+v %v", c, ok)
	}
	if !bytes.Equal(q.Slot(3)[:c.Len], want) {
		t.Fatal("bytes read back differ from bytes written")
	}
	// A block nothing wrote is an error completion, still labelled.
	if err := q.Submit(Command{ID: 3, Op: OpRead, Slot: 1, Block: 7}); err != nil {
		t.Fatal(err)
	}
	q.Process()
	if c, _ := q.Reap(); !errors.Is(c.Err, ErrUnwritten) || c.Label != NotRunHardware {
		t.Fatalf("unwritten read %+v", c)
	}
}

// The rings are bounded: Depth commands not yet reaped fill the queue, a
// slot in flight cannot be named twice, and bad commands and settings are
// refused with clear errors.
func TestSimQueueBounds(t *testing.T) {
	q := newQueue(t, QueueConfig{Slots: 4, SlotSize: 512, Depth: 2, Blocks: 2})
	if err := q.Submit(Command{Op: OpWrite, Slot: 0, Len: 1}); err != nil {
		t.Fatal(err)
	}
	if err := q.Submit(Command{Op: OpWrite, Slot: 0, Block: 1, Len: 1}); !errors.Is(err, ErrSlotBusy) {
		t.Fatalf("busy slot: %v", err)
	}
	if err := q.Submit(Command{Op: OpWrite, Slot: 1, Block: 1, Len: 1}); err != nil {
		t.Fatal(err)
	}
	q.Process() // completed but not reaped: still counts against Depth
	if err := q.Submit(Command{Op: OpWrite, Slot: 2, Len: 1}); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("full queue: %v", err)
	}
	if _, ok := q.Reap(); !ok {
		t.Fatal("no completion")
	}
	if err := q.Submit(Command{Op: OpWrite, Slot: 0, Len: 1}); err != nil {
		t.Fatalf("slot reaped, room made: %v", err)
	}
	for _, c := range []Command{
		{Op: 9, Slot: 2}, {Op: OpWrite, Slot: 4}, {Op: OpWrite, Slot: -1}, {Op: OpRead, Slot: 2, Block: 2},
		{Op: OpWrite, Slot: 2, Len: 513}, {Op: OpWrite, Slot: 2, Len: -1},
	} {
		if err := q.Submit(c); !errors.Is(err, ErrBadCommand) {
			t.Fatalf("%+v: %v", c, err)
		}
	}
	for _, cfg := range []QueueConfig{
		{Slots: -1}, {Slots: MaxSlots + 1}, {SlotSize: 100}, {SlotSize: MaxSlotSize + MinSlotSize}, {Depth: MaxDepth + 1},
		{Blocks: MaxBlocks + 1}, {Slots: MaxSlots, SlotSize: MaxSlotSize},
	} {
		if _, err := NewSimQueue(cfg); !errors.Is(err, ErrConfig) {
			t.Fatalf("%+v: %v", cfg, err)
		}
	}
	q.Close()
	if err := q.Submit(Command{Op: OpWrite, Slot: 3}); !errors.Is(err, ErrClosed) {
		t.Fatalf("closed: %v", err)
	}
	if _, err := NewAffineQueue(q, 0); !errors.Is(err, ErrClosed) {
		t.Fatalf("affine on closed: %v", err)
	}
}
