package server

import (
	"fmt"
	"io"

	"github.com/gpucache/gpucache/api/wire"
	"github.com/gpucache/gpucache/internal/reqbuf"
)

// A connection's charges to the request-buffer budget (internal/reqbuf).
//
// This file holds only the conn methods that charge the server's
// reqbuf.Budget for what a connection holds: its request buffer as it
// grows (readGrow), the decoded form of a large table (chargeTable), a
// queued GET response or a parked WAIT (chargeQueued), and their release
// (endRequest, shrink, the writer). The budget itself, its shares, its
// waiting rule and the cost of each thing charged are package reqbuf's.
//
// A connection reads every request body it must hold into one scratch
// buffer, conn.body; its first reqbuf.Keep bytes are the connection's own,
// every byte above them is charged before it is allocated. The decoded
// table is given back after its request, the buffer when the connection
// goes idle (nothing more buffered to read), both when it closes. The
// writer drops a vector (its own, or a pooled response's) larger than
// maxPooledBufs after use.
//
// A request that cannot get budget waits up to Config.BufferWait, then is
// refused RATE_LIMITED (retry after BufferWait) and the rest of its body is
// skipped, so the stream stays in sync. A refused request (for this or any
// other reason) gives its buffers back before the skip, which lasts as
// long as the client takes to send the rest.

// SetTenantRequestBuffers sets one tenant's share of the request buffers
// (Config.TenantRequestBuffers), for a reload that changed it or the
// number of tenants. What tenants hold already is kept; the share applies
// to what they take next. A share out of range is ErrConfig and changes
// nothing.
func (s *Server) SetTenantRequestBuffers(share int64) error {
	if err := checkTenantRequestBuffers(share, s.bufs.Limit(), s.cfg.Limits); err != nil {
		return err
	}
	s.bufs.SetShare(share)
	return nil
}

// checkTenantRequestBuffers checks a tenant's share against the total and
// the largest request (reqbuf.CheckShare); a share out of range is
// ErrConfig.
func checkTenantRequestBuffers(share, total int64, l wire.Limits) error {
	if err := reqbuf.CheckShare(share, total, l); err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	return nil
}

// RequestBuffers returns the request-buffer budget and one tenant's share
// of it.
func (s *Server) RequestBuffers() (total, tenantShare int64) {
	return s.bufs.Limit(), s.bufs.Share()
}

// respKeep is the heap a queued GET response may take without budget;
// maxPooledBufs bounds the vectors a pooled response or a connection's
// writer keeps between requests.
const (
	respKeep      = 4 << 10
	maxPooledBufs = 1024
)

// bufCharge is budget taken by one owner, to be given back as one.
type bufCharge struct {
	owner string // a tenant, or reqbuf.PreSession
	n     int64
}

// releaseCharge gives ch back to the server's budget.
func (s *Server) releaseCharge(ch bufCharge) { s.bufs.Release(ch.owner, ch.n) }

// chargeResponse takes budget for a GET response of n keys when it is
// larger than respKeep, and returns what it took; the writer gives it back
// once the response is written.
func (c *conn) chargeResponse(n int) (bufCharge, error) {
	cost := reqbuf.ResponseCost(n)
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
	ok, atShare := c.s.bufs.Acquire(ch.owner, ch.n, c.s.cfg.BufferWait, c.s.done)
	if ok {
		return nil
	}
	c.s.bufs.Refused(atShare)
	return c.errBuffersExhausted(ch.owner, atShare)
}

// errBuffersExhausted answers a request refused for want of budget: its
// owner at its share, or the whole budget spent.
func (c *conn) errBuffersExhausted(owner string, atShare bool) error {
	msg := "the server's request buffers (request_buffers) are exhausted; retry after the retry-after"
	switch {
	case atShare && owner == reqbuf.PreSession:
		msg = "the request buffers of connections without a session are exhausted; send a small HELLO first, or retry after the retry-after"
	case atShare:
		msg = "the tenant's share of the request buffers (tenant_request_buffers) is exhausted; retry after the retry-after"
	}
	return &wire.Error{Code: wire.CodeRateLimited, RetryAfter: c.s.cfg.BufferWait, Message: msg}
}

// bufOwner is the owner the connection's charges go to now: its session's
// tenant, or reqbuf.PreSession before HELLO succeeds.
func (c *conn) bufOwner() string {
	if c.hello {
		return c.tenant
	}
	return reqbuf.PreSession
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
// table is larger than reqbuf.Keep (a smaller one decodes within the
// connection's own share).
func (c *conn) chargeTable(n uint32) error {
	if int(n) <= reqbuf.Keep {
		return nil
	}
	cost := reqbuf.TableDecodeCost(n)
	if err := c.charge(cost); err != nil {
		return err
	}
	c.tableHeld += cost
	return nil
}

// readGrow reads n bytes onto c.body[:off] and returns c.body[:off+n]. The
// buffer grows as bytes arrive: when it is full and more is due, it
// doubles (at least to reqbuf.Keep, at most to off+n), charging the budget for
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
			size := min(max(2*cap(b), reqbuf.Keep), want)
			if err := c.charge(reqbuf.BufCost(size) - reqbuf.BufCost(cap(b))); err != nil {
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
		c.s.bufs.Release(c.heldBy, c.tableHeld)
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
	if cap(c.body) > reqbuf.Keep {
		c.body = nil
	}
	if c.tableHeld > 0 {
		c.putReq, c.fillReq, c.putFromReq, c.putOpaqueFromReq = wire.PutRequest{}, wire.FillCommitRequest{}, wire.PutFromRequest{}, wire.PutOpaqueFromRequest{}
		c.tableHeld = 0
	}
	c.s.bufs.Release(c.heldBy, c.held)
	c.held = 0
}

// connStats are the connection-limit entries of STAT.
func (s *Server) connStats() []wire.StatEntry {
	b := s.bufs.Stats()
	return []wire.StatEntry{
		{Name: "accept_errors", Value: s.stats.acceptErrors.Load()},
		{Name: "conns_unauthenticated", Value: uint64(max(s.stats.connsUnauth.Load(), 0))},
		{Name: "conns_rejected_unauth", Value: s.stats.unauthRejected.Load()},
		{Name: "conns_hello_timeouts", Value: s.stats.helloTimeouts.Load()},
		{Name: "conn_panics", Value: s.stats.connPanics.Load()},
		{Name: "request_buffer_bytes", Value: uint64(max(b.InUse, 0))},
		{Name: "request_buffer_limit_bytes", Value: uint64(b.Limit)},
		{Name: "request_buffer_waits", Value: b.Waits},
		{Name: "request_buffer_refused", Value: b.Refused},
		{Name: "request_buffer_share_refused", Value: b.ShareRefused},
		{Name: "request_buffer_tenant_limit_bytes", Value: uint64(b.Share)},
		{Name: "request_buffer_presession_bytes", Value: uint64(max(b.PreSessionHeld, 0))},
		{Name: "request_buffer_presession_limit_bytes", Value: uint64(b.PreSessionLimit)},
	}
}
