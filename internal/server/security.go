package server

import (
	"crypto/tls"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpucache/gpucache/api/wire"
	"github.com/gpucache/gpucache/internal/security"
	"github.com/gpucache/gpucache/internal/security/acl"
	"github.com/gpucache/gpucache/internal/security/antireplay"
	"github.com/gpucache/gpucache/internal/security/auth"
	"github.com/gpucache/gpucache/internal/security/tlsconf"
)

// maxAuthFailures closes a connection after this many failed HELLOs.
const maxAuthFailures = 3

// openGuard is the guard of a server configured without one: open mode, no
// limits. It is shared, immutable and never swapped.
var openGuard = func() *security.Guard {
	g, err := security.NewGuard(&security.Policy{}, nil, nil, nil)
	if err != nil {
		panic(err)
	}
	return g
}()

// tenantCounters are one tenant's own figures: what a non-admin session's
// STAT reports, so no tenant learns another's traffic.
type tenantCounters struct {
	requests    atomic.Uint64
	blocksHit   atomic.Uint64
	blocksMiss  atomic.Uint64
	bytesIn     atomic.Uint64
	bytesOut    atomic.Uint64
	denied      atomic.Uint64
	rateLimited atomic.Uint64
	replays     atomic.Uint64
}

func (t *tenantCounters) entries() []wire.StatEntry {
	return []wire.StatEntry{
		{Name: "tenant_requests", Value: t.requests.Load()},
		{Name: "tenant_blocks_hit", Value: t.blocksHit.Load()},
		{Name: "tenant_blocks_miss", Value: t.blocksMiss.Load()},
		{Name: "tenant_bytes_in", Value: t.bytesIn.Load()},
		{Name: "tenant_bytes_out", Value: t.bytesOut.Load()},
		{Name: "tenant_denied", Value: t.denied.Load()},
		{Name: "tenant_rate_limited", Value: t.rateLimited.Load()},
		{Name: "tenant_replays_rejected", Value: t.replays.Load()},
	}
}

// tenantTable holds every tenant's counters.
type tenantTable struct{ m sync.Map } // tenant -> *tenantCounters

func (t *tenantTable) get(tenant string) *tenantCounters {
	if v, ok := t.m.Load(tenant); ok {
		return v.(*tenantCounters)
	}
	v, _ := t.m.LoadOrStore(tenant, new(tenantCounters))
	return v.(*tenantCounters)
}

// ErrCredentialConflict: a HELLO presented a client certificate and a
// bearer secret of different tenants. It is refused (UNAUTHENTICATED) and
// audited as credential_conflict; neither credential wins.
var ErrCredentialConflict = errors.New("gpucache/server: client certificate and bearer secret name different tenants")

// session is a connection's authenticated state. Reader-owned.
type session struct {
	auth.Session
	epoch     uint64          // guard epoch the session was last checked at
	counters  *tenantCounters // the tenant's counters
	authFails int
	lastAudit time.Time // last rate-limit audit event, to keep floods out of the audit log
}

// helloSession authenticates a HELLO and returns the session it opens.
func (c *conn) helloSession(req *wire.HelloRequest) (auth.Session, error) {
	p := c.s.guard.Policy()
	if p.Open() {
		t := req.Tenant
		if t == "" {
			t = security.DefaultTenant
		}
		return auth.Session{Tenant: t, Method: auth.MethodNone}, nil
	}
	var (
		s   auth.Session
		err error
	)
	switch {
	case req.Auth == wire.AuthBearer:
		s, err = p.Auth.Bearer(req.Credential, c.s.guard.Now())
		if err == nil {
			err = c.certConflict(p, s.Tenant)
		}
	case c.peerNames() != nil:
		s, err = p.Auth.Cert(c.peerNames())
	case c.peer != nil && p.Auth.HasUnixPeer(c.peer.uid):
		// A Unix-socket peer's uid comes from the kernel (SO_PEERCRED).
		s, err = p.Auth.UnixPeer(c.peer.uid)
	default:
		// ErrNoCredential already wraps ErrUnauthenticated: wrapping both
		// would print the "gpucache/auth: unauthenticated" prefix twice.
		err = fmt.Errorf("%w: send a bearer secret in HELLO or connect with a client certificate", auth.ErrNoCredential)
	}
	if err == nil && req.Tenant != "" && req.Tenant != s.Tenant {
		err = fmt.Errorf("%w: HELLO names tenant %q but the credential belongs to another tenant", auth.ErrUnauthenticated, req.Tenant)
	}
	return s, err
}

// certConflict checks a bearer secret of tenant against the connection's
// verified client certificate, for HELLO and RESP AUTH alike: when both
// name a tenant they must name the same one (ErrCredentialConflict). A
// certificate that maps to no tenant does not conflict.
func (c *conn) certConflict(p *security.Policy, tenant string) error {
	names := c.peerNames()
	if names == nil {
		return nil
	}
	if cs, err := p.Auth.Cert(names); err == nil && cs.Tenant != tenant {
		return fmt.Errorf("%w: %w: the client certificate names tenant %q, the bearer secret tenant %q; present one tenant's credentials",
			auth.ErrUnauthenticated, ErrCredentialConflict, cs.Tenant, tenant)
	}
	return nil
}

// peerNames returns the verified client-certificate names of a TLS
// connection, or nil.
func (c *conn) peerNames() []string {
	tc, ok := c.nc.(*tls.Conn)
	if !ok {
		return nil
	}
	return tlsconf.PeerNames(tc.ConnectionState())
}

