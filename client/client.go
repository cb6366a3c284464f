package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpucache/gpucache/api/wire"
)

// Client is a pool of connections to one gpucache server. It is safe for
// concurrent use; calls pipeline on each connection up to the in-flight
// limit.
type Client struct {
	cfg    Config
	slots  []*slot
	rr     atomic.Uint32
	closed atomic.Bool

	ns struct {
		sync.Mutex
		blobs map[Namespace][]byte // guarded by ns; canonical encodings
	}
	// leases remembers which connection took each lease: the server honours
	// a lease only on that connection, so a leased Get is sent there.
	leases struct {
		sync.Mutex
		m map[LeaseID]leaseRoute // guarded by leases
	}
	// regions are the registered regions (region.go).
	regions regionSet
}

type leaseRoute struct {
	conn    *conn
	expires time.Time
}

// maxLeaseRoutes bounds the lease map; past it, expired routes are swept.
const maxLeaseRoutes = 4096

func (c *Client) addLease(id LeaseID, cn *conn, ttl time.Duration) {
	now := time.Now()
	c.leases.Lock()
	defer c.leases.Unlock()
	if c.leases.m == nil {
		c.leases.m = make(map[LeaseID]leaseRoute)
	}
	if len(c.leases.m) >= maxLeaseRoutes {
		for id, r := range c.leases.m {
			if now.After(r.expires) || r.conn.dead() {
				delete(c.leases.m, id)
			}
		}
	}
	c.leases.m[id] = leaseRoute{conn: cn, expires: now.Add(ttl)}
}

// takeLease returns (and forgets) the connection that took lease id.
func (c *Client) takeLease(id LeaseID) *conn {
	c.leases.Lock()
	defer c.leases.Unlock()
	r, ok := c.leases.m[id]
	if !ok {
		return nil
	}
	delete(c.leases.m, id)
	return r.conn
}

// slot holds one pooled connection, redialed lazily after it fails.
type slot struct {
	lock     chan struct{}        // capacity 1: held while dialing
	conn     atomic.Pointer[conn] // nil until dialed
	failedAt atomic.Int64         // unix ns of the last failed dial
}

// redialBackoff is how long after a failed dial a slot is redialed only
// when no other connection is live.
const redialBackoff = 100 * time.Millisecond

// Dial applies cfg's defaults, validates it and opens cfg.Conns
// connections, each with a HELLO exchange. It fails with ErrUnavailable if
// the server cannot be reached, ErrServer if it refuses the session.
func Dial(ctx context.Context, cfg Config) (*Client, error) {
	cfg.applyDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c := &Client{cfg: cfg, slots: make([]*slot, cfg.Conns)}
	c.ns.blobs = make(map[Namespace][]byte)
	for i := range c.slots {
		c.slots[i] = &slot{lock: make(chan struct{}, 1)}
	}
	for _, s := range c.slots {
		if _, err := c.connect(ctx, s); err != nil {
			c.Close()
			return nil, err
		}
	}
	return c, nil
}

// Close closes every connection. Calls in flight fail with ErrClosed (a
// read returns misses). Close is idempotent.
func (c *Client) Close() error {
	c.closed.Store(true)
	for _, s := range c.slots {
		s.lock <- struct{}{}
		if cn := s.conn.Load(); cn != nil {
			cn.close()
		}
		<-s.lock
	}
	return nil
}

// Limits returns the limits of a live connection (the server's HELLO
// limits, MaxInFlight lowered to the client's), or the protocol defaults
// when none is connected.
func (c *Client) Limits() Limits {
	for _, s := range c.slots {
		if cn := s.conn.Load(); cn != nil {
			return cn.limits
		}
	}
	l := wire.DefaultLimits()
	l.MaxInFlight = uint32(min(int(l.MaxInFlight), c.cfg.MaxInFlight))
	return l
}

// ServerName returns the name the server gave in HELLO ("" if none yet).
func (c *Client) ServerName() string {
	for _, s := range c.slots {
		if cn := s.conn.Load(); cn != nil {
			return cn.server
		}
	}
	return ""
}

// ProtocolVersion returns the protocol version the session negotiated in
// HELLO (2 for a server that speaks cluster mode, 1 for an older one), or 0
// when no connection is live.
func (c *Client) ProtocolVersion() uint8 {
	for _, s := range c.slots {
		if cn := s.conn.Load(); cn != nil {
			return cn.version
		}
	}
	return 0
}

// Tenant returns the session tenant: the one the server derived from the
// credentials, or Config.Tenant.
func (c *Client) Tenant() string {
	for _, s := range c.slots {
		if cn := s.conn.Load(); cn != nil && cn.tenant != "" {
			return cn.tenant
		}
	}
	return c.cfg.Tenant
}

