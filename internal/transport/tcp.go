package transport

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"github.com/gpucache/gpucache/internal/degrade"
)

// Frame constants; doc.go has the layout.
const (
	frameStage   = 0x53
	frameVersion = 1
	frameFixed   = 16
	frameMax     = frameFixed + 4*MaxStageSlots
)

// TCPConfig configures a TCP transport. A zero field takes its default.
type TCPConfig struct {
	// MaxInFlight bounds the Submits admitted at once (one writing, the rest
	// queued for the connection). The next Submit blocks until one finishes
	// or its ctx ends. Default 4.
	MaxInFlight int
	// IOTimeout is the deadline of one Submit's write or one Receive's read
	// when ctx has no earlier deadline. Default 30s.
	IOTimeout time.Duration
	// Faults arms the NICFlap failpoint, for tests: checked once per
	// Submit, just before the frame goes out (see flap). Nil (production)
	// injects nothing.
	Faults *degrade.Registry
}

func (c TCPConfig) withDefaults() (TCPConfig, error) {
	if c.MaxInFlight == 0 {
		c.MaxInFlight = 4
	}
	if c.IOTimeout == 0 {
		c.IOTimeout = 30 * time.Second
	}
	if c.MaxInFlight < 1 || c.MaxInFlight > 1024 {
		return c, fmt.Errorf("%w: MaxInFlight %d, want 1..1024", ErrConfig, c.MaxInFlight)
	}
	if c.IOTimeout < 0 {
		return c, fmt.Errorf("%w: IOTimeout %v is negative", ErrConfig, c.IOTimeout)
	}
	return c, nil
}

// sendTurn is one in-flight token: the semaphore hands out the buffers a
// Submit needs, so the write path allocates nothing.
type sendTurn struct {
	hdr  [frameMax]byte
	bufs [][]byte    // header + one slice per slot, rebuilt per Submit
	nb   net.Buffers // consumed by WriteTo
}

// tcpHooks let tests observe the write path at fixed points. Set before
// first use; nil hooks are skipped.
type tcpHooks struct {
	waiting     func()            // Submit found no free turn and is about to block
	admitted    func()            // Submit took a turn
	beforeWrite func(net.Buffers) // the buffers about to be written
}

// TCP is the TCP transport. Submit writes one frame, header and slot bytes,
// with one vectored write (writev) straight from slot memory; Receive reads
// a frame straight into the slots of a Stage. Writes are serialized (a
// frame is never interleaved with another); so are reads.
type TCP struct {
	conn       net.Conn
	cfg        TCPConfig
	hostCopies int
	hooks      tcpHooks

	turns  chan *sendTurn // the in-flight semaphore; holds MaxInFlight turns
	wlock  chan struct{}  // capacity 1: the write side, ctx-aware
	rlock  chan struct{}  // capacity 1: the read side, ctx-aware
	rhdr   [frameMax]byte // guarded by rlock
	closed chan struct{}
	once   sync.Once

	mu struct {
		sync.Mutex
		broken error // first I/O failure that left the stream unframed
	}
}

var _ Transport = (*TCP)(nil)

// NewTCP wraps conn, which the transport then owns and closes. conn should
// be a *net.TCPConn: that is the path whose one host copy the receipt
// claims; any other conn gets HostCopiesUnknown.
func NewTCP(conn net.Conn, cfg TCPConfig) (*TCP, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	t := &TCP{
		conn:       conn,
		cfg:        cfg,
		hostCopies: HostCopiesUnknown,
		turns:      make(chan *sendTurn, cfg.MaxInFlight),
		wlock:      make(chan struct{}, 1),
		rlock:      make(chan struct{}, 1),
		closed:     make(chan struct{}),
	}
	if _, ok := conn.(*net.TCPConn); ok {
		t.hostCopies = 1
	}
	for range cfg.MaxInFlight {
		t.turns <- &sendTurn{bufs: make([][]byte, 0, 1+MaxStageSlots)}
	}
	return t, nil
}

