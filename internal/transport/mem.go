package transport

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// memFrame is one Submit handed to the peer: references to the sender's
// slot memory, valid until the receiver replies.
type memFrame struct {
	epoch   Epoch
	payload [][]byte
	reply   chan error
}

// memPipe is what both ends of a Mem pair share.
type memPipe struct {
	closed chan struct{}
	once   sync.Once
}

// Mem is an in-process Transport for tests: one end of a pair made by
// NewMemPair. Submit hands the slot slices to the peer's Receive, which
// copies them into its stage (the one host copy) and replies; Submit
// returns after the reply, so it, like TCP, no longer touches slot memory
// when it returns. A copy cannot fail part-way, so Mem never quarantines.
type Mem struct {
	pipe  *memPipe
	turns chan struct{} // in-flight semaphore
	out   chan memFrame // to the peer
	in    chan memFrame // from the peer
}

var _ Transport = (*Mem)(nil)

// NewMemPair returns two connected ends. maxInFlight bounds each end's
// admitted Submits, as TCPConfig.MaxInFlight does (0 means 4).
func NewMemPair(maxInFlight int) (*Mem, *Mem, error) {
	if maxInFlight == 0 {
		maxInFlight = 4
	}
	if maxInFlight < 1 || maxInFlight > 1024 {
		return nil, nil, fmt.Errorf("%w: maxInFlight %d, want 1..1024", ErrConfig, maxInFlight)
	}
	p := &memPipe{closed: make(chan struct{})}
	ab, ba := make(chan memFrame), make(chan memFrame)
	a := &Mem{pipe: p, turns: make(chan struct{}, maxInFlight), out: ab, in: ba}
	b := &Mem{pipe: p, turns: make(chan struct{}, maxInFlight), out: ba, in: ab}
	return a, b, nil
}

// Name returns "mem".
func (m *Mem) Name() string { return "mem" }

// Close closes both ends. Idempotent.
func (m *Mem) Close() error {
	m.pipe.once.Do(func() { close(m.pipe.closed) })
	return nil
}

// Submit hands s to the peer's Receive and waits for it to copy.
func (m *Mem) Submit(ctx context.Context, s *Stage) (Receipt, error) {
	rc := Receipt{Transport: m.Name(), Epoch: s.epoch}
	select {
	case m.turns <- struct{}{}:
	case <-ctx.Done():
		return rc, ctx.Err()
	case <-m.pipe.closed:
		return rc, ErrClosed
	}
	defer func() { <-m.turns }()
	if err := s.reg.holdStage(s); err != nil {
		return rc, err
	}
	defer s.reg.unholdStage(s)
	f := memFrame{epoch: s.epoch, payload: make([][]byte, len(s.ids)), reply: make(chan error, 1)}
	for i := range s.ids {
		f.payload[i] = s.mem[i][:s.lens[i]]
	}
	select {
	case m.out <- f:
	case <-ctx.Done():
		return rc, ctx.Err()
	case <-m.pipe.closed:
		return rc, ErrClosed
	}
	// The receiver holds references to slot memory until it replies, and
	// it always replies without blocking: wait whatever ctx says.
	if err := <-f.reply; err != nil {
		return rc, err
	}
	if !s.reg.live(s) {
		return rc, fmt.Errorf("gpucache/transport: mem submit: %w: the stage was invalidated during the transfer", ErrStageQuarantined)
	}
	rc.Bytes = s.Bytes()
	rc.HostCopies = 1
	return rc, nil
}

// Receive takes the peer's next Submit and copies it into into, as
// TCP.Receive does. A frame that does not fit fails both ends with
// ErrTooLarge and copies nothing.
func (m *Mem) Receive(ctx context.Context, into *Stage) (Receipt, error) {
	rc := Receipt{Transport: m.Name()}
	if err := into.reg.holdStage(into); err != nil {
		return rc, err
	}
	defer into.reg.unholdStage(into)
	var f memFrame
	select {
	case f = <-m.in:
	case <-ctx.Done():
		return rc, ctx.Err()
	case <-m.pipe.closed:
		return rc, ErrClosed
	}
	if !into.reg.live(into) {
		// An Invalidate (a GPU reset) ended the stage while it waited:
		// copy nothing, and tell the sender nothing was delivered.
		f.reply <- errPeerStageEnded
		return rc, fmt.Errorf("gpucache/transport: mem receive: %w: the stage was invalidated while it waited", ErrStageQuarantined)
	}
	if err := fits(f.payload, into); err != nil {
		f.reply <- err
		return rc, err
	}
	for i := range into.ids {
		l := 0
		if i < len(f.payload) {
			l = copy(into.mem[i], f.payload[i])
		}
		into.lens[i] = l
	}
	f.reply <- nil
	rc.Epoch = f.epoch
	rc.Bytes = into.Bytes()
	rc.HostCopies = 1
	return rc, nil
}

// errPeerStageEnded is what a Mem sender hears when the receiving stage
// ended before the copy: nothing was delivered, and the sender's own stage
// is untouched.
var errPeerStageEnded = errors.New("gpucache/transport: mem: the receiving stage ended before the copy; nothing delivered")

func fits(payload [][]byte, into *Stage) error {
	if len(payload) > len(into.ids) {
		return fmt.Errorf("%w: %d slots into a stage of %d", ErrTooLarge, len(payload), len(into.ids))
	}
	for i, p := range payload {
		if len(p) > len(into.mem[i]) {
			return fmt.Errorf("%w: slot %d of %d bytes into %d", ErrTooLarge, i, len(p), len(into.mem[i]))
		}
	}
	return nil
}
