package server

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/gpucache/gpucache/internal/security"
	"github.com/gpucache/gpucache/internal/security/acl"
	"github.com/gpucache/gpucache/internal/security/audit"
	"github.com/gpucache/gpucache/internal/security/auth"
)

// AUTH binds a RESP connection to a tenant, as HELLO's bearer path does:
// AUTH <tenant> <secret> (the secret must be the named tenant's) or AUTH
// <secret> (the tenant is the secret's). In open mode the connection is
// the default tenant's from the start and AUTH is accepted and ignored.
// A wrong credential answers -WRONGPASS and is audited (tenant named,
// reason, remote address; never the secret or a fingerprint of it); the
// third failure closes the connection.

func sessionOpen() auth.Session {
	return auth.Session{Tenant: security.DefaultTenant, Method: auth.MethodNone}
}

func (rc *respConn) auth(args [][]byte, pending int64) error {
	c := rc.c
	if pending >= 0 || len(args) < 1 || len(args) > 2 {
		rc.errorf("ERR wrong number of arguments for 'auth' command")
		return nil
	}
	if rc.open {
		rc.reply(okReply)
		return nil
	}
	var user string
	secret := args[len(args)-1]
	if len(args) == 2 {
		user = string(args[0])
	}
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
	if err == nil && c.hello && s.Tenant != c.tenant {
		rc.errorf("ERR this connection is tenant %q's; a connection cannot change tenant", c.tenant)
		return nil
	}
	if err != nil {
		c.sess.authFails++
		c.s.stats.authFailures.Add(1)
		c.s.stats.resp.authFailed.Add(1)
		reason := auth.Reason(err)
		if errors.Is(err, ErrCredentialConflict) {
			reason = "credential_conflict"
		} else if !errors.Is(err, auth.ErrExpired) && !errors.Is(err, auth.ErrNoCredential) && !errors.Is(err, auth.ErrUnknown) {
			reason = "tenant_mismatch"
		}
		c.s.guard.Audit().AuthFailure(user, reason, c.nc.RemoteAddr().String())
		rc.errorf("WRONGPASS invalid username-password pair or user is disabled.")
		if c.sess.authFails >= maxRESPAuthFailures {
			return errTooManyAuthFailures
		}
		return nil
	}
	rc.login(s, audit.Secret(bytes.Clone(secret))) // secret aliases the read buffer
	rc.reply(okReply)
	return nil
}

var okReply = []byte("+OK\r\n")

// login opens the session s on the connection and binds its profile.
func (rc *respConn) login(s auth.Session, secret audit.Secret) {
	c := rc.c
	c.hello, c.tenant, c.version = true, s.Tenant, 1
	c.s.authenticated(c)
	c.sess.Session, c.sess.epoch, c.sess.authFails = s, c.s.guard.Epoch(), 0
	c.sess.counters = c.s.tenants.get(s.Tenant)
	rc.secret = secret
	rc.prof = nil
	if p, ok := c.s.cfg.RESPProfiles[s.Tenant]; ok {
		ns := p.Namespace
		ns.Tenant = s.Tenant
		d, err := ns.Digest()
		can, cerr := ns.Canonical()
		if err != nil || cerr != nil {
			c.s.log.Error("RESP profile namespace is invalid; the tenant cannot use RESP", "tenant", s.Tenant, "err", errors.Join(err, cerr))
			return
		}
		rc.prof, rc.ns, rc.nsDig, rc.nsCan = &p, ns, d, can
		c.ns = ns // for refillMiss
		rc.epoch = 0
	}
}

// admit runs the per-command checks of a data command: the session is
// still valid under the current policy (re-checked after a reload), and
// the tenant is within its operation rate. It returns a reply-ready error
// message, or "" to go on; limited reports a rate-limit refusal (which a
// read answers as a miss).
func (rc *respConn) admit() (msg string, limited bool) {
	c := rc.c
	if rc.prof == nil {
		return fmt.Sprintf("ERR tenant %q has no RESP profile on this server", c.tenant), false
	}
	g := c.s.guard
	if g == openGuard {
		c.sess.counters.requests.Add(1)
		return "", false
	}
	p := g.Policy()
	if ep := g.Epoch(); ep != c.sess.epoch {
		if err := c.recheck(p); err != nil {
			return "NOAUTH Authentication required.", false
		}
		c.sess.epoch = ep
	}
	if !c.sess.NotAfter.IsZero() && !g.Now().Before(c.sess.NotAfter) {
		c.endSession(fmt.Errorf("%w: %w", auth.ErrUnauthenticated, auth.ErrExpired))
		return "NOAUTH Authentication required.", false
	}
	c.sess.counters.requests.Add(1)
	if p.Limiter != nil {
		if ok, wait := p.Limiter.Allow(c.tenant, 1, 1); !ok {
			c.limited(wait)
			return "ERR rate limited: the tenant is over its quota; retry later", true
		}
	}
	return "", false
}

// allowed checks that the tenant holds need on the profile's model, under
// the current policy; a refusal is counted and audited.
func (rc *respConn) allowed(op string, need acl.Right) bool {
	c := rc.c
	p := c.s.guard.Policy()
	if p.Open() {
		return true
	}
	if ep := c.s.guard.Epoch(); rc.epoch != ep {
		rc.rights, rc.epoch = p.Rights(c.tenant, rc.ns.ModelID), ep
	}
	if rc.rights.Has(need) {
		return true
	}
	c.sess.counters.denied.Add(1)
	c.s.stats.denied.Add(1)
	c.s.guard.Audit().Denied(c.tenant, rc.ns.ModelID, need.Name(), op)
	return false
}
