package server

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpucache/gpucache/api/wire"
)

// Request buffers.
//
// A connection reads every request body it must hold (control bodies, and
// the tables of PUT and FILL_COMMIT, whose payloads go straight into slab
// memory) into one scratch buffer, conn.body. The buffer grows as bytes
// arrive, doubling from what it holds up to the declared size, never
// sized by a length the client merely declares. The first keepBuf bytes
// of it are the connection's own (part of its fixed cost); every byte
// above that, and the decoded form of a table larger than keepBuf, is
// charged to one server-wide budget, Config.RequestBuffers, before it is
// allocated. The decoded table is given back after its request, the
// buffer when the connection goes idle (nothing more buffered to read),
// both when it closes.
//
// A GET response of many keys waits for the writer with a table and
// vectors that grow with its key count: above respKeep it is charged to the
// same budget until it is written. So is every parked WAIT (a goroutine
// and a list of fills) until it is answered. The writer drops a vector (its own, or
// a pooled response's) larger than maxPooledBufs after use.
//
// A request that cannot get budget waits up to Config.BufferWait for
// another connection to give some back, then is refused RATE_LIMITED
// (retry after BufferWait) and the rest of its body is skipped, so the
// stream stays in sync. The budget thus bounds the memory all request
// buffers take, whatever the clients declare or how slowly they send.

// keepBuf is the part of a connection's request buffer that needs no
// budget: it holds every usual request (a GET of a few hundred keys, a PUT
// table of a few blocks) without touching the shared budget.
const keepBuf = 16 << 10

// tableDecodeCost is the budget charged for decoding a table of n bytes
// into PutRequest or FillCommitRequest: the token ids take as many bytes
// as on the wire, the entries a little more (a PutBlock is 104 bytes for
// at least 92 on the wire), plus allocation rounding.
func tableDecodeCost(n uint32) int64 { return int64(n) + int64(n)/2 }

// bufCost is the budget a request buffer of capacity n takes.
func bufCost(n int) int64 {
	if n <= keepBuf {
		return 0
	}
	return int64(n)
}

// MaxRequestCost is the request-buffer budget one request may need under
// limits: its largest table (a FILL_COMMIT's) plus its decoded form. A
// budget smaller than this could never serve such a request.
func MaxRequestCost(l wire.Limits) int64 {
	if l.MaxBatch == 0 {
		l.MaxBatch = wire.DefaultMaxBatch
	}
	t := fillTableMax(l)
	return int64(t) + tableDecodeCost(t)
}

// bufBudget is a byte budget shared by every connection's request
// buffers. Taking and giving back are lock-free; only a request that has
// to wait takes the mutex.
type bufBudget struct {
	limit   int64
	used    atomic.Int64
	waiting atomic.Int32 // requests waiting for bytes
	mu      struct {
		sync.Mutex
		freed chan struct{} // closed (and replaced) when bytes are given back while some wait
	}
	refused atomic.Uint64 // requests refused for want of budget
	waits   atomic.Uint64 // requests that had to wait for budget
}

func newBufBudget(limit int64) *bufBudget {
	b := &bufBudget{limit: limit}
	b.mu.freed = make(chan struct{})
	return b
}

// try takes n bytes if they are free.
func (b *bufBudget) try(n int64) bool {
	for {
		u := b.used.Load()
		if u+n > b.limit {
			return false
		}
		if b.used.CompareAndSwap(u, u+n) {
			return true
		}
	}
}

// acquire takes n bytes, waiting up to wait (or until done closes) for
// them. It reports whether it got them.
func (b *bufBudget) acquire(n int64, wait time.Duration, done <-chan struct{}) bool {
	if b.try(n) {
		return true
	}
	if n > b.limit {
		return false
	}
	b.waits.Add(1)
	b.waiting.Add(1)
	defer b.waiting.Add(-1)
	t := time.NewTimer(wait)
	defer t.Stop()
	for {
		// Take the channel before trying: bytes given back after the try
		// close this channel, since waiting is already counted.
		b.mu.Lock()
		freed := b.mu.freed
		b.mu.Unlock()
		if b.try(n) {
			return true
		}
		select {
		case <-freed:
		case <-t.C:
			return false
		case <-done:
			return false
		}
	}
}

// release gives n bytes back and wakes the waiters, if any.
func (b *bufBudget) release(n int64) {
	if n <= 0 {
		return
	}
	b.used.Add(-n)
	if b.waiting.Load() > 0 {
		b.mu.Lock()
		close(b.mu.freed)
		b.mu.freed = make(chan struct{})
		b.mu.Unlock()
	}
}

// inUse returns the bytes taken.
func (b *bufBudget) inUse() int64 { return b.used.Load() }

// respKeep is the heap a queued GET response may take without budget;
// maxPooledBufs bounds the vectors a pooled response or a connection's
// writer keeps between requests.
const (
	respKeep      = 4 << 10
	maxPooledBufs = 1024
)

