package server

import (
	"fmt"
	"io"
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
// Within the budget each owner has a share (ADR 0013): a
// tenant's sessions together may hold at most Config.TenantRequestBuffers,
// and connections that have no session yet (HELLO and PING bodies before
// HELLO succeeds) at most the pre-session bucket, preSessionBuffers: a few
// of the largest bodies such a connection may send. (A bucket of its own,
// rather than the per-address cap on unauthenticated connections, bounds
// them: source addresses are many, so that cap bounds no total. A HELLO
// is too small to need budget, so a full bucket delays no session.) A
// charge must fit its owner's share and the total. The default tenant
// share is a fair one: what the pre-session bucket leaves of the total,
// divided among the tenants (by 2 in open mode), and never less than
// MaxRequestCost, so every tenant can always make its largest request. Shares that sum to at most
// the total make it unexhaustable by one tenant: a tenant at its share
// leaves the others theirs.
//
// A request that cannot get budget (its owner at its share, or the total
// spent) waits up to Config.BufferWait for bytes to be given back, then is
// refused RATE_LIMITED (retry after BufferWait) and the rest of its body is
// skipped, so the stream stays in sync. A refused request (for this or any
// other reason) gives its buffers back before the skip, which lasts as
// long as the client takes to send the rest. The budget thus bounds the memory
// all request buffers take, whatever the clients declare or how slowly
// they send, and a tenant's share bounds what it can take from the others.

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

// preSessionBodies is how many of the largest pre-session bodies the
// pre-session bucket holds at once.
const preSessionBodies = 4

// preSessionBuffers is the pre-session bucket under limits: room for
// preSessionBodies bodies of the largest size a request before HELLO may
// send. A HELLO (a few hundred bytes) needs none of it.
func preSessionBuffers(l wire.Limits) int64 {
	if l.MaxBatch == 0 {
		l.MaxBatch = wire.DefaultMaxBatch
	}
	return preSessionBodies * int64(controlBodyMax(l))
}

// FairRequestBufferShare is the default share of one tenant of a
// request-buffer budget of total bytes under limits, with shares tenants
// (2 in open mode): (total - pre-session bucket) / shares, at least
// MaxRequestCost(limits) and at most total.
func FairRequestBufferShare(total int64, limits wire.Limits, shares int) int64 {
	share := (total - preSessionBuffers(limits)) / int64(max(shares, 1))
	return min(max(share, MaxRequestCost(limits)), total)
}

// preSession is the owner of the charges of a connection without a
// session. A session's tenant is never empty (open mode names
// security.DefaultTenant; authenticated tenants have names).
const preSession = ""

// bufCharge is budget taken by one owner.
type bufCharge struct {
	owner string // a tenant, or preSession
	n     int64
}

// bufBudget is a byte budget shared by every connection's request buffers,
// and within it a share for each owner (a tenant's sessions together, or
// the connections without a session). Taking and giving back lock one
// mutex; only requests above keepBuf do either.
type bufBudget struct {
	limit    int64        // the total
	preLimit int64        // the pre-session bucket
	share    atomic.Int64 // one tenant's share
	used     atomic.Int64 // bytes taken by all owners; written under mu
	waiting  atomic.Int32 // requests waiting for bytes
	mu       struct {
		sync.Mutex
		freed chan struct{} // closed (and replaced) when bytes are given back while some wait
		// owners holds the bytes each owner has taken. An owner is removed
		// when it holds none, so the map holds at most one entry per
		// connection holding budget.
		owners map[string]int64
	}
	refused      atomic.Uint64 // requests refused for want of budget
	shareRefused atomic.Uint64 // of them, refused at their owner's share
	waits        atomic.Uint64 // requests that had to wait for budget
}

func newBufBudget(limit, preLimit, share int64) *bufBudget {
	b := &bufBudget{limit: limit, preLimit: preLimit}
	b.share.Store(share)
	b.mu.freed = make(chan struct{})
	b.mu.owners = make(map[string]int64)
	return b
}

// ownerLimit is the share of owner.
func (b *bufBudget) ownerLimit(owner string) int64 {
	if owner == preSession {
		return b.preLimit
	}
	return b.share.Load()
}

// tryLocked takes c.n bytes for c.owner if they fit both its share and the
// total. atShare reports that the owner's share is what they did not fit.
// Caller holds mu.
func (b *bufBudget) tryLocked(c bufCharge) (ok, atShare bool) {
	held := b.mu.owners[c.owner]
	if held+c.n > b.ownerLimit(c.owner) {
		return false, true
	}
	if b.used.Load()+c.n > b.limit {
		return false, false
	}
	b.mu.owners[c.owner] = held + c.n
	b.used.Add(c.n)
	return true, false
}

// acquire takes c.n bytes for c.owner, waiting up to wait (or until done
// closes) for them. It reports whether it got them and, if not, whether
// the owner's share (rather than the total) was what was short.
func (b *bufBudget) acquire(c bufCharge, wait time.Duration, done <-chan struct{}) (ok, atShare bool) {
	b.mu.Lock()
	ok, atShare = b.tryLocked(c)
	b.mu.Unlock()
	if ok {
		return true, false
	}
	if c.n > b.ownerLimit(c.owner) {
		return false, true
	}
	if c.n > b.limit {
		return false, false
	}
	b.waits.Add(1)
	b.waiting.Add(1)
	defer b.waiting.Add(-1)
	deadline := time.Now().Add(wait)
	t := time.NewTimer(wait)
	defer t.Stop()
	for {
		// Take the channel with the try: bytes given back after it close
		// this channel, since waiting is already counted.
		b.mu.Lock()
		ok, atShare = b.tryLocked(c)
		freed := b.mu.freed
		b.mu.Unlock()
		if ok {
			return true, false
		}
		select {
		case <-freed:
			// A waiter whose wait is over is refused even when bytes
			// came back at the same moment: otherwise which of the
			// waiters due together keeps waiting (and takes what the
			// refused ones give back) would be up to select's coin.
			if !time.Now().Before(deadline) {
				return false, atShare
			}
		case <-t.C:
			return false, atShare
		case <-done:
			return false, atShare
		}
	}
}

// release gives c.n bytes of c.owner back and wakes the waiters, if any.
func (b *bufBudget) release(c bufCharge) {
	if c.n <= 0 {
		return
	}
	b.mu.Lock()
	if held := b.mu.owners[c.owner] - c.n; held > 0 {
		b.mu.owners[c.owner] = held
	} else {
		delete(b.mu.owners, c.owner)
	}
	b.used.Add(-c.n)
	if b.waiting.Load() > 0 {
		close(b.mu.freed)
		b.mu.freed = make(chan struct{})
	}
	b.mu.Unlock()
}

// heldBy returns the bytes owner holds.
func (b *bufBudget) heldBy(owner string) int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.mu.owners[owner]
}

