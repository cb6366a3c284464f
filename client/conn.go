package client

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpucache/gpucache/api/stamp"
	"github.com/gpucache/gpucache/api/wire"
)

const (
	// readBufSize is the connection's read buffer. Payload reads of at least
	// this size bypass it and go from the kernel straight into the
	// destination buffer. It is small on purpose: reading a header fills
	// the buffer with whatever has arrived, and the part of a payload that
	// lands there is copied once more into the destination. At 4 KiB a
	// 64 KiB GET answer copies at most 4 KiB twice (at 32 KiB it was half
	// the block), while a buffer still holds the headers and tables of
	// many pipelined answers.
	readBufSize = 4 << 10
	// readChunk bounds one payload read, so an abandoning caller is noticed
	// between chunks.
	readChunk = 1 << 20
	// controlBodyMax bounds an answer body other than GET's (STAT is the
	// largest: 256 entries of a 256-byte name and a u64), unless a PUT or
	// DELETE answer of MaxBatch statuses is larger.
	controlBodyMax = 4 + wire.MaxStatEntries*(2+wire.MaxStringLen+8)
	// membersBodyMax bounds a MEMBERS answer: MaxMembers members of three
	// strings of at most MaxStringLen bytes, a version, a capacity and flags.
	membersBodyMax = 8 + 4 + wire.MaxMembers*(3*(2+wire.MaxStringLen)+1+8+1)
)

// conn is one pooled connection: callers write frames under a write lock,
// and one reader goroutine matches answers to calls by request id.
type conn struct {
	nc     net.Conn
	cfg    *Config
	limits wire.Limits // server's HELLO limits, MaxInFlight lowered to ours
	server string      // server name from HELLO
	tenant string      // session tenant
	// version is the protocol version HELLO negotiated: 2 lets the session
	// ask for MEMBERS and makes a cluster node check that it owns every
	// key (WRONG_EPOCH); 1 is the single-node protocol.
	version uint8
	// stamp: mutating requests carry a replay stamp (the server asked for
	// it in HELLO). Nonces are noncePrefix then a counter, unique per
	// connection; the prefix is random, so connections do not collide.
	stamp       bool
	noncePrefix [8]byte
	nonceSeq    uint64 // guarded by wlock
	ctrlMax     uint32 // largest answer body accepted, but GET's

	// sem bounds requests in flight: a caller takes a slot before it
	// registers a call; the reader returns it when it takes the call out of
	// pending.
	sem chan struct{}
	// load counts calls holding a slot, for least-loaded picking.
	load atomic.Int32
	// wlock (capacity 1) serialises frame writes; a waiter can give up.
	wlock chan struct{}
	wbuf  []byte      // guarded by wlock: header and body or table
	vec   net.Buffers // guarded by wlock: wbuf then the PUT payloads
	next  atomic.Uint64

	mu struct {
		sync.Mutex
		pending map[uint64]*call // guarded by mu; nil once drained
		err     error            // guarded by mu; first failure, non-nil: dead
	}

	// Reader-owned.
	br   *bufio.Reader
	hb   [wire.HeaderSize]byte
	tbuf []byte // GET table scratch

	readerDone chan struct{}

	// regs are the regions registered on this connection (region.go); the
	// mutex is held across a REGISTER exchange.
	regs struct {
		sync.Mutex
		m map[uint32]bool
	}
}

// dial connects, exchanges HELLO and starts the reader.
func dial(parent context.Context, cfg *Config) (*conn, error) {
	ctx, cancel := context.WithTimeout(parent, cfg.DialTimeout)
	defer cancel()
	var d net.Dialer
	network := "tcp"
	if cfg.Network == "unix" {
		network = "unix"
	}
	dialFn := func(ctx context.Context, addr string) (net.Conn, error) { return d.DialContext(ctx, network, addr) }
	if cfg.hooks != nil && cfg.hooks.dial != nil {
		dialFn = cfg.hooks.dial
	}
	nc, err := dialFn(ctx, cfg.Addr)
	if err != nil {
		if parent.Err() != nil {
			return nil, ctxError(parent)
		}
		return nil, fmt.Errorf("%w: dial %s: %w", ErrUnavailable, cfg.Addr, err)
	}
	if cfg.TLS != nil {
		tc := cfg.TLS.Clone()
		if tc.ServerName == "" {
			if host, _, err := net.SplitHostPort(cfg.Addr); err == nil {
				tc.ServerName = host
			}
		}
		tlsConn := tls.Client(nc, tc)
		if err := tlsConn.HandshakeContext(ctx); err != nil {
			nc.Close()
			if parent.Err() != nil {
				return nil, ctxError(parent)
			}
			return nil, fmt.Errorf("%w: TLS handshake with %s: %w", ErrUnavailable, cfg.Addr, err)
		}
		nc = tlsConn
	}
	c := &conn{nc: nc, cfg: cfg, br: bufio.NewReaderSize(nc, readBufSize), readerDone: make(chan struct{}),
		wbuf: make([]byte, 0, 4096)}
	if err := c.hello(ctx); err != nil {
		nc.Close()
		return nil, err
	}
	n := min(int(c.limits.MaxInFlight), cfg.MaxInFlight)
	c.limits.MaxInFlight = uint32(n)
	c.sem = make(chan struct{}, n)
	c.wlock = make(chan struct{}, 1)
	c.mu.pending = make(map[uint64]*call)
	c.next.Store(1) // calls use ids from 2 on; HELLO's (helloID) is done
	go c.readLoop()
	if cfg.hooks != nil && cfg.hooks.dialed != nil {
		cfg.hooks.dialed()
	}
	return c, nil
}

