package dpu

import (
	"context"
	"fmt"
	"sync"
)

// Op is what a storage command does.
type Op uint8

const (
	// OpWrite copies a slab slot's first Len bytes to a block.
	OpWrite Op = iota + 1
	// OpRead copies a block's bytes into a slab slot.
	OpRead
)

// String returns "write" or "read".
func (o Op) String() string {
	switch o {
	case OpWrite:
		return "write"
	case OpRead:
		return "read"
	}
	return fmt.Sprintf("Op(%d)", uint8(o))
}

// ReactorID names the reactor (on a BlueField, an SPDK reactor pinned to
// an Arm core) a queue is affine to.
type ReactorID uint32

// Limits of a SimQueue. The slab and the simulated blocks together are
// bounded by MaxQueueBytes.
const (
	MaxSlots      = 4096
	MaxSlotSize   = 16 << 20
	MinSlotSize   = 512 // one NVMe sector
	MaxDepth      = 1024
	MaxBlocks     = 1 << 16
	MaxQueueBytes = 1 << 30
)

// QueueConfig sizes a SimQueue.
type QueueConfig struct {
	// Reactor is the reactor the queue is affine to. Default 0.
	Reactor ReactorID
	// Slots is the number of DRAM slab slots: 1..MaxSlots. Default 16.
	Slots int
	// SlotSize is the bytes of one slot and of one simulated block: a
	// multiple of MinSlotSize, at most MaxSlotSize. Default 64KiB.
	SlotSize int
	// Depth bounds the commands submitted and not yet reaped, both rings
	// together: 1..MaxDepth. Default 32.
	Depth int
	// Blocks is the simulated namespace's size in blocks of SlotSize:
	// 1..MaxBlocks. Default 64. Block memory is allocated on first write.
	Blocks int
}

func (c QueueConfig) withDefaults() (QueueConfig, error) {
	if c.Slots == 0 {
		c.Slots = 16
	}
	if c.SlotSize == 0 {
		c.SlotSize = 64 << 10
	}
	if c.Depth == 0 {
		c.Depth = 32
	}
	if c.Blocks == 0 {
		c.Blocks = 64
	}
	switch {
	case c.Slots < 1 || c.Slots > MaxSlots:
		return c, fmt.Errorf("%w: slots %d, want 1..%d", ErrConfig, c.Slots, MaxSlots)
	case c.SlotSize < MinSlotSize || c.SlotSize > MaxSlotSize || c.SlotSize%MinSlotSize != 0:
		return c, fmt.Errorf("%w: slot size %d, want a multiple of %d up to %d", ErrConfig, c.SlotSize, MinSlotSize, MaxSlotSize)
	case c.Depth < 1 || c.Depth > MaxDepth:
		return c, fmt.Errorf("%w: depth %d, want 1..%d", ErrConfig, c.Depth, MaxDepth)
	case c.Blocks < 1 || c.Blocks > MaxBlocks:
		return c, fmt.Errorf("%w: blocks %d, want 1..%d", ErrConfig, c.Blocks, MaxBlocks)
	case int64(c.Slots+c.Blocks)*int64(c.SlotSize) > MaxQueueBytes:
		return c, fmt.Errorf("%w: (slots + blocks) x slot size is over %d bytes", ErrConfig, MaxQueueBytes)
	}
	return c, nil
}

// Command is one storage command. ID is the caller's tag, returned in the
// completion.
type Command struct {
	ID    uint64
	Op    Op
	Slot  int    // slab slot: 0..Slots-1
	Block uint64 // simulated block: 0..Blocks-1
	Len   int    // OpWrite: bytes to write, 0..SlotSize; OpRead: ignored
}

// Completion is the outcome of one Command. Label is always NotRunHardware
// and Simulated always true: no device ran it.
type Completion struct {
	Command
	// Len is the bytes moved: written, or read into the slot.
	Len       int
	Err       error
	Label     string
	Simulated bool
}

// SimQueue is the storage queue of the offload hypothesis, simulated on
// host memory: a DRAM slab of Slots slots, a submit ring and a complete
// ring, and a namespace of Blocks blocks standing for the NVMe device. It
// starts no goroutine: Process executes what was submitted, called by the
// AffineQueue the queue is bound to, or directly.
//
// Ownership: a slot named by a submitted command belongs to the queue
// until its completion is reaped; the caller must not touch Slot(i) in
// that time, and a second command naming it is refused (ErrSlotBusy).
type SimQueue struct {
	cfg  QueueConfig
	slab []byte

	// wake is signalled (capacity 1) when a command is submitted; done
	// when a completion is ready.
	wake, done chan struct{}

	mu struct {
		sync.Mutex
		submit   ring[Command]    // guarded by mu
		complete ring[Completion] // guarded by mu
		busy     []bool           // per slot, guarded by mu
		blocks   map[uint64][]byte
		attached bool // an AffineQueue runs Process
		closed   bool
	}
}