// Name returns "tcp".
func (t *TCP) Name() string { return "tcp" }

// Close closes the connection; Submits and Receives blocked on it return.
// Idempotent; later calls return nil.
func (t *TCP) Close() error {
	var err error
	t.once.Do(func() {
		close(t.closed)
		err = t.conn.Close()
		if errors.Is(err, net.ErrClosed) {
			err = nil // a NIC flap (flap) already dropped the connection
		}
	})
	return err
}

func (t *TCP) brokenErr() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.mu.broken
}

func (t *TCP) setBroken(err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.mu.broken == nil {
		t.mu.broken = err
	}
}

// lock takes a capacity-1 channel lock unless ctx ends or t closes first.
func (t *TCP) lock(ctx context.Context, l chan struct{}) error {
	select {
	case l <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	case <-t.closed:
		return ErrClosed
	}
	select {
	case <-t.closed:
		<-l
		return ErrClosed
	default:
	}
	if err := t.brokenErr(); err != nil {
		<-l
		return fmt.Errorf("%w: %v", ErrBroken, err)
	}
	return nil
}

// setDeadline sets the write or the read deadline of the conn.
func (t *TCP) setDeadline(write bool, d time.Time) error {
	if write {
		return t.conn.SetWriteDeadline(d)
	}
	return t.conn.SetReadDeadline(d)
}

// arm sets the I/O deadline of one direction (ctx's, or IOTimeout if
// sooner) and interrupts the I/O if ctx is cancelled first. A non-nil
// disarm must be called before the next arm on the same direction; it waits
// for a running interrupt, so an interrupt never lands on the next
// operation. With a ctx that cannot be cancelled, arm allocates nothing.
func (t *TCP) arm(ctx context.Context, write bool) (disarm func(), err error) {
	dl := time.Now().Add(t.cfg.IOTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(dl) {
		dl = d
	}
	if err := t.setDeadline(write, dl); err != nil {
		return nil, err
	}
	if ctx.Done() == nil {
		return nil, nil
	}
	fired := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		_ = t.setDeadline(write, time.Unix(1, 0)) // a past deadline unblocks the I/O
		close(fired)
	})
	return func() {
		if !stop() {
			<-fired
		}
	}, nil
}

// ioErr names the cause of a failed I/O: ctx's error when ctx ended, or
// when the conn deadline that fired was ctx's (the conn's timer can beat
// the context's).
func ioErr(ctx context.Context, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		return fmt.Errorf("%w (%v)", cerr, err)
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
			return fmt.Errorf("%w (%v)", context.DeadlineExceeded, err)
		}
	}
	return err
}

