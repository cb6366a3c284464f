package respserve

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/gpucache/gpucache/internal/security"
	"github.com/gpucache/gpucache/internal/security/acl"
	"github.com/gpucache/gpucache/internal/security/audit"
	"github.com/gpucache/gpucache/internal/security/auth"
)

func sessionOpen() auth.Session {
	return auth.Session{Tenant: security.DefaultTenant, Method: auth.MethodNone}
}

func (rc *respConn) auth(args [][]byte, pending int64) error {
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
	s, err, end := rc.c.Authenticate(user, secret)
	if tenant, ok := rc.c.Tenant(); err == nil && ok && s.Tenant != tenant {
		rc.errorf("ERR this connection is tenant %q's; a connection cannot change tenant", tenant)
		return nil
	}
	if err != nil {
		rc.e.stats.authFailed.Add(1)
		rc.errorf("WRONGPASS invalid username-password pair or user is disabled.")
		return end
	}
	rc.login(s, audit.Secret(bytes.Clone(secret))) // secret aliases the read buffer
	rc.reply(okReply)
	return nil
}

var okReply = []byte("+OK\r\n")

// login opens the session s on the connection and binds its profile.
func (rc *respConn) login(s auth.Session, secret audit.Secret) {
	rc.secret = secret
	rc.prof = nil
	p, ok := rc.e.cfg.Profiles[s.Tenant]
	if !ok {
		rc.c.Login(s, nil)
		return
	}
	ns := p.Namespace
	ns.Tenant = s.Tenant
	d, err := ns.Digest()
	_, cerr := ns.Canonical()
	if err != nil || cerr != nil {
		rc.c.Login(s, nil)
		rc.e.cfg.Logger.Error("RESP profile namespace is invalid; the tenant cannot use RESP", "tenant", s.Tenant, "err", errors.Join(err, cerr))
		return
	}
	rc.c.Login(s, &ns)
	rc.prof, rc.ns, rc.nsDig = &p, ns, d
}

// admit runs the per-command checks of a data command (Session.Admit).
// It returns a reply-ready error message, or "" to go on; limited reports
// a rate-limit refusal (which a read answers as a miss).
func (rc *respConn) admit() (msg string, limited bool) {
	if rc.prof == nil {
		tenant, _ := rc.c.Tenant()
		return fmt.Sprintf("ERR tenant %q has no RESP profile on this server", tenant), false
	}
	switch rc.c.Admit() {
	case SessionEnded:
		return "NOAUTH Authentication required.", false
	case RateLimited:
		return "ERR rate limited: the tenant is over its quota; retry later", true
	}
	return "", false
}

// allowed checks that the tenant holds need on the profile's model.
func (rc *respConn) allowed(op string, need acl.Right) bool {
	return rc.c.Allowed(op, rc.ns.ModelID, need)
}

// tenant is the session's tenant (for a reply: empty once it ended).
func (rc *respConn) tenant() string {
	t, _ := rc.c.Tenant()
	return t
}
