package server

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpucache/gpucache/api/identity"
	"github.com/gpucache/gpucache/api/wire"
	"github.com/gpucache/gpucache/internal/hot"
	"github.com/gpucache/gpucache/internal/security/acl"
)

// readBufSize is the connection's read buffer. It is small because PUT
// payloads bypass it (readInto): only what it already holds of a payload is
// copied out of it, and the kernel writes the rest straight into slab memory.
// Reading a request header fills the buffer with whatever has arrived, so
// its size bounds that extra copy per PUT (at 16 KiB, a quarter of a 64 KiB
// block was copied twice); 4 KiB still holds many pipelined GET requests.
// Larger bodies (big GET key lists, PUT tables) are read past it into
// conn.body.
const readBufSize = 4 << 10

// maxCoalesce bounds how many queued responses one writev carries.
const maxCoalesce = 32

// conn is one client connection: a reader goroutine that decodes and
// executes requests in order, and a writer goroutine that writes their
// responses with vectored writes straight from slab memory.
//
// Ownership: the reader creates each response and hands it to the writer
// through out; from then on the writer owns it, releases its views and its
// lease, and returns its in-flight slot.
type conn struct {
	s   *Server
	nc  net.Conn
	br  *bufio.Reader
	out chan *response // reader → writer; capacity MaxInFlight

	// slots bounds requests in flight: the reader takes a slot before it
	// reads a request body and the writer returns it after the response is
	// written. A full slots channel stops the reader: backpressure.
	slots chan struct{}

	// w serialises socket writes between the writer goroutine and the
	// reader's inline writes.
	w struct {
		sync.Mutex
		pending atomic.Int64 // responses queued to or held by the writer; written by the reader (+) and writer (-)
		failed  bool         // a write failed; guarded by the mutex
		store   net.Buffers  // backing array for bufs; guarded by the mutex
		bufs    net.Buffers  // consumed by WriteTo; guarded by the mutex
	}
	inline [1]*response // reader-owned
	timing reqTiming    // reader-owned: the request being timed (latency.go)

	id    uint64 // owner id in the directory
	fills fillState

	// Reader-owned session state.
	tenant string
	hello  bool
	// version is the protocol version the session negotiated in HELLO (0
	// before): it decides which operations exist (Opcode.Since) and
	// whether requests are checked for ownership (version 2 routes).
	version uint8
	sess    session
	nsBlob  []byte // last namespace blob seen, and what it decoded to
	nsDig   identity.NamespaceDigest
	ns      identity.Namespace // nsBlob decoded, for key verification and Config.Lower
	// nsRights are the session's rights on ns's model, under the policy of
	// sess.epoch.
	nsRights acl.Right
	// body is the scratch for request bodies and tables; it grows as bytes
	// arrive (readGrow), and what it holds above reqbuf.Keep is charged to the
	// server's request-buffer budget (held) and given back when the
	// connection goes idle (shrink).
	body   []byte
	held   int64  // request-buffer budget this connection holds
	heldBy string // the owner held is charged to (connbuf.go)
	// tableHeld is the part of held charged for decoding a large table into
	// putReq or fillReq; it is released after the request.
	tableHeld int64
	// unauthAddr is the source address under which the connection counts
	// as unauthenticated (Server.mu.unauth) until its first HELLO; "" after.
	// Set by accept before the reader starts, then cleared under Server.mu
	// by the reader's goroutine only, which may read it without the lock.
	unauthAddr string
	// helloBy is when a connection that has no session must have one
	// (HelloTimeout); zero while a session is open.
	helloBy time.Time
	// Reused request messages; their slices alias body.
	getReq    wire.GetRequest
	lookupReq wire.LookupRequest
	putReq    wire.PutRequest
	fillReq   wire.FillCommitRequest
	statuses  []wire.Status
	discard   int64 // bytes skipped, for stats

	// Unix-socket connections (unix.go, region.go): the peer's kernel
	// credentials (nil on TCP) and the regions it registered, by id;
	// reader-owned, unmapped by serve after the reader stops.
	peer        *unixPeer
	regions     map[uint32]*region
	getIntoReq  wire.GetIntoRequest
	getIntoResp []wire.BlockMeta
	putFromReq  wire.PutFromRequest
	// putOpaqueFromReq is reused like putFromReq.
	putOpaqueFromReq wire.PutOpaqueFromRequest
	slotOrder        []int32

	state struct {
		sync.Mutex
		idle     bool // reader is waiting for a header
		draining bool // Shutdown began: finish what was read, read no more
	}
}

