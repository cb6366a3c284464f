package daemon

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"reflect"
	"strings"
	"sync"
	"time"

	"github.com/gpucache/gpucache/internal/admin"
	"github.com/gpucache/gpucache/internal/cold/crypt"
	"github.com/gpucache/gpucache/internal/config"
	"github.com/gpucache/gpucache/internal/security"
	"github.com/gpucache/gpucache/internal/security/acl"
	"github.com/gpucache/gpucache/internal/security/audit"
	"github.com/gpucache/gpucache/internal/security/auth"
	"github.com/gpucache/gpucache/internal/security/nodesec"
	"github.com/gpucache/gpucache/internal/security/ratelimit"
	"github.com/gpucache/gpucache/internal/security/seal"
	"github.com/gpucache/gpucache/internal/security/tlsconf"
)

// secure is the node's security state: the guard the server consults, the
// seal keyring, the TLS material, and the audit sink. reload re-applies a
// new config to all of them without a restart.
type secure struct {
	guard   *security.Guard
	keyring *seal.Keyring // nil: cold manifests are not sealed
	// coldKeys encrypt cold packs at rest (coldcrypt.go); nil: not
	// encrypted.
	coldKeys *crypt.Keyring
	tls      *tlsconf.Server // nil: plain TCP
	// adminTLS is the admin listener's: the same certificate, client
	// certificates optional (admin_tls_client_ca). Nil: plain HTTP.
	adminTLS *tlsconf.Server
	audit    *audit.Logger // audit_log off: audit.Discard, which only counts
	log      *slog.Logger
	getenv   func(string) (string, bool)
	closeFn  func() error
	recent   *admin.RecentLines // the audit sink's last lines, for the status page

	mu  sync.Mutex
	cur config.Config // guarded by mu: the config last applied
}

// openAudit opens the audit sink the config names; every event is also
// kept in recent (the status page's last events). A file sink is
// size-bounded (audit_max_bytes, audit_max_files); every sink throttles
// auth_failure lines per source (audit_auth_failure_*). With the sink off
// failures are still counted. The close function writes the throttle's
// last summaries, then closes the file.
func openAudit(cfg config.Config, stderr io.Writer, recent *admin.RecentLines) (*audit.Logger, func() error, error) {
	opts := audit.Options{AuthFailures: audit.Throttle{Lines: cfg.AuditAuthFailuresPerSource,
		Interval: cfg.AuditAuthFailureInterval, Sources: cfg.AuditAuthFailureSources}}
	switch cfg.AuditLog {
	case "off":
		return audit.Discard(), func() error { return nil }, nil
	case "", "stderr":
		l := audit.NewWithOptions(io.MultiWriter(recent, stderr), opts)
		return l, func() error { l.Close(); return nil }, nil
	}
	f, err := audit.OpenFile(cfg.AuditLog, int64(cfg.AuditMaxBytes), cfg.AuditMaxFiles)
	if err != nil {
		return nil, nil, fmt.Errorf("audit_log %s: %w", cfg.AuditLog, err)
	}
	opts.File = f
	// recent first: io.MultiWriter stops at the first writer that fails,
	// and a full disk must not blank the status page too.
	l := audit.NewWithOptions(io.MultiWriter(recent, f), opts)
	return l, func() error { l.Close(); return f.Close() }, nil
}

func newSecure(cfg config.Config, log *slog.Logger, stderr io.Writer, getenv func(string) (string, bool)) (*secure, error) {
	if getenv == nil {
		getenv = os.LookupEnv
	}
	recent := admin.NewRecentLines(auditRecent)
	al, closeFn, err := openAudit(cfg, stderr, recent)
	if err != nil {
		return nil, err
	}
	s := &secure{audit: al, log: log, getenv: getenv, closeFn: closeFn, cur: cfg, recent: recent}
	// nodesec.Load is what gpucache doctor runs: the same secrets read,
	// the same checks, the same errors.
	m, err := nodesec.Load(cfg, getenv)
	if err != nil {
		closeFn()
		return nil, err
	}
	if s.guard, err = security.NewGuard(m.Policy, m.Replay, al, nil); err != nil {
		closeFn()
		return nil, err
	}
	s.keyring, s.coldKeys, s.tls, s.adminTLS = m.Seal, m.Cold, m.TLS, m.AdminTLS
	return s, nil
}