// authFailed answers a failed HELLO, audits it, and reports whether the
// connection should close.
func (c *conn) authFailed(req *wire.HelloRequest, err error) (*wire.Error, bool) {
	c.sess.authFails++
	c.s.stats.authFailures.Add(1)
	reason := auth.Reason(err)
	if errors.Is(err, ErrCredentialConflict) {
		reason = "credential_conflict"
	} else if !errors.Is(err, auth.ErrExpired) && !errors.Is(err, auth.ErrNoCredential) && !errors.Is(err, auth.ErrUnknown) {
		reason = "tenant_mismatch"
	}
	c.s.guard.Audit().AuthFailure(req.Tenant, reason, c.nc.RemoteAddr().String())
	return wire.Errorf(wire.CodeUnauthenticated, "%v", err), c.sess.authFails >= maxAuthFailures
}

// admit runs the per-request checks every operation after HELLO passes
// before its body is read: the session is still valid, the tenant is within
// its rate limit, and a mutating request carries a fresh stamp.
func (c *conn) admit(op wire.Opcode, stamp *antireplay.Stamp) error {
	g := c.s.guard
	if g == openGuard {
		return nil
	}
	p := g.Policy()
	if ep := g.Epoch(); ep != c.sess.epoch {
		if err := c.recheck(p); err != nil {
			return err
		}
		c.sess.epoch = ep
		c.nsBlob = nil // rights may have changed: check the namespace again
	}
	if !c.sess.NotAfter.IsZero() && !g.Now().Before(c.sess.NotAfter) {
		return c.endSession(auth.ErrExpired)
	}
	c.sess.counters.requests.Add(1)
	if p.Limiter != nil {
		// One op, and a byte bucket that is not in debt (GET bytes are
		// charged once served).
		if ok, wait := p.Limiter.Allow(c.tenant, 1, 1); !ok {
			return c.limited(wait)
		}
	}
	if stamp == nil {
		if op.Mutating() && !p.Open() {
			c.sess.counters.replays.Add(1)
			return wire.Errorf(wire.CodeReplay, "%s needs a replay stamp (FlagStamped) on this server", op)
		}
		return nil
	}
	if err := g.Replay().CheckStamp(c.tenant, *stamp); err != nil {
		c.sess.counters.replays.Add(1)
		c.s.stats.replays.Add(1)
		return wire.Errorf(wire.CodeReplay, "%v", err)
	}
	return nil
}

// recheck re-validates the session after the policy changed.
func (c *conn) recheck(p *security.Policy) error {
	switch {
	case p.Open():
		return nil
	case c.sess.Method == auth.MethodNone:
		return c.endSession(fmt.Errorf("%w: the server now requires authentication", auth.ErrUnauthenticated))
	}
	notAfter, err := p.Auth.Still(c.sess.Session, c.s.guard.Now())
	if err != nil {
		return c.endSession(err)
	}
	c.sess.NotAfter = notAfter
	return nil
}

// endSession closes the session: the client must HELLO again.
func (c *conn) endSession(err error) error {
	c.s.guard.Audit().AuthFailure(c.tenant, auth.Reason(err), c.nc.RemoteAddr().String())
	c.hello = false
	c.nsBlob = nil
	return wire.Errorf(wire.CodeUnauthenticated, "session ended: %v; send HELLO again", err)
}

const rateLimitedMsg = "the session's tenant is over its quota; retry after the retry-after"

// limited answers RATE_LIMITED with the wait, auditing at most one event a
// second per connection so a flood does not flood the audit log too.
func (c *conn) limited(wait time.Duration) error {
	c.sess.counters.rateLimited.Add(1)
	c.s.stats.rateLimited.Add(1)
	if now := time.Now(); now.Sub(c.sess.lastAudit) >= time.Second {
		c.sess.lastAudit = now
		c.s.guard.Audit().RateLimited(c.tenant, wait)
	}
	// A flood is refused at its own rate: no formatting per refusal.
	return &wire.Error{Code: wire.CodeRateLimited, Message: rateLimitedMsg, RetryAfter: max(wait, time.Millisecond)}
}

// chargeBytes takes bytes from the tenant's byte bucket once they are known.
func (c *conn) chargeBytes(n uint64) {
	if p := c.s.guard.Policy(); n > 1 && p.Limiter != nil {
		p.Limiter.Charge(c.tenant, 0, int64(n-1)) // admit took one
	}
}

// allowBytes admits n more bytes for a PUT or FILL_COMMIT whose total is
// known from its table.
func (c *conn) allowBytes(n uint64) error {
	p := c.s.guard.Policy()
	if p.Limiter == nil || n <= 1 {
		return nil
	}
	if ok, wait := p.Limiter.Allow(c.tenant, 0, int64(n-1)); !ok {
		return c.limited(wait)
	}
	return nil
}

// authorize checks that the session may do op, which needs need, on model.
func (c *conn) authorize(op wire.Opcode, model string, need acl.Right) error {
	p := c.s.guard.Policy()
	if p.Open() {
		return nil
	}
	if p.Rights(c.tenant, model).Has(need) {
		return nil
	}
	c.sess.counters.denied.Add(1)
	c.s.stats.denied.Add(1)
	c.s.guard.Audit().Denied(c.tenant, model, need.Name(), op.String())
	return wire.Errorf(wire.CodeDenied, "tenant %q lacks %s on model %q", c.tenant, need.Name(), model)
}

// need is the right each operation needs on the namespace's model. An
// operation whose answer reveals whether a block exists needs read.
func need(op wire.Opcode) acl.Right {
	switch op {
	case wire.OpPut, wire.OpFillCommit, wire.OpFillAbort, wire.OpPutOpaque, wire.OpPutFrom, wire.OpPutOpaqueFrom:
		return acl.Write
	case wire.OpDelete, wire.OpAcquire:
		return acl.Read | acl.Write
	}
	return acl.Read
}