func newConn(s *Server, nc net.Conn) *conn {
	inflight := int(s.cfg.Limits.MaxInFlight)
	c := &conn{
		s:     s,
		nc:    nc,
		br:    bufio.NewReaderSize(nc, readBufSize),
		out:   make(chan *response, inflight),
		slots: make(chan struct{}, inflight),
		id:    s.connIDs.Add(1),
	}
	c.fills.waiters = make(map[uint64]joined)
	c.fills.leads = make(map[wire.FillToken]struct{})
	c.fills.done = make(chan struct{})
	return c
}

// drain asks the reader to stop after the request it is reading.
func (c *conn) drain() {
	c.state.Lock()
	c.state.draining = true
	if c.state.idle {
		c.nc.SetReadDeadline(time.Unix(1, 0))
	}
	c.state.Unlock()
}

func (c *conn) serve() {
	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		c.writeLoopRecovered()
	}()
	err := c.readLoopRecovered()
	c.unmapRegions()
	c.endRequest()
	c.shrink()
	c.leaveFills() // parked WAITs answer first, so the queue is still open
	close(c.out)
	<-writerDone
	c.nc.Close()
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
		c.s.log.Debug("connection closed", "remote", c.nc.RemoteAddr(), "err", err)
	}
	c.s.forget(c)
}

// readLoopRecovered is readLoop, ending the connection on a panic
// (connpanic.go); the teardown in serve then runs as after any close.
func (c *conn) readLoopRecovered() (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = c.panicked("reader", v)
		}
	}()
	return c.readLoop()
}

// writeLoopRecovered is writeLoop. A panic in a write is recovered by
// writeGuarded; one anywhere else in the loop is recovered here, and the
// loop runs again on the failed connection, so it goes on releasing what
// the reader queues (writeBatch writes nothing once c.w.failed is set)
// until the reader closes the queue.
func (c *conn) writeLoopRecovered() {
	for !c.writeLoopGuarded() {
	}
}

func (c *conn) writeLoopGuarded() (done bool) {
	defer func() {
		if v := recover(); v != nil {
			c.w.Lock()
			c.w.failed = true
			c.w.Unlock()
			c.panicked("writer", v)
		}
	}()
	c.writeLoop()
	return true
}

// awaitRequest waits, idle, for the first byte of the next request (the
// idle timeout applies, and drain may end the wait), then arms the read
// timeout for the request ("a frame started is a frame timed"). more is
// false when the connection should end: err nil for drain or an idle
// timeout, else the read error.
func (c *conn) awaitRequest() (more bool, err error) {
	c.state.Lock()
	if c.state.draining {
		c.state.Unlock()
		return false, nil
	}
	c.state.idle = true
	c.nc.SetReadDeadline(c.deadline(c.s.cfg.IdleTimeout))
	c.state.Unlock()

	_, err = c.br.Peek(1)

	c.state.Lock()
	c.state.idle = false
	draining := c.state.draining
	c.state.Unlock()
	if err != nil {
		if draining || errors.Is(err, os.ErrDeadlineExceeded) {
			c.timedOut(err)
			return false, nil
		}
		return false, err
	}
	c.nc.SetReadDeadline(c.deadline(c.s.cfg.ReadTimeout))
	return true, nil
}