// NewSimQueue returns an empty queue.
func NewSimQueue(cfg QueueConfig) (*SimQueue, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	q := &SimQueue{cfg: cfg, slab: make([]byte, cfg.Slots*cfg.SlotSize),
		wake: make(chan struct{}, 1), done: make(chan struct{}, 1)}
	q.mu.submit = newRing[Command](cfg.Depth)
	q.mu.complete = newRing[Completion](cfg.Depth)
	q.mu.busy = make([]bool, cfg.Slots)
	q.mu.blocks = make(map[uint64][]byte)
	return q, nil
}

// Config returns the queue's settings, defaults applied.
func (q *SimQueue) Config() QueueConfig { return q.cfg }

// Reactor is the reactor the queue is affine to.
func (q *SimQueue) Reactor() ReactorID { return q.cfg.Reactor }

// Slot returns slab slot i's whole window (see the ownership rule).
func (q *SimQueue) Slot(i int) []byte {
	return q.slab[i*q.cfg.SlotSize : (i+1)*q.cfg.SlotSize : (i+1)*q.cfg.SlotSize]
}

// Submit puts c on the submit ring. It does not block: with Depth
// commands not yet reaped it returns ErrQueueFull.
func (q *SimQueue) Submit(c Command) error {
	if c.Op != OpWrite && c.Op != OpRead || c.Slot < 0 || c.Slot >= q.cfg.Slots ||
		c.Block >= uint64(q.cfg.Blocks) || c.Op == OpWrite && (c.Len < 0 || c.Len > q.cfg.SlotSize) {
		return fmt.Errorf("%w: %s slot %d block %d len %d", ErrBadCommand, c.Op, c.Slot, c.Block, c.Len)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	switch {
	case q.mu.closed:
		return ErrClosed
	case q.mu.submit.len()+q.mu.complete.len() >= q.cfg.Depth:
		return ErrQueueFull
	case q.mu.busy[c.Slot]:
		return fmt.Errorf("%w: slot %d", ErrSlotBusy, c.Slot)
	}
	q.mu.busy[c.Slot] = true
	q.mu.submit.push(c)
	signal(q.wake)
	return nil
}

// Process executes every submitted command, in order, and moves each to
// the complete ring. It returns how many it executed.
func (q *SimQueue) Process() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := 0
	for q.mu.submit.len() > 0 {
		c := q.mu.submit.pop()
		q.mu.complete.push(q.execLocked(c))
		n++
	}
	if n > 0 {
		signal(q.done)
	}
	return n
}

func (q *SimQueue) execLocked(c Command) Completion {
	out := Completion{Command: c, Label: NotRunHardware, Simulated: true}
	slot := q.Slot(c.Slot)
	switch c.Op {
	case OpWrite:
		b := q.mu.blocks[c.Block]
		if b == nil {
			b = make([]byte, 0, q.cfg.SlotSize)
		}
		q.mu.blocks[c.Block] = append(b[:0], slot[:c.Len]...)
		out.Len = c.Len
	case OpRead:
		b, ok := q.mu.blocks[c.Block]
		if !ok {
			out.Err = fmt.Errorf("%w: block %d", ErrUnwritten, c.Block)
			break
		}
		out.Len = copy(slot, b)
	}
	return out
}

// Reap takes the oldest completion, if any, and gives its slot back to the
// caller.
func (q *SimQueue) Reap() (Completion, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.mu.complete.len() == 0 {
		return Completion{}, false
	}
	c := q.mu.complete.pop()
	q.mu.busy[c.Slot] = false
	if q.mu.complete.len() > 0 {
		signal(q.done)
	}
	return c, true
}

// WaitReap is Reap that waits for a completion until ctx ends.
func (q *SimQueue) WaitReap(ctx context.Context) (Completion, error) {
	for {
		if c, ok := q.Reap(); ok {
			return c, nil
		}
		select {
		case <-q.done:
		case <-ctx.Done():
			return Completion{}, ctx.Err()
		}
	}
}

// Close refuses further Submits. Completions already made can be reaped.
func (q *SimQueue) Close() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.mu.closed = true
	return nil
}

// signal makes a capacity-1 channel ready without blocking.
func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// ring is a bounded FIFO.
type ring[T any] struct {
	buf        []T
	head, size int
}

func newRing[T any](n int) ring[T] { return ring[T]{buf: make([]T, n)} }

func (r *ring[T]) len() int { return r.size }

func (r *ring[T]) push(v T) {
	r.buf[(r.head+r.size)%len(r.buf)] = v
	r.size++
}

func (r *ring[T]) pop() T {
	var zero T
	v := r.buf[r.head]
	r.buf[r.head] = zero
	r.head = (r.head + 1) % len(r.buf)
	r.size--
	return v
}