// hello performs the HELLO exchange synchronously, before the reader runs.
func (c *conn) hello(ctx context.Context) error {
	deadline, _ := ctx.Deadline()
	c.nc.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { c.nc.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	// Offer every version this package speaks; the server picks the
	// highest it speaks too, so an old server keeps working (version 1).
	req := wire.HelloRequest{MinVersion: wire.Version1, MaxVersion: wire.VersionMax, Tenant: c.cfg.Tenant, Client: c.cfg.ClientName}
	// The auth section goes only with credentials, so a client without
	// them speaks the HELLO of before to any server.
	if c.cfg.Secret != nil || c.cfg.TLS != nil {
		req.HasAuth = true
		if c.cfg.Secret != nil {
			req.Auth, req.Credential = wire.AuthBearer, c.cfg.Secret
		}
	}
	b := make([]byte, wire.HeaderSize, 128+len(c.cfg.Secret))
	b = req.AppendTo(b)
	wire.Header{Version: wire.FrameVersion, Op: wire.OpHello, RequestID: helloID, BodyLen: uint32(len(b) - wire.HeaderSize)}.Encode(b)
	ioErr := func(err error) error {
		if ctx.Err() != nil || errors.Is(err, os.ErrDeadlineExceeded) {
			return ctxError(ctx)
		}
		return fmt.Errorf("%w: HELLO to %s: %w", ErrUnavailable, c.cfg.Addr, err)
	}
	if _, err := c.nc.Write(b); err != nil {
		return ioErr(err)
	}
	// The answer's first bytes tell a gpucache node from an HTTP server
	// (an admin port given as the data address), which answers the
	// HELLO's first line (see helloID) with a status line.
	if p, err := c.br.Peek(len(wire.Magic)); err != nil {
		if errors.Is(ctx.Err(), context.Canceled) {
			return ctxError(ctx)
		}
		if ctx.Err() != nil || errors.Is(err, os.ErrDeadlineExceeded) {
			return fmt.Errorf("%w (%s)", ctxError(ctx), c.silentHint())
		}
		return ioErr(err)
	} else if string(p) == "HTTP" {
		return fmt.Errorf("%w: %s answered HTTP: it is an HTTP port, such as a node's admin listener (usually :9401); the data port is usually :9400", ErrNotDataPort, c.cfg.Addr)
	}
	if _, err := io.ReadFull(c.br, c.hb[:]); err != nil {
		return ioErr(err)
	}
	h, err := c.checkHeader()
	if err != nil {
		return err
	}
	if h.Op != wire.OpHello || h.RequestID != helloID || h.BodyLen > controlBodyMax {
		return fmt.Errorf("%w: HELLO answered by %s id %d with %d bytes", ErrProtocol, h.Op, h.RequestID, h.BodyLen)
	}
	body := make([]byte, h.BodyLen)
	if _, err := io.ReadFull(c.br, body); err != nil {
		return ioErr(err)
	}
	if h.Flags&wire.FlagError != 0 {
		return decodeServerError(body)
	}
	var resp wire.HelloResponse
	if err := resp.Decode(body); err != nil {
		return fmt.Errorf("%w: HELLO response: %w", ErrProtocol, err)
	}
	if resp.Version < wire.Version1 || resp.Version > wire.VersionMax {
		return fmt.Errorf("%w: server chose version %d, offered %d..%d", ErrProtocol, resp.Version, wire.Version1, wire.VersionMax)
	}
	c.server, c.limits, c.tenant, c.version = resp.Server, resp.Limits, c.cfg.Tenant, resp.Version
	if resp.HasSession {
		c.tenant, c.stamp = resp.Tenant, resp.Session&wire.SessionStampRequired != 0
		if c.cfg.Tenant != "" && resp.Tenant != c.cfg.Tenant {
			return fmt.Errorf("%w: server opened a session for tenant %q, not %q", ErrProtocol, resp.Tenant, c.cfg.Tenant)
		}
		if _, err := rand.Read(c.noncePrefix[:]); err != nil {
			return fmt.Errorf("gpucache/client: nonce: %w", err)
		}
	}
	c.ctrlMax = max(controlBodyMax, 4+c.limits.MaxBatch)
	def := wire.DefaultLimits()
	if c.limits.MaxFrame == 0 {
		c.limits.MaxFrame = def.MaxFrame
	}
	if c.limits.MaxBatch == 0 {
		c.limits.MaxBatch = def.MaxBatch
	}
	if c.limits.MaxInFlight == 0 {
		c.limits.MaxInFlight = def.MaxInFlight
	}
	if c.limits.MaxPayload == 0 {
		c.limits.MaxPayload = def.MaxPayload
	}
	return c.nc.SetDeadline(time.Time{})
}

// helloID is HELLO's request id: 10, the byte '\n', which is the frame's
// ninth byte (the id is little-endian). A line-oriented server that is not
// gpucache, such as the HTTP admin listener, then reads a whole (bad)
// request line and answers at once ("HTTP/1.1 400 Bad Request"), which
// hello reports as ErrNotDataPort, where with no newline it would wait
// for more until the dial timed out. The protocol lets the client choose
// every request id.
const helloID = 10

// silentHint says what a peer that accepted the connection but did not
// answer HELLO may be, for the timeout error.
func (c *conn) silentHint() string {
	if c.cfg.Network == "unix" {
		return fmt.Sprintf("%s accepted the connection but did not answer the gpucache HELLO: is a gpucache node serving this socket?", c.cfg.Addr)
	}
	return fmt.Sprintf("%s accepted the connection but did not answer the gpucache HELLO: is it a gpucache data port (usually :9400)? An HTTP port, such as the admin listener (usually :9401), may stay silent", c.cfg.Addr)
}

// checkHeader decodes c.hb as a response header of version 1.
func (c *conn) checkHeader() (wire.Header, error) {
	h, err := wire.DecodeHeader(c.hb[:])
	switch {
	case err != nil:
		return h, fmt.Errorf("%w: %w", ErrProtocol, err)
	case h.Version != wire.FrameVersion:
		return h, fmt.Errorf("%w: response version %d", ErrProtocol, h.Version)
	case h.Flags&wire.FlagResponse == 0 || h.Flags&^(wire.FlagResponse|wire.FlagError) != 0:
		return h, fmt.Errorf("%w: response flags %#x", ErrProtocol, uint16(h.Flags))
	}
	return h, nil
}

func decodeServerError(body []byte) error {
	we, err := wire.DecodeError(body)
	if err != nil {
		return fmt.Errorf("%w: error body: %w", ErrProtocol, err)
	}
	return serverError(we)
}

// dead reports whether the connection has failed.
func (c *conn) dead() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.err != nil
}