func (s *secure) Close() error { return s.closeFn() }

// reload applies a new config: tenants, secrets, rights and limits; seal
// keys; TLS certificates. Settings that need a restart are reported, not
// applied. Every change is audited; on error nothing changes.
func (s *secure) reload(next config.Config, actor string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	prev := s.cur
	pol, err := s.prepareReload(prev, next)
	if err != nil {
		s.audit.AdminAction(actor, "reload_refused", slog.String("reason", err.Error()))
		return err
	}
	if err := s.rotateSealKey(next); err != nil {
		return err
	}
	if err := s.rotateColdKey(next); err != nil {
		return err
	}
	s.guard.Swap(pol)
	for _, ch := range secretChanges(prev, next) {
		s.audit.Rotation(ch[0], ch[1])
	}
	if s.tls != nil {
		s.audit.Rotation("tls_certificate", s.tls.Describe())
	}
	if restart := restartOnly(prev, next); len(restart) > 0 {
		s.log.Warn("reload: these settings changed but apply only after a restart", "settings", strings.Join(restart, ","))
	}
	s.cur = next
	s.audit.AdminAction(actor, "reload", slog.Int("tenants", len(next.Tenants)))
	s.log.Info("configuration reloaded", "actor", actor, "tenants", len(next.Tenants))
	return nil
}

// prepareReload checks that next can be applied without a restart, builds
// its policy and reloads the TLS certificates; an error refuses the
// reload. s.mu is held.
func (s *secure) prepareReload(prev, next config.Config) (*security.Policy, error) {
	if next.AuthEnabled() != prev.AuthEnabled() || next.TLSEnabled() != prev.TLSEnabled() ||
		(len(next.SealKeys) > 0) != (s.keyring != nil) || next.AuditLog != prev.AuditLog ||
		(len(next.ColdEncryptionKeys) > 0) != (s.coldKeys != nil) {
		return nil, errors.New("turning authentication, TLS, sealing, cold encryption or the audit sink on or off needs a restart")
	}
	if fit := s.guard.Replay().MaxTenants(); len(next.Tenants) > fit {
		// The replay window's size is fixed at start (replay_* need a restart).
		return nil, fmt.Errorf("%d tenants, but the running replay window holds nonces for %d (replay_max_nonces / replay_tenant_nonces at start): raise replay_max_nonces and restart", len(next.Tenants), fit)
	}
	var reuse *ratelimit.Limiter
	if reflect.DeepEqual(nodesec.Limits(prev), nodesec.Limits(next)) {
		reuse = s.guard.Policy().Limiter
	}
	pol, err := nodesec.Policy(next, s.getenv, reuse)
	if err != nil {
		return nil, err
	}
	if s.tls != nil {
		if err := s.tls.Reload(); err != nil {
			return nil, err
		}
	}
	if s.adminTLS != nil {
		if err := s.adminTLS.Reload(); err != nil {
			return nil, fmt.Errorf("admin listener: %w", err)
		}
	}
	return pol, nil
}

// rotateSealKey makes the last of next's seal keys current when it is a
// new one; the previous keys still verify for seal_grace. s.mu is held.
func (s *secure) rotateSealKey(next config.Config) error {
	if s.keyring == nil {
		return nil
	}
	last := next.SealKeys[len(next.SealKeys)-1]
	if seal.KeyID(last.ID) == s.keyring.Current() {
		return nil
	}
	b, _, err := last.Read(s.getenv)
	if err != nil {
		return err
	}
	if err := s.keyring.Rotate(seal.KeyID(last.ID), b, next.SealGrace); err != nil {
		return fmt.Errorf("seal key %q: %w", last.ID, err)
	}
	s.audit.Rotation("seal_key", last.ID)
	return nil
}

