// Package security ties the tenant-isolation parts together for the server:
// a Guard holds the current Policy (credentials, ACL, rate limits), swapped
// atomically on reload, plus the replay window and the audit sink.
//
// The parts live in subpackages: auth (credentials → tenant), acl (rights
// per tenant and model), ratelimit (token buckets), antireplay (stamps and the
// nonce window), seal (HMAC seals), audit (the audit sink) and tlsconf
// (TLS/mTLS with certificate reload).
package security

import (
	"sync/atomic"
	"time"

	"github.com/gpucache/gpucache/internal/security/acl"
	"github.com/gpucache/gpucache/internal/security/antireplay"
	"github.com/gpucache/gpucache/internal/security/audit"
	"github.com/gpucache/gpucache/internal/security/auth"
	"github.com/gpucache/gpucache/internal/security/ratelimit"
)

// DefaultTenant is the session tenant in open mode when HELLO names none.
const DefaultTenant = "default"

// Policy is one immutable generation of the reloadable settings.
type Policy struct {
	// Auth authenticates sessions. Nil is open mode: no credentials, the
	// tenant is what HELLO names (or DefaultTenant), every right is granted
	// and no stamp is required. Open mode is for loopback only; the daemon
	// refuses a remote bind without Auth.
	Auth *auth.Table
	// ACL grants rights per tenant and model. Consulted only with Auth; a
	// nil ACL then denies everything.
	ACL *acl.Policy
	// Limiter bounds each tenant's operations and bytes. Nil: unlimited.
	Limiter *ratelimit.Limiter
}

// Open reports whether p is open mode.
func (p *Policy) Open() bool { return p.Auth == nil }

// Rights returns what tenant may do on model under p.
func (p *Policy) Rights(tenant, model string) acl.Right {
	if p.Open() {
		return acl.Read | acl.Write | acl.Admin
	}
	return p.ACL.Rights(tenant, model)
}

// IsAdmin reports whether tenant holds the admin right on every model.
func (p *Policy) IsAdmin(tenant string) bool {
	return p.Rights(tenant, acl.Wildcard).Has(acl.Admin)
}

// Guard is what the server consults on every request. It is safe for
// concurrent use.
type Guard struct {
	policy atomic.Pointer[Policy]
	epoch  atomic.Uint64
	replay *antireplay.Window
	audit  *audit.Logger
	now    func() time.Time
}

// NewGuard returns a guard with policy p. w checks stamps (nil: a window
// with the default settings); log receives audit events (nil discards);
// now is the clock (nil: time.Now).
func NewGuard(p *Policy, w *antireplay.Window, log *audit.Logger, now func() time.Time) (*Guard, error) {
	if now == nil {
		now = time.Now
	}
	if w == nil {
		cfg := antireplay.Default()
		cfg.Now = now
		var err error
		if w, err = antireplay.New(cfg); err != nil {
			return nil, err
		}
	}
	g := &Guard{replay: w, audit: log, now: now}
	g.policy.Store(p)
	g.epoch.Store(1)
	return g, nil
}

// Policy returns the current policy.
func (g *Guard) Policy() *Policy { return g.policy.Load() }

// Epoch changes every time the policy is swapped; sessions re-check their
// credential and cached rights when it does.
func (g *Guard) Epoch() uint64 { return g.epoch.Load() }

// Swap installs p. Established sessions re-check against it before their
// next request.
func (g *Guard) Swap(p *Policy) {
	g.policy.Store(p)
	g.epoch.Add(1)
}

// Replay returns the replay window.
func (g *Guard) Replay() *antireplay.Window { return g.replay }

// Audit returns the audit sink (possibly nil, which discards).
func (g *Guard) Audit() *audit.Logger { return g.audit }

// Now reads the guard's clock.
func (g *Guard) Now() time.Time { return g.now() }
