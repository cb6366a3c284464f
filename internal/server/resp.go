package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"

	"github.com/gpucache/gpucache/api/identity"
	"github.com/gpucache/gpucache/internal/hot"
	"github.com/gpucache/gpucache/internal/respserve"
	"github.com/gpucache/gpucache/internal/security/acl"
	"github.com/gpucache/gpucache/internal/security/auth"
)

// The RESP2 endpoint (docs/RESP.md; ADR 0016) is package respserve's:
// command dispatch, AUTH, profiles, the semantics of each command, replies
// and its figures. A RESP connection is a *conn of the server's (so
// MaxConns, MaxUnauthPerAddr, HelloTimeout as the AUTH timeout,
// IdleTimeout, ReadTimeout, WriteTimeout and Shutdown apply to it
// unchanged), run by respserve's loop instead of the native reader and
// writer. This file is the server's side of that boundary: respConn
// implements respserve.Conn over a *conn, the session and the blocks of
// the hot tier and Config.Lower.

// RESPProfile binds what a tenant stores over RESP to a namespace, and
// says which values it accepts (respserve.Profile).
type RESPProfile = respserve.Profile

// MaxRESPMetadata bounds the value of an in-process "...metadata" key
// (respserve.MaxMetadata).
const MaxRESPMetadata = respserve.MaxMetadata

// maxRESPAuthFailures closes a RESP connection after this many failed
// AUTHs (as maxAuthFailures for HELLO).
const maxRESPAuthFailures = maxAuthFailures

// respForwardTimeout bounds one forwarded RESP operation (and so the time
// a dead owner can hold a command before it becomes a miss).
const respForwardTimeout = coldTimeout

// newRESPEndpoint is the server's RESP endpoint under cfg.
func (s *Server) newRESPEndpoint() *respserve.Endpoint {
	return respserve.New(respserve.Config{
		Profiles:       s.cfg.RESPProfiles,
		MaxValue:       s.cfg.Limits.MaxPayload,
		WriteTimeout:   s.cfg.WriteTimeout,
		Forwarder:      s.cfg.Forwarder,
		ForwardTimeout: respForwardTimeout,
		Buffers:        s.bufs,
		BufferWait:     s.cfg.BufferWait,
		Done:           s.done,
		Logger:         s.log,
		Handling: func(cmd string) {
			if h := s.cfg.Hooks.Handling; h != nil {
				h(cmd)
			}
		},
	})
}

// ServeRESP accepts RESP2 connections on ln until Shutdown, as Serve does
// for the native protocol. It closes ln.
func (s *Server) ServeRESP(ln net.Listener) error {
	return s.serve(ln, func(c *conn) {
		s.resp.Serve(c.nc, c.br, &respConn{c: c})
		s.forget(c)
	})
}

// respConn is the server's side of one RESP connection
// (respserve.Conn). Its methods run on the connection's goroutine.
type respConn struct {
	c      *conn
	rights acl.Right // the tenant's rights on the profile's model
	epoch  uint64    // guard epoch rights were computed at; 0: none yet
}

var _ respserve.Conn = (*respConn)(nil)

func (rc *respConn) Await() (bool, error) { return rc.c.awaitRequest() }

func (rc *respConn) ReadFailed(err error) { rc.c.timedOut(err) }

func (rc *respConn) Panicked(v any) error { return rc.c.panicked("resp", v) }

func (rc *respConn) ReadBuffered(n int, src io.Reader) ([]byte, error) {
	return rc.c.readGrowFrom(0, n, src)
}

func (rc *respConn) ReleaseBuffers() { rc.c.shrink() }

func (rc *respConn) Open() bool { return rc.c.s.guard.Policy().Open() }