// secretChanges lists (kind, "tenant/id") for every secret added or removed.
func secretChanges(prev, next config.Config) [][2]string {
	ids := func(c config.Config) map[string]bool {
		m := map[string]bool{}
		for _, t := range c.Tenants {
			for _, s := range t.Secrets {
				m[t.Name+"/"+s.ID] = true
			}
		}
		return m
	}
	p, n := ids(prev), ids(next)
	var out [][2]string
	for id := range n {
		if !p[id] {
			out = append(out, [2]string{"tenant_secret_added", id})
		}
	}
	for id := range p {
		if !n[id] {
			out = append(out, [2]string{"tenant_secret_removed", id})
		}
	}
	return out
}

// restartOnly names the settings that differ but cannot change live.
func restartOnly(prev, next config.Config) []string {
	var out []string
	pv, nv := reflect.ValueOf(prev), reflect.ValueOf(next)
	live := map[string]bool{"Tenants": true, "SealKeys": true, "SealGrace": true, "LogLevel": true,
		"ColdEncryptionKeys": true, "ColdEncryptionGrace": true,
		"TenantHoldBytes": true, "TenantFills": true, "TenantRequestBuffers": true}
	for i := 0; i < pv.NumField(); i++ {
		f := pv.Type().Field(i)
		if live[f.Name] {
			continue
		}
		if !reflect.DeepEqual(pv.Field(i).Interface(), nv.Field(i).Interface()) {
			out = append(out, f.Tag.Get("yaml"))
		}
	}
	return out
}

// authorizeAdmin is the admin listener's check: an admin tenant's bearer
// secret (Authorization: Bearer …) or client certificate; in open mode
// (loopback only) everyone local is an admin.
func (s *secure) authorizeAdmin(r *http.Request) (string, error) {
	p := s.guard.Policy()
	if p.Open() {
		return "local", nil
	}
	var (
		sess auth.Session
		err  error
	)
	switch {
	case strings.HasPrefix(r.Header.Get("Authorization"), "Bearer "):
		sess, err = p.Auth.Bearer([]byte(strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")), time.Now())
	case r.TLS != nil && len(tlsconf.PeerNames(*r.TLS)) > 0:
		sess, err = p.Auth.Cert(tlsconf.PeerNames(*r.TLS))
	default:
		err = auth.ErrNoCredential
	}
	if err != nil {
		s.audit.AuthFailure("", auth.Reason(err), r.RemoteAddr)
		return "", errors.New("authentication required: send an admin tenant's secret as Authorization: Bearer, or a client certificate")
	}
	if !p.IsAdmin(sess.Tenant) {
		s.audit.Denied(sess.Tenant, acl.Wildcard, "admin", r.Method+" "+r.URL.Path)
		return "", fmt.Errorf("%w: tenant %q", admin.ErrForbidden, sess.Tenant)
	}
	return sess.Tenant, nil
}

// tlsConfig returns the listeners' TLS config, or nil.
// adminTLSConfig is the admin listener's TLS config, or nil without TLS.
func (s *secure) adminTLSConfig() *tls.Config {
	if s.adminTLS == nil {
		return nil
	}
	return s.adminTLS.Config()
}

func (s *secure) tlsConfig() *tls.Config {
	if s.tls == nil {
		return nil
	}
	return s.tls.Config()
}

// certExpiry is the NotAfter of the certificate each TLS listener serves
// now (after any reload), for /metrics; empty on plain TCP. The RESP
// listener serves the data listener's certificate.
func (s *secure) certExpiry() []admin.CertExpiry {
	var out []admin.CertExpiry
	if s.tls != nil {
		out = append(out, admin.CertExpiry{Listener: "data", NotAfter: s.tls.NotAfter()})
	}
	if s.adminTLS != nil {
		out = append(out, admin.CertExpiry{Listener: "admin", NotAfter: s.adminTLS.NotAfter()})
	}
	return out
}