// checkTenantRequestBuffers checks a tenant's share against the total and
// the largest request.
func checkTenantRequestBuffers(share, total int64, l wire.Limits) error {
	if need := MaxRequestCost(l); share < need || share > total {
		return fmt.Errorf("%w: TenantRequestBuffers %d must be between the largest request's %d bytes (max_batch %d) and RequestBuffers %d",
			ErrConfig, share, need, l.MaxBatch, total)
	}
	return nil
}

// SetTenantRequestBuffers sets one tenant's share of the request buffers
// (Config.TenantRequestBuffers), for a reload that changed it or the
// number of tenants. What tenants hold already is kept; the share applies
// to what they take next. A share out of range is ErrConfig and changes
// nothing.
func (s *Server) SetTenantRequestBuffers(share int64) error {
	if err := checkTenantRequestBuffers(share, s.bufs.limit, s.cfg.Limits); err != nil {
		return err
	}
	s.bufs.share.Store(share)
	s.bufs.mu.Lock()
	if s.bufs.waiting.Load() > 0 {
		// A larger share may let a waiting request through.
		close(s.bufs.mu.freed)
		s.bufs.mu.freed = make(chan struct{})
	}
	s.bufs.mu.Unlock()
	return nil
}

// RequestBuffers returns the request-buffer budget and one tenant's share
// of it.
func (s *Server) RequestBuffers() (total, tenantShare int64) {
	return s.bufs.limit, s.bufs.share.Load()
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
func (c *conn) chargeResponse(n int) (bufCharge, error) {
	cost := getResponseCost(n)
	if cost <= respKeep {
		return bufCharge{}, nil
	}
	return c.chargeQueued(cost)
}

// chargeQueued takes n bytes of budget, from the session's share, for
// something the writer gives back (a queued response, a parked WAIT).
func (c *conn) chargeQueued(n int64) (bufCharge, error) {
	ch := bufCharge{owner: c.bufOwner(), n: n}
	if err := c.acquire(ch); err != nil {
		return bufCharge{}, err
	}
	return ch, nil
}

// acquire takes ch from the budget, or answers why it could not.
func (c *conn) acquire(ch bufCharge) error {
	ok, atShare := c.s.bufs.acquire(ch, c.s.cfg.BufferWait, c.s.done)
	if ok {
		return nil
	}
	c.s.bufs.refused.Add(1)
	if atShare {
		c.s.bufs.shareRefused.Add(1)
	}
	return c.errBuffersExhausted(ch.owner, atShare)
}

// errBuffersExhausted answers a request refused for want of budget: its
// owner at its share, or the whole budget spent.
func (c *conn) errBuffersExhausted(owner string, atShare bool) error {
	msg := "the server's request buffers (request_buffers) are exhausted; retry after the retry-after"
	switch {
	case atShare && owner == preSession:
		msg = "the request buffers of connections without a session are exhausted; send a small HELLO first, or retry after the retry-after"
	case atShare:
		msg = "the tenant's share of the request buffers (tenant_request_buffers) is exhausted; retry after the retry-after"
	}
	return &wire.Error{Code: wire.CodeRateLimited, RetryAfter: c.s.cfg.BufferWait, Message: msg}
}

// bufOwner is the owner the connection's charges go to now: its session's
// tenant, or preSession before HELLO succeeds.
func (c *conn) bufOwner() string {
	if c.hello {
		return c.tenant
	}
	return preSession
}

// ownBuffers makes the connection's buffers belong to its current owner
// before a request is read: when HELLO opened a session (or a session
// ended) since its buffers were charged, it gives them back first, so
// every byte is released to the owner that took it. Between requests the
// buffers hold nothing that is needed.
func (c *conn) ownBuffers() {
	if o := c.bufOwner(); o != c.heldBy {
		c.shrink()
		c.heldBy = o
	}
}

// charge takes n bytes of budget for this connection.
func (c *conn) charge(n int64) error {
	if n <= 0 {
		return nil
	}
	if c.held == 0 {
		c.heldBy = c.bufOwner()
	}
	if err := c.acquire(bufCharge{owner: c.heldBy, n: n}); err != nil {
		return err
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
func (c *conn) readGrow(off, n int) ([]byte, error) { return c.readGrowFrom(off, n, c.br) }

// readGrowFrom is readGrow reading from src (a RESP argument left on the
// stream) instead of the connection's buffered reader.
func (c *conn) readGrowFrom(off, n int, src io.Reader) ([]byte, error) {
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
		m, err := src.Read(b[len(b):min(cap(b), want)])
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
		c.putReq, c.fillReq, c.putFromReq, c.putOpaqueFromReq = wire.PutRequest{}, wire.FillCommitRequest{}, wire.PutFromRequest{}, wire.PutOpaqueFromRequest{}
		c.held -= c.tableHeld
		c.s.bufs.release(bufCharge{owner: c.heldBy, n: c.tableHeld})
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
		c.putReq, c.fillReq, c.putFromReq, c.putOpaqueFromReq = wire.PutRequest{}, wire.FillCommitRequest{}, wire.PutFromRequest{}, wire.PutOpaqueFromRequest{}
		c.tableHeld = 0
	}
	c.s.bufs.release(bufCharge{owner: c.heldBy, n: c.held})
	c.held = 0
}

// connStats are the connection-limit entries of STAT.
func (s *Server) connStats() []wire.StatEntry {
	return []wire.StatEntry{
		{Name: "accept_errors", Value: s.stats.acceptErrors.Load()},
		{Name: "conns_unauthenticated", Value: uint64(max(s.stats.connsUnauth.Load(), 0))},
		{Name: "conns_rejected_unauth", Value: s.stats.unauthRejected.Load()},
		{Name: "conns_hello_timeouts", Value: s.stats.helloTimeouts.Load()},
		{Name: "conn_panics", Value: s.stats.connPanics.Load()},
		{Name: "request_buffer_bytes", Value: uint64(max(s.bufs.inUse(), 0))},
		{Name: "request_buffer_limit_bytes", Value: uint64(s.bufs.limit)},
		{Name: "request_buffer_waits", Value: s.bufs.waits.Load()},
		{Name: "request_buffer_refused", Value: s.bufs.refused.Load()},
		{Name: "request_buffer_share_refused", Value: s.bufs.shareRefused.Load()},
		{Name: "request_buffer_tenant_limit_bytes", Value: uint64(s.bufs.share.Load())},
		{Name: "request_buffer_presession_bytes", Value: uint64(max(s.bufs.heldBy(preSession), 0))},
		{Name: "request_buffer_presession_limit_bytes", Value: uint64(s.bufs.preLimit)},
	}
}