// readLoop reads and executes requests until EOF, an unrecoverable stream
// error, a deadline, or drain.
//
// Deadlines: while no byte of a frame has arrived, the idle timeout applies;
// from a frame's first byte, its header and body must arrive within the
// read timeout ("a frame started is a frame timed"). Until HELLO succeeds,
// both are capped by the hello deadline.
func (c *conn) readLoop() error {
	var hb [wire.HeaderSize]byte
	for {
		c.endRequest()
		if more, err := c.awaitRequest(); !more {
			return err
		}
		if _, err := io.ReadFull(c.br, hb[:]); err != nil {
			c.timedOut(err)
			return err
		}

		h, err := wire.DecodeHeader(hb[:])
		if err == nil {
			err = c.s.cfg.Limits.CheckRequest(h)
		} else if wire.ErrCode(err) != wire.CodeBadMagic && h.BodyLen > c.s.cfg.Limits.MaxFrame {
			// A malformed header is skipped by its length only when that
			// length is within bounds.
			err = c.s.cfg.Limits.CheckRequest(h)
		}
		// Take an in-flight slot; this blocks while MaxInFlight responses
		// are queued or being written (backpressure).
		c.slots <- struct{}{}
		if err != nil {
			code := wire.ErrCode(err)
			if code.Fatal() {
				c.sendError(h, err)
				return err
			}
			c.dropRegisterFD(h)
			if err := c.skip(int64(h.BodyLen)); err != nil {
				c.release()
				c.timedOut(err)
				return err
			}
			c.sendError(h, err)
			continue
		}
		if err := c.handle(h); err != nil {
			// The stream broke while reading a body: nothing more to do.
			c.timedOut(err)
			return err
		}
	}
}

// deadline is the read deadline for a wait of d from now: capped by the
// hello deadline while the connection has no session.
func (c *conn) deadline(d time.Duration) time.Time {
	now := time.Now()
	if c.hello {
		c.helloBy = time.Time{}
	} else if c.helloBy.IsZero() {
		c.helloBy = now.Add(c.s.cfg.HelloTimeout)
	}
	t := now.Add(d)
	if !c.hello && c.helloBy.Before(t) {
		t = c.helloBy
	}
	return t
}

// timedOut counts a connection closed by its hello deadline.
func (c *conn) timedOut(err error) {
	if !c.hello && errors.Is(err, os.ErrDeadlineExceeded) && !time.Now().Before(c.helloBy) {
		c.s.stats.helloTimeouts.Add(1)
		c.s.log.Debug("no HELLO within hello_timeout; closing connection", "remote", c.nc.RemoteAddr(), "hello_timeout", c.s.cfg.HelloTimeout)
	}
}

// release returns an in-flight slot taken for a request that got no response.
func (c *conn) release() { <-c.slots }

// skip discards n body bytes to stay in sync.
func (c *conn) skip(n int64) error {
	c.discard += n
	_, err := io.CopyN(io.Discard, c.br, n)
	return err
}

// readInto fills dst from the stream: first whatever the read buffer holds,
// then straight from the socket, so a payload is copied once by the kernel.
func (c *conn) readInto(dst []byte) error {
	n := min(c.br.Buffered(), len(dst))
	if n > 0 {
		c.br.Read(dst[:n]) // served from the buffer: no syscall, cannot fail
	}
	if n == len(dst) {
		return nil
	}
	_, err := io.ReadFull(c.nc, dst[n:])
	return err
}

// readBody reads a whole body of n bytes (n already bounded by the caller)
// into the connection's scratch buffer, growing it as bytes arrive. An
// error that is a *wire.Error (request buffers exhausted) leaves the stream
// in sync after n-len(b) more bytes are skipped; any other error is the
// stream's.
func (c *conn) readBody(n uint32) ([]byte, error) {
	return c.readGrow(0, int(n))
}