// Submit writes s as one frame. It blocks while MaxInFlight Submits are
// admitted (backpressure), then while another frame is being written. A
// failure before the write starts leaves s with the caller, untouched. A
// write that failed part-way quarantines s (ErrStageQuarantined) and breaks the
// transport (ErrBroken for every later call): the stream is no longer
// framed and the kernel may hold part of the slot bytes. A write that
// failed before its first byte (a deadline already past, a closed conn)
// returns the error and leaves s with the caller. A frame written whole
// while an Invalidate ended s (a GPU reset) is not reported as delivered:
// the error wraps ErrStageQuarantined. With TCPConfig.Faults, the NICFlap
// failpoint cuts the frame (flap).
func (t *TCP) Submit(ctx context.Context, s *Stage) (Receipt, error) {
	rc := Receipt{Transport: t.Name(), Epoch: s.epoch}
	var turn *sendTurn
	select {
	case turn = <-t.turns:
	default:
		if t.hooks.waiting != nil {
			t.hooks.waiting()
		}
		select {
		case turn = <-t.turns:
		case <-ctx.Done():
			return rc, ctx.Err()
		case <-t.closed:
			return rc, ErrClosed
		}
	}
	defer func() { t.turns <- turn }()
	if t.hooks.admitted != nil {
		t.hooks.admitted()
	}
	if err := t.lock(ctx, t.wlock); err != nil {
		return rc, err
	}
	defer func() { <-t.wlock }()
	if err := s.reg.holdStage(s); err != nil {
		return rc, err
	}
	defer s.reg.unholdStage(s)

	h := turn.hdr[:frameFixed+4*len(s.ids)]
	h[0], h[1] = frameStage, frameVersion
	binary.BigEndian.PutUint16(h[2:4], uint16(len(s.ids)))
	binary.BigEndian.PutUint32(h[4:8], 0)
	binary.BigEndian.PutUint64(h[8:16], uint64(s.epoch))
	bufs := append(turn.bufs[:0], h)
	for i := range s.ids {
		binary.BigEndian.PutUint32(h[frameFixed+4*i:], uint32(s.lens[i]))
		if s.lens[i] > 0 {
			bufs = append(bufs, s.mem[i][:s.lens[i]]) // slot memory itself, no copy
		}
	}
	turn.nb = net.Buffers(bufs)
	if t.hooks.beforeWrite != nil {
		t.hooks.beforeWrite(turn.nb)
	}

	if err := ctx.Err(); err != nil {
		return rc, err
	}
	disarm, err := t.arm(ctx, true)
	var n int64
	if err == nil {
		if mode, flapped := t.cfg.Faults.Check(degrade.NICFlap); flapped {
			n, err = t.flap(ctx, mode, turn.nb)
		} else {
			n, err = turn.nb.WriteTo(t.conn) // writev on a *net.TCPConn
		}
		if disarm != nil {
			disarm()
		}
	}
	clear(turn.bufs[:cap(turn.bufs)]) // drop references to slot memory
	if err != nil {
		if !errors.Is(err, degrade.ErrMiss) {
			err = ioErr(ctx, err)
		}
		if n == 0 {
			// Nothing reached the kernel: the stream is still framed
			// and the slots were not handed over.
			return rc, fmt.Errorf("gpucache/transport: tcp submit: %w", err)
		}
		t.setBroken(err)
		s.reg.quarantineHeld(s)
		return rc, fmt.Errorf("gpucache/transport: tcp submit: %w: %w", ErrStageQuarantined, err)
	}
	if !s.reg.live(s) {
		// An Invalidate (a GPU reset) ended the stage while its bytes were
		// on the wire. The peer has the whole frame, read from host memory
		// that nothing changed; but the registration it was sent under is
		// void, so the sender does not vouch for it as delivered.
		return rc, fmt.Errorf("gpucache/transport: tcp submit: %w: the stage was invalidated during the transfer", ErrStageQuarantined)
	}
	rc.Bytes = s.Bytes()
	rc.HostCopies = t.hostCopies
	return rc, nil
}

// flap carries out the NICFlap failpoint on one frame: the link drops in
// the middle of it. The header and half of the first slot's bytes go out
// (half of the header when no slot has any), then, in Hang mode, the link
// stays silent until the write deadline (ctx's, or IOTimeout), and then the
// connection is closed under the frame, so the peer reads a cut frame. The
// error is a *degrade.Miss naming the fault; Submit then quarantines the
// stage and breaks the transport, as for any write cut part-way.
func (t *TCP) flap(ctx context.Context, mode degrade.Mode, nb net.Buffers) (int64, error) {
	start := time.Now()
	part := net.Buffers{nb[0][:len(nb[0])/2]}
	if len(nb) > 1 {
		part = net.Buffers{nb[0], nb[1][:len(nb[1])/2]}
	}
	n, err := part.WriteTo(t.conn)
	if err == nil && mode == degrade.Hang {
		tm := time.NewTimer(t.cfg.IOTimeout)
		select {
		case <-ctx.Done():
		case <-tm.C:
		case <-t.closed:
		}
		tm.Stop()
	}
	_ = t.conn.Close()
	cause := degrade.ErrInjected
	if err != nil {
		cause = errors.Join(cause, err)
	}
	return n, &degrade.Miss{Fault: degrade.NICFlap, Cause: fmt.Errorf("link down mid-frame: %w", cause), After: time.Since(start)}
}