// getResponseCost is the heap a GET response of n keys may take until it
// is written: its table (8 + 5n bytes), its write vector (n+2 slices) and
// its pinned views (n), plus the response itself.
func getResponseCost(n int) int64 { return int64(8 + 5*n + 24*(n+2) + 32*n + 256) }

// waitCost is the heap a parked WAIT of n fills takes until it is
// answered: its goroutine, its waiter list and its answer.
func waitCost(n int) int64 { return int64(8<<10 + 48*n + 256) }

// chargeResponse takes budget for a GET response of n keys when it is
// larger than respKeep, and returns what it took; the writer gives it back
// once the response is written.
func (c *conn) chargeResponse(n int) (int64, error) {
	cost := getResponseCost(n)
	if cost <= respKeep {
		return 0, nil
	}
	return cost, c.chargeQueued(cost)
}

// chargeQueued takes n bytes of budget for something the writer gives
// back (a queued response, a parked WAIT).
func (c *conn) chargeQueued(n int64) error {
	if !c.s.bufs.acquire(n, c.s.cfg.BufferWait, c.s.done) {
		c.s.bufs.refused.Add(1)
		return c.errBuffersExhausted()
	}
	return nil
}

// errBuffersExhausted answers a request refused for want of budget.
func (c *conn) errBuffersExhausted() error {
	return &wire.Error{Code: wire.CodeRateLimited, RetryAfter: c.s.cfg.BufferWait,
		Message: "the server's request buffers (request_buffers) are exhausted; retry after the retry-after"}
}

// charge takes n bytes of budget for this connection.
func (c *conn) charge(n int64) error {
	if n <= 0 {
		return nil
	}
	if !c.s.bufs.acquire(n, c.s.cfg.BufferWait, c.s.done) {
		c.s.bufs.refused.Add(1)
		return c.errBuffersExhausted()
	}
	c.held += n
	return nil
}

// chargeTable charges the decoded form of a table of n bytes, when the
// table is larger than keepBuf (a smaller one decodes within the
// connection's own share).
func (c *conn) chargeTable(n uint32) error {
	if int(n) <= keepBuf {
		return nil
	}
	cost := tableDecodeCost(n)
	if err := c.charge(cost); err != nil {
		return err
	}
	c.tableHeld += cost
	return nil
}

// readGrow reads n bytes onto c.body[:off] and returns c.body[:off+n]. The
// buffer grows as bytes arrive: when it is full and more is due, it
// doubles (at least to keepBuf, at most to off+n), charging the budget for
// the growth first. On error it returns what it has read; a *wire.Error
// means no budget (the stream is in sync once the unread rest is skipped),
// any other error is the stream's.
func (c *conn) readGrow(off, n int) ([]byte, error) {
	want := off + n
	b := c.body[:off]
	defer func() { c.body = b }()
	for len(b) < want {
		if len(b) == cap(b) {
			size := min(max(2*cap(b), keepBuf), want)
			if err := c.charge(bufCost(size) - bufCost(cap(b))); err != nil {
				return b, err
			}
			nb := make([]byte, len(b), size)
			copy(nb, b)
			b = nb
		}
		m, err := c.br.Read(b[len(b):min(cap(b), want)])
		b = b[:len(b)+m]
		if err != nil {
			return b, err
		}
	}
	return b, nil
}

// endRequest gives back what the last request took beyond the connection's
// own share: its decoded table always, its body buffer when the connection
// is going idle (nothing more is buffered to read).
func (c *conn) endRequest() {
	if c.tableHeld > 0 {
		c.putReq, c.fillReq = wire.PutRequest{}, wire.FillCommitRequest{}
		c.held -= c.tableHeld
		c.s.bufs.release(c.tableHeld)
		c.tableHeld = 0
	}
	if c.held > 0 && c.br.Buffered() == 0 {
		c.shrink()
	}
}

// shrink gives back every byte of budget the connection holds and drops
// the buffers they paid for.
func (c *conn) shrink() {
	if c.held == 0 {
		return
	}
	if cap(c.body) > keepBuf {
		c.body = nil
	}
	if c.tableHeld > 0 {
		c.putReq, c.fillReq = wire.PutRequest{}, wire.FillCommitRequest{}
		c.tableHeld = 0
	}
	c.s.bufs.release(c.held)
	c.held = 0
}

// connStats are the connection-limit entries of STAT.
func (s *Server) connStats() []wire.StatEntry {
	return []wire.StatEntry{
		{Name: "accept_errors", Value: s.stats.acceptErrors.Load()},
		{Name: "conns_unauthenticated", Value: uint64(max(s.stats.connsUnauth.Load(), 0))},
		{Name: "conns_rejected_unauth", Value: s.stats.unauthRejected.Load()},
		{Name: "conns_hello_timeouts", Value: s.stats.helloTimeouts.Load()},
		{Name: "request_buffer_bytes", Value: uint64(max(s.bufs.inUse(), 0))},
		{Name: "request_buffer_limit_bytes", Value: uint64(s.bufs.limit)},
		{Name: "request_buffer_waits", Value: s.bufs.waits.Load()},
		{Name: "request_buffer_refused", Value: s.bufs.refused.Load()},
	}
}