// pick returns the least-loaded live connection, starting the scan at a
// round-robin offset. A slot with no live connection is dialed when every
// live one is busy, or when none is live.
func (c *Client) pick(ctx context.Context) (*conn, error) {
	if c.closed.Load() {
		return nil, ErrClosed
	}
	n := len(c.slots)
	start := int(c.rr.Add(1))
	var best *conn
	var idle *slot
	for i := range n {
		s := c.slots[(start+i)%n]
		cn := s.conn.Load()
		if cn == nil || cn.dead() {
			if idle == nil && time.Since(time.Unix(0, s.failedAt.Load())) > redialBackoff {
				idle = s
			}
			continue
		}
		if best == nil || cn.load.Load() < best.load.Load() {
			best = cn
		}
	}
	if best != nil && (idle == nil || best.load.Load() == 0) {
		return best, nil
	}
	if idle == nil { // nothing live, every slot backing off: try anyway
		idle = c.slots[start%n]
	}
	cn, err := c.connect(ctx, idle)
	if err != nil && best != nil {
		return best, nil
	}
	return cn, err
}

// connect returns s's live connection, dialing a new one if it has none.
func (c *Client) connect(ctx context.Context, s *slot) (*conn, error) {
	if cn := s.conn.Load(); cn != nil && !cn.dead() {
		return cn, nil
	}
	select {
	case s.lock <- struct{}{}:
	case <-ctx.Done():
		return nil, ctxError(ctx)
	}
	defer func() { <-s.lock }()
	old := s.conn.Load()
	if old != nil && !old.dead() {
		return old, nil
	}
	if c.closed.Load() {
		return nil, ErrClosed
	}
	if old != nil {
		old.close()
	}
	cn, err := dial(ctx, &c.cfg)
	if err != nil {
		s.failedAt.Store(time.Now().UnixNano())
		return nil, err
	}
	s.conn.Store(cn)
	if c.closed.Load() { // Close may have passed this slot already
		cn.close()
		return nil, ErrClosed
	}
	return cn, nil
}

// withTimeout gives ctx the client's RequestTimeout if it has no deadline.
func (c *Client) withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, c.cfg.RequestTimeout)
}

// nsBlob returns the canonical encoding of ns, cached: engines send the
// same namespace on every call.
func (c *Client) nsBlob(ns Namespace) ([]byte, error) {
	c.ns.Lock()
	b, ok := c.ns.blobs[ns]
	c.ns.Unlock()
	if ok {
		return b, nil
	}
	b, err := ns.Canonical()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	c.ns.Lock()
	if len(c.ns.blobs) >= 256 {
		clear(c.ns.blobs)
	}
	c.ns.blobs[ns] = b
	c.ns.Unlock()
	return b, nil
}

// request is one frame of a logical operation and what became of it.
type request struct {
	frame
	dst   [][]byte           // GET: destination buffers, or nil
	alloc func(n int) []byte // GET without dst: WithAlloc, or nil
	res   []GetResult        // GET: the results this request fills

	cl  *call // the call of the last attempt
	cn  *conn // the connection of the last attempt
	ok  bool  // the call completed: its fields are valid to read
	err error // the request failed (for GET, the results carry reasons)
}

// exec sends reqs pipelined on one connection, then waits for all of
// them. Requests that failed because the connection was lost before they
// were answered are sent once more (on a redialed connection), if ctx
// allows: every operation of the protocol is safe to repeat.
//
// A non-nil pin is the connection to use first (a lease belongs to the
// connection that took it); if it has failed, any connection will do.
func (c *Client) exec(ctx context.Context, reqs []*request, pin *conn) {
	todo := reqs
	for attempt := 0; attempt < 2 && len(todo) > 0; attempt++ {
		if attempt > 0 && ctx.Err() != nil {
			return
		}
		c.execOnce(ctx, todo, pin)
		pin = nil
		var again []*request
		for _, r := range todo {
			if r.retryable() {
				again = append(again, r)
			}
		}
		todo = again
	}
}

func (c *Client) execOnce(ctx context.Context, reqs []*request, pin *conn) {
	cn, err := pin, error(nil)
	if cn == nil || cn.dead() {
		cn, err = c.pick(ctx)
	}
	if err != nil {
		for _, r := range reqs {
			r.fail(err)
		}
		return
	}
	sent := reqs[:0:0]
	for i, r := range reqs {
		r.ok, r.err, r.cn = false, nil, cn
		r.cl = newCall(r.op)
		r.cl.dst, r.cl.res, r.cl.alloc = r.dst, r.res, r.alloc
		inFlight, err := cn.start(ctx, r.cl, &r.frame)
		if !inFlight {
			for _, r := range reqs[i:] {
				r.fail(err)
			}
			break
		}
		sent = append(sent, r)
	}
	for _, r := range sent {
		r.ok = cn.wait(ctx, r.cl)
		switch {
		case r.ok:
			r.err = r.cl.err
		case ctx.Err() != nil:
			r.fail(ctxError(ctx))
		default:
			r.fail(fmt.Errorf("%w: answer abandoned", ErrUnavailable))
		}
	}
}

// fail records err for a request whose call is not readable, and turns
// its GET results into misses.
func (r *request) fail(err error) {
	r.ok, r.err = false, err
	missAll(r.res, err)
}

// retryable reports whether a request failed because its connection was
// lost before any answer to it began (an idle connection the server closed,
// a server restart). A request whose answer was cut short is not repeated.
func (r *request) retryable() bool {
	if !errors.Is(r.err, ErrUnavailable) {
		return false
	}
	// Read cl only if it completed: an abandoned call may still be filling.
	return !r.ok || !r.cl.started
}