// namespace decodes and checks a namespace blob against the session tenant
// and the rights op needs on its model, caching the last one (engines send
// the same namespace on every request; a policy reload clears the cache).
func (c *conn) namespace(op wire.Opcode, blob []byte) (identity.NamespaceDigest, error) {
	if c.nsBlob != nil && bytes.Equal(blob, c.nsBlob) {
		if !c.nsRights.Has(need(op)) {
			return identity.NamespaceDigest{}, c.authorize(op, c.ns.ModelID, need(op))
		}
		return c.nsDig, nil
	}
	ns, err := identity.DecodeNamespace(blob)
	if err != nil {
		return identity.NamespaceDigest{}, wire.Errorf(wire.CodeInvalidIdentity, "%v", err)
	}
	if ns.Tenant != c.tenant {
		if !c.s.guard.Policy().Open() {
			c.sess.counters.denied.Add(1)
			c.s.stats.denied.Add(1)
			c.s.guard.Audit().Denied(c.tenant, ns.ModelID, "tenant:"+ns.Tenant, op.String())
		}
		return identity.NamespaceDigest{}, wire.Errorf(wire.CodeTenantMismatch, "namespace tenant %q is not the session tenant %q", ns.Tenant, c.tenant)
	}
	if err := c.authorize(op, ns.ModelID, need(op)); err != nil {
		return identity.NamespaceDigest{}, err
	}
	d, err := ns.Digest()
	if err != nil {
		return identity.NamespaceDigest{}, wire.Errorf(wire.CodeInvalidIdentity, "%v", err)
	}
	c.nsBlob = append(c.nsBlob[:0], blob...)
	c.nsDig, c.ns = d, ns
	c.nsRights = c.s.guard.Policy().Rights(c.tenant, ns.ModelID)
	return d, nil
}

// response is one queued response frame.
type response struct {
	hdr   [wire.HeaderSize]byte
	meta  []byte      // encoded body (or table) bytes, owned
	bufs  net.Buffers // hdr, meta, payload slices
	views []hot.View  // pinned blocks the payload slices alias
	lease hot.LeaseID // taken from the registry by the reader; released after the write
	op    wire.Opcode
	// charged is the request-buffer budget the response holds (a large GET
	// table, connbuf.go); the writer gives it back after the write.
	charged bufCharge
}

var responsePool = sync.Pool{New: func() any { return &response{meta: make([]byte, 0, 256)} }}

func newResponse(op wire.Opcode) *response {
	r := responsePool.Get().(*response)
	r.op = op
	return r
}

func (r *response) reset() {
	clear(r.bufs)
	r.bufs = r.bufs[:0]
	clear(r.views)
	r.views = r.views[:0]
	r.meta = r.meta[:0]
	r.lease = 0
	r.charged = bufCharge{}
	if cap(r.views) > maxPooledBufs || cap(r.bufs) > maxPooledBufs || cap(r.meta) > respKeep {
		// A large GET's arrays were paid from the budget: do not keep them.
		r.bufs, r.views, r.meta = nil, nil, make([]byte, 0, 256)
	}
	responsePool.Put(r)
}

// finish sets the header for a body of meta plus payload bytes.
func (r *response) finish(h wire.Header, flags wire.Flags, payload uint64) {
	wire.Header{Version: wire.FrameVersion, Op: h.Op, Flags: wire.FlagResponse | flags,
		RequestID: h.RequestID, BodyLen: uint32(uint64(len(r.meta)) + payload)}.Encode(r.hdr[:])
	r.bufs = append(r.bufs, r.hdr[:], r.meta)
}

// send queues r; the writer owns it from here.
// send hands r to be written. When nothing is queued or being written and
// no further request is already buffered, the reader writes r itself,
// saving a goroutine hand-off on the latency path. Otherwise it queues r
// behind the others (so responses stay in order) and goes on reading, and
// the writer coalesces pipelined responses into one writev.
func (c *conn) send(r *response) {
	c.endTiming()
	if c.w.pending.Load() == 0 && c.br.Buffered() == 0 {
		// Only the reader adds to pending, so zero means the writer is idle
		// and has released c.w.
		c.writeInline(r)
		return
	}
	c.w.pending.Add(1)
	c.out <- r
}

// writeInline writes r from the reader.
func (c *conn) writeInline(r *response) {
	c.inline[0] = r
	c.writeGuarded(c.inline[:], "reader")
	c.inline[0] = nil
}