func (rc *respConn) Authenticate(user string, secret []byte) (auth.Session, error, error) {
	c := rc.c
	p := c.s.guard.Policy()
	s, err := p.Auth.Bearer(secret, c.s.guard.Now())
	if err == nil {
		// Over TLS with a client certificate of another tenant: refused,
		// as HELLO refuses it; neither credential wins.
		err = c.certConflict(p, s.Tenant)
	}
	if err == nil && user != "" && user != s.Tenant {
		err = fmt.Errorf("%w: AUTH names tenant %q but the credential belongs to another tenant", auth.ErrUnauthenticated, user)
	}
	if err == nil {
		return s, nil, nil
	}
	c.sess.authFails++
	c.s.stats.authFailures.Add(1)
	reason := auth.Reason(err)
	if errors.Is(err, ErrCredentialConflict) {
		reason = "credential_conflict"
	} else if !errors.Is(err, auth.ErrExpired) && !errors.Is(err, auth.ErrNoCredential) && !errors.Is(err, auth.ErrUnknown) {
		reason = "tenant_mismatch"
	}
	c.s.guard.Audit().AuthFailure(user, reason, c.nc.RemoteAddr().String())
	if c.sess.authFails >= maxRESPAuthFailures {
		return s, err, errTooManyAuthFailures
	}
	return s, err, nil
}

func (rc *respConn) Login(s auth.Session, ns *identity.Namespace) {
	c := rc.c
	c.hello, c.tenant, c.version = true, s.Tenant, 1
	c.s.authenticated(c)
	c.sess.Session, c.sess.epoch, c.sess.authFails = s, c.s.guard.Epoch(), 0
	c.sess.counters = c.s.tenants.get(s.Tenant)
	if ns != nil {
		c.ns = *ns // for refillMiss
		rc.epoch = 0
	}
}

// Tenant returns the session's tenant (the last session's once it ended)
// and whether the session is open.
func (rc *respConn) Tenant() (string, bool) { return rc.c.tenant, rc.c.hello }

func (rc *respConn) Admit() respserve.Admission {
	c := rc.c
	g := c.s.guard
	if g == openGuard {
		c.sess.counters.requests.Add(1)
		return respserve.Admitted
	}
	p := g.Policy()
	if ep := g.Epoch(); ep != c.sess.epoch {
		if err := c.recheck(p); err != nil {
			return respserve.SessionEnded
		}
		c.sess.epoch = ep
	}
	if !c.sess.NotAfter.IsZero() && !g.Now().Before(c.sess.NotAfter) {
		c.endSession(auth.ErrExpired)
		return respserve.SessionEnded
	}
	c.sess.counters.requests.Add(1)
	if p.Limiter != nil {
		if ok, wait := p.Limiter.Allow(c.tenant, 1, 1); !ok {
			c.limited(wait)
			return respserve.RateLimited
		}
	}
	return respserve.Admitted
}

func (rc *respConn) Allowed(op, model string, need acl.Right) bool {
	c := rc.c
	p := c.s.guard.Policy()
	if p.Open() {
		return true
	}
	if ep := c.s.guard.Epoch(); rc.epoch != ep {
		rc.rights, rc.epoch = p.Rights(c.tenant, model), ep
	}
	if rc.rights.Has(need) {
		return true
	}
	c.sess.counters.denied.Add(1)
	c.s.stats.denied.Add(1)
	c.s.guard.Audit().Denied(c.tenant, model, need.Name(), op)
	return false
}

func (rc *respConn) AllowBytes(n int64) bool {
	c := rc.c
	if p := c.s.guard.Policy(); p.Limiter != nil && n > 1 {
		if ok, wait := p.Limiter.Allow(c.tenant, 0, n-1); !ok {
			c.limited(wait)
			return false
		}
	}
	return true
}