// fail marks the connection dead with err (the first failure wins) and
// closes the socket; the reader then fails every pending call.
func (c *conn) fail(err error) {
	c.mu.Lock()
	first := c.mu.err == nil
	if first {
		c.mu.err = err
	}
	c.mu.Unlock()
	if first {
		c.nc.Close()
		c.cfg.Logger.Debug("gpucache client connection closed", "addr", c.cfg.Addr, "err", err)
		if c.cfg.hooks != nil && c.cfg.hooks.connFailed != nil {
			c.cfg.hooks.connFailed(err)
		}
	}
}

// close fails the connection with ErrClosed and waits for its reader.
func (c *conn) close() {
	c.fail(ErrClosed)
	<-c.readerDone
}

// frame is one request to write: a body appended by enc, then payload.
type frame struct {
	op         wire.Opcode
	enc        func(b []byte) []byte
	payload    [][]byte
	payloadLen int
	oob        []byte // REGISTER: the SCM_RIGHTS message sent with the frame's bytes
}

// start takes an in-flight slot, registers cl and writes its frame. When
// inFlight is true the call is registered with the reader and the caller
// must wait for it (the frame went out, or the connection broke mid-write
// and the reader fails the call). Otherwise the caller owns cl again and err
// says why nothing was sent.
func (c *conn) start(ctx context.Context, cl *call, f *frame) (inFlight bool, err error) {
	select {
	case c.sem <- struct{}{}:
	case <-ctx.Done():
		return false, ctxError(ctx)
	}
	c.mu.Lock()
	if c.mu.err != nil {
		err := c.mu.err
		c.mu.Unlock()
		<-c.sem
		return false, unavailable(err)
	}
	id := c.next.Add(1)
	c.mu.pending[id] = cl
	c.mu.Unlock()
	c.load.Add(1)

	select {
	case c.wlock <- struct{}{}:
	case <-ctx.Done():
		if c.unregister(id, cl) {
			return false, ctxError(ctx)
		}
		return true, nil
	}
	b := c.wbuf[:wire.HeaderSize]
	var flags wire.Flags
	if c.stamp && f.op.Mutating() {
		flags = wire.FlagStamped
		c.nonceSeq++
		var nonce [16]byte
		copy(nonce[:8], c.noncePrefix[:])
		binary.LittleEndian.PutUint64(nonce[8:], c.nonceSeq)
		b = stamp.New(time.Now(), nonce).Append(b)
	}
	b = f.enc(b)
	bodyLen := len(b) - wire.HeaderSize + f.payloadLen
	wire.Header{Version: wire.FrameVersion, Op: f.op, Flags: flags, RequestID: id, BodyLen: uint32(bodyLen)}.Encode(b)
	deadline, _ := ctx.Deadline()
	c.nc.SetWriteDeadline(deadline)
	var n int64
	if f.oob != nil {
		n, err = c.writeWithRights(b, f.oob)
	} else if len(f.payload) == 0 {
		var m int
		m, err = c.nc.Write(b)
		n = int64(m)
	} else {
		c.vec = append(append(c.vec[:0], b), f.payload...)
		v := c.vec
		n, err = v.WriteTo(c.nc)
		clear(c.vec) // do not keep the caller's payloads reachable
	}
	if cap(b) <= 1<<20 {
		c.wbuf = b[:0]
	}
	<-c.wlock
	if err == nil {
		return true, nil
	}
	if n == 0 && !errors.Is(err, net.ErrClosed) && c.unregister(id, cl) {
		if ctx.Err() != nil || errors.Is(err, os.ErrDeadlineExceeded) {
			return false, ctxError(ctx)
		}
		c.fail(fmt.Errorf("%w: write: %w", ErrUnavailable, err))
		return false, unavailable(err)
	}
	// Part of the frame went out: the stream is out of sync.
	c.fail(fmt.Errorf("%w: write: %w", ErrUnavailable, err))
	return true, nil
}