// reply queues a response whose whole body is m.
func (c *conn) reply(h wire.Header, m interface{ AppendTo([]byte) []byte }) {
	r := newResponse(h.Op)
	r.meta = m.AppendTo(r.meta)
	r.finish(h, 0, 0)
	c.send(r)
}

// sendError queues an error response to request h.
func (c *conn) sendError(h wire.Header, err error) {
	var we *wire.Error
	if !errors.As(err, &we) {
		we = wire.Errorf(wire.CodeInternal, "%v", err)
	}
	if int(we.Code) < len(c.s.stats.errors) {
		c.s.stats.errors[we.Code].Add(1)
	}
	r := newResponse(h.Op)
	r.meta = we.AppendTo(r.meta)
	r.finish(h, wire.FlagError, 0)
	c.send(r)
}

// writeLoop writes queued responses, coalescing what is queued into one
// vectored write.
func (c *conn) writeLoop() {
	var batch []*response
	for r := range c.out {
		batch = append(batch[:0], r)
	more:
		for len(batch) < maxCoalesce {
			select {
			case r2, ok := <-c.out:
				if !ok {
					break more
				}
				batch = append(batch, r2)
			default:
				break more
			}
		}
		c.writeGuarded(batch, "writer")
		// Only now may the reader write inline again: everything queued
		// before its next response is on the socket.
		c.w.pending.Add(-int64(len(batch)))
		clear(batch)
	}
}

// writeGuarded is writeBatch under c.w, from the goroutine named where. A
// panic in it ends the connection (ADR 0022): counted and logged, the
// socket closed, the connection marked failed (later batches are only
// released), and the in-flight slots of the responses writeBatch had not
// released given back, so the reader never waits for them. Those
// responses' views and leases are not released: a panic inside a release
// could recur, so they stay held (bounded by one batch).
func (c *conn) writeGuarded(batch []*response, where string) {
	c.w.Lock()
	defer c.w.Unlock()
	defer func() {
		if v := recover(); v != nil {
			c.w.failed = true
			for _, r := range batch {
				if r != nil {
					<-c.slots
				}
			}
			c.panicked(where, v)
		}
	}()
	c.writeBatch(batch)
}

// writeBatch writes responses with one vectored write, then releases their
// views, leases and in-flight slots, setting each entry of batch to nil
// once done. After a write error it only releases, so the reader never
// blocks on a dead connection. Caller holds c.w.
func (c *conn) writeBatch(batch []*response) {
	if !c.w.failed {
		bufs := c.w.store[:0]
		var n uint64
		for _, r := range batch {
			bufs = append(bufs, r.bufs...)
			for _, v := range r.views {
				n += uint64(len(v.Bytes))
			}
		}
		c.w.store = bufs // keep the (possibly grown) backing array
		c.w.bufs = bufs  // WriteTo consumes c.w.bufs, a field so it does not allocate
		if h := c.s.cfg.Hooks.BeforeWrite; h != nil {
			h()
		}
		c.nc.SetWriteDeadline(time.Now().Add(c.s.cfg.WriteTimeout))
		if _, err := c.w.bufs.WriteTo(c.nc); err != nil {
			c.w.failed = true
			// Unblock the reader; it sees the closed conn and stops.
			c.nc.Close()
			c.s.log.Debug("write failed; closing connection", "remote", c.nc.RemoteAddr(), "err", err)
		} else {
			c.s.stats.bytesOut.Add(n)
		}
		clear(c.w.store) // drop references to slab memory
		if cap(c.w.store) > maxPooledBufs {
			c.w.store = nil // a burst of large GETs: do not keep its vector
		}
	}
	for i, r := range batch {
		c.releaseResponse(r)
		<-c.slots
		batch[i] = nil // released: writeGuarded's recovery skips it
	}
}

// releaseResponse releases r's views, lease and budget and pools it.
func (c *conn) releaseResponse(r *response) {
	for _, v := range r.views {
		c.s.store.Release(v)
	}
	if r.lease != 0 {
		c.s.store.ReleaseLease(r.lease)
	}
	c.s.releaseCharge(r.charged)
	r.reset()
}