func (rc *respConn) Store(b respserve.Block, n int, fill func([]byte) error) (respserve.StoreResult, string, error) {
	c := rc.c
	if st := c.clusterState(); st.storesNothing() {
		c.s.stats.modeRefused.Add(1)
		return respserve.Dropped, "control mode " + st.mode.String(), nil
	}
	res, err := c.s.store.ReserveBlock(b.Digest, b.Key, identity.BlockKey{}, hot.BlockMeta{Tenant: c.tenant}, n)
	if h := c.s.cfg.Hooks.Reserved; h != nil {
		h(c.tenant, err)
	}
	if err != nil {
		switch {
		case errors.Is(err, hot.ErrExists):
			return respserve.Exists, "", nil
		case errors.Is(err, hot.ErrTooLarge):
			return respserve.TooLarge, "", nil
		case errors.Is(err, hot.ErrTenantQuota):
			return respserve.Dropped, "tenant share of the hot tier", nil
		default:
			return respserve.Dropped, "no space in the hot tier", nil
		}
	}
	if err := fill(res.Buf); err != nil {
		c.s.store.Abort(res)
		return 0, "", err
	}
	if c.s.sealer != nil {
		if err := c.s.sealer.tag(c.s.store, res, b.Digest, b.Key); err != nil {
			c.s.store.Abort(res)
			c.s.log.Error("cannot seal a block; not stored", "err", err)
			return respserve.Dropped, "sealing failed", nil
		}
	}
	c.s.store.Commit(res)
	c.s.stored(identity.CacheIdentity{Namespace: b.Namespace, Opaque: b.Name}, b.Digest, b.Key)
	c.s.stats.bytesIn.Add(uint64(n))
	c.sess.counters.bytesIn.Add(uint64(n))
	return respserve.Stored, "", nil
}

func (rc *respConn) Load(b respserve.Block, write func([]byte) error) (bool, error) {
	c := rc.c
	if st := c.clusterState(); st.unknown() {
		c.s.stats.modeRefused.Add(1)
		return false, nil
	}
	v, ok := c.acquireOrRefill(b.Digest, b.Key)
	if ok && c.s.sealer != nil {
		if id, err := c.s.sealer.verify(c.s.store, v, b.Digest, b.Key); err != nil {
			c.sealFailed(v, b.Digest, b.Key, id, err)
			ok = false
		}
	}
	if !ok {
		return false, nil
	}
	err := write(v.Bytes)
	c.s.store.Release(v)
	return true, err
}

func (rc *respConn) Present(b respserve.Block) bool {
	c := rc.c
	if c.clusterState().unknown() {
		return false
	}
	one := [1]identity.BlockKey{b.Key}
	if hits, _, _ := c.s.store.Lookup(b.Digest, one[:], 0, false); hits == 1 {
		return true
	}
	return c.s.cfg.Lower != nil && c.s.cfg.Lower.Present(b.Digest, b.Key)
}

func (rc *respConn) Delete(b respserve.Block) bool {
	c := rc.c
	ctx, cancel := context.WithTimeout(context.Background(), coldTimeout)
	deleted, _ := c.s.store.DeleteWait(ctx, b.Digest, b.Key) // a block being written to a reader
	cancel()
	if lo := c.s.cfg.Lower; lo != nil {
		ctx, cancel := context.WithTimeout(context.Background(), coldTimeout)
		known, err := lo.Delete(ctx, b.Namespace, b.Digest, b.Key)
		cancel()
		if err != nil {
			c.s.log.Warn("RESP DEL: cannot hide the block below DRAM", "err", err)
		}
		deleted = deleted || known
	}
	return deleted
}

func (rc *respConn) Hit(n int, written bool) {
	c := rc.c
	if written {
		c.s.stats.bytesOut.Add(uint64(n))
	}
	c.s.stats.blocksHit.Add(1)
	c.sess.counters.blocksHit.Add(1)
	c.sess.counters.bytesOut.Add(uint64(n))
	c.chargeBytes(uint64(n))
}

func (rc *respConn) Miss() {
	rc.c.s.stats.blocksMiss.Add(1)
	rc.c.sess.counters.blocksMiss.Add(1)
}

func (rc *respConn) StoredRemote(n int64) { rc.c.sess.counters.bytesIn.Add(uint64(n)) }

func (rc *respConn) Begin(cmd respserve.Timed) {
	op := latRESPGet
	if cmd == respserve.TimedSet {
		op = latRESPSet
	}
	rc.c.startTiming(op)
}

func (rc *respConn) End(forwarded bool) {
	if forwarded {
		rc.c.timing.tier = tierForwarded
	}
	rc.c.endTiming()
}