// Receive reads one frame into into: slot i of the frame lands in
// into.Slot(i) with io.ReadFull straight from the socket (no bufio, no
// staging buffer), and into's lengths are set from the frame; slots beyond
// the frame's count get length 0. into must be live and stays with the
// caller, except that a failure while reading payload quarantines it
// (ErrStageQuarantined). A frame that does not fit into (ErrTooLarge) or is
// malformed (ErrMalformed) breaks the transport. A ctx that ends before
// any byte of a frame arrived leaves the transport usable.
func (t *TCP) Receive(ctx context.Context, into *Stage) (Receipt, error) {
	rc := Receipt{Transport: t.Name()}
	if err := t.lock(ctx, t.rlock); err != nil {
		return rc, err
	}
	defer func() { <-t.rlock }()
	if err := into.reg.holdStage(into); err != nil {
		return rc, err
	}
	defer into.reg.unholdStage(into)
	disarm, err := t.arm(ctx, false)
	if err != nil {
		return rc, err
	}
	if disarm != nil {
		defer disarm()
	}

	h := t.rhdr[:frameFixed]
	if n, err := io.ReadFull(t.conn, h); err != nil {
		err = ioErr(ctx, err)
		if n > 0 || errors.Is(err, io.EOF) {
			t.setBroken(err)
		}
		return rc, err
	}
	count := int(binary.BigEndian.Uint16(h[2:4]))
	if h[0] != frameStage || h[1] != frameVersion || binary.BigEndian.Uint32(h[4:8]) != 0 ||
		count < 1 || count > MaxStageSlots {
		err := fmt.Errorf("%w: type %#x version %d count %d", ErrMalformed, h[0], h[1], count)
		t.setBroken(err)
		return rc, err
	}
	rc.Epoch = Epoch(binary.BigEndian.Uint64(h[8:16]))
	lens := t.rhdr[frameFixed : frameFixed+4*count]
	if _, err := io.ReadFull(t.conn, lens); err != nil {
		err = ioErr(ctx, err)
		t.setBroken(err)
		return rc, err
	}
	if count > len(into.ids) {
		err := fmt.Errorf("%w: %d slots into a stage of %d", ErrTooLarge, count, len(into.ids))
		t.setBroken(err)
		return rc, err
	}
	for i := range count {
		if l := binary.BigEndian.Uint32(lens[4*i:]); uint64(l) > uint64(len(into.mem[i])) {
			err := fmt.Errorf("%w: slot %d of %d bytes into %d", ErrTooLarge, i, l, len(into.mem[i]))
			t.setBroken(err)
			return rc, err
		}
	}
	for i := range into.ids {
		l := 0
		if i < count {
			l = int(binary.BigEndian.Uint32(lens[4*i:]))
		}
		if _, err := io.ReadFull(t.conn, into.mem[i][:l]); err != nil {
			err = ioErr(ctx, err)
			t.setBroken(err)
			into.reg.quarantineHeld(into)
			return rc, fmt.Errorf("gpucache/transport: tcp receive: %w: %w", ErrStageQuarantined, err)
		}
		into.lens[i] = l
	}
	if !into.reg.live(into) {
		// An Invalidate (a GPU reset) ended the stage while the frame
		// arrived: the bytes landed in quarantined slots, which nobody may
		// read. The stream is still framed.
		return rc, fmt.Errorf("gpucache/transport: tcp receive: %w: the stage was invalidated during the transfer", ErrStageQuarantined)
	}
	rc.Bytes = into.Bytes()
	rc.HostCopies = t.hostCopies
	return rc, nil
}