// writeWithRights writes b with the control message oob on its first
// byte (a descriptor for REGISTER), then whatever the first write left.
func (c *conn) writeWithRights(b, oob []byte) (int64, error) {
	uc, ok := c.nc.(*net.UnixConn)
	if !ok {
		return 0, fmt.Errorf("%w: descriptors travel only on Unix sockets", ErrInvalid)
	}
	n, _, err := uc.WriteMsgUnix(b, oob, nil)
	if err == nil && n < len(b) {
		var m int
		m, err = uc.Write(b[n:])
		n += m
	}
	return int64(n), err
}

func unavailable(err error) error {
	if errors.Is(err, ErrUnavailable) || errors.Is(err, ErrClosed) || errors.Is(err, ErrProtocol) ||
		errors.Is(err, ErrServer) || errors.Is(err, ErrTimeout) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrUnavailable, err)
}

// unregister takes a call that was never written out of pending and returns
// its slot. It reports false if the reader had already taken it.
func (c *conn) unregister(id uint64, cl *call) bool {
	c.mu.Lock()
	ok := c.mu.pending != nil && c.mu.pending[id] == cl
	if ok {
		delete(c.mu.pending, id)
	}
	c.mu.Unlock()
	if ok {
		c.load.Add(-1)
		<-c.sem
	}
	return ok
}

// wait blocks until cl is answered or ctx expires. It returns true when the
// call's results are valid to read (state done), false when the call was
// abandoned: then the caller owns its result memory again and must not
// read cl's fields.
func (c *conn) wait(ctx context.Context, cl *call) bool {
	select {
	case <-cl.done:
		return cl.state.Load() == stDone
	case <-ctx.Done():
	}
	if cl.state.CompareAndSwap(stWaiting, stAbandoned) {
		c.watchAbandoned(cl)
		return false
	}
	if cl.res == nil {
		// Not a GET: the reader fills only the call's own fields, so the
		// caller need not wait for it to finish.
		select {
		case <-cl.done:
			return cl.state.Load() == stDone
		default:
			return false
		}
	}
	cl.stopFill.Store(true)
	t := time.NewTimer(abandonKick)
	defer t.Stop()
	select {
	case <-cl.done:
	case <-t.C:
		// The reader is stuck in a read into our buffers: break it out.
		c.nc.SetReadDeadline(time.Unix(1, 0))
		<-cl.done
	}
	return cl.state.Load() == stDone
}

// watchAbandoned closes the connection if an abandoned call stays
// unanswered for AbandonGrace: its slot would otherwise be held forever by
// a server that never answers.
func (c *conn) watchAbandoned(cl *call) {
	t := time.AfterFunc(c.cfg.AbandonGrace, func() {
		if !cl.answered.Load() {
			c.fail(fmt.Errorf("%w: a request stayed unanswered %v past its deadline", ErrUnavailable, c.cfg.AbandonGrace))
		}
	})
	cl.timer.Store(t)
	if cl.answered.Load() {
		t.Stop()
	}
}
