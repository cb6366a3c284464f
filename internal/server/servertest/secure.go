package servertest

import (
	"testing"

	"github.com/gpucache/gpucache/api/wire"
	"github.com/gpucache/gpucache/internal/security"
	"github.com/gpucache/gpucache/internal/security/acl"
	"github.com/gpucache/gpucache/internal/security/auth"
	"github.com/gpucache/gpucache/internal/security/ratelimit"
	"github.com/gpucache/gpucache/internal/server"
)

// Tenant is a tenant of a server started with StartSecure.
type Tenant struct {
	Name string
	// Secret is the tenant's bearer secret (at least 16 bytes).
	Secret []byte
	// Rights are "model=rights" entries as in the daemon's config; nil
	// means ["*=rw"].
	Rights []string
	// OpsPerSec and OpsBurst are the tenant's ops rate limit (0: none).
	OpsPerSec float64
	OpsBurst  int
}

// Guard returns a guard that authenticates the tenants by their secrets,
// grants them their rights and applies their rate limits on the real
// clock, with the default replay window and no audit sink.
func Guard(t testing.TB, tenants ...Tenant) *security.Guard {
	t.Helper()
	var at []auth.Tenant
	var rules []string
	limits := map[string]ratelimit.Limit{}
	for _, tn := range tenants {
		at = append(at, auth.Tenant{Name: tn.Name, Secrets: []auth.Credential{{ID: tn.Name + "-1", Secret: tn.Secret}}})
		rights := tn.Rights
		if rights == nil {
			rights = []string{"*=rw"}
		}
		for _, r := range rights {
			rules = append(rules, tn.Name+":"+r)
		}
		if tn.OpsPerSec > 0 {
			limits[tn.Name] = ratelimit.Limit{OpsPerSec: tn.OpsPerSec, OpsBurst: tn.OpsBurst}
		}
	}
	tab, err := auth.NewTable(at)
	if err != nil {
		t.Fatal(err)
	}
	p := &security.Policy{Auth: tab, ACL: ACL(t, rules...)}
	if len(limits) > 0 {
		if p.Limiter, err = ratelimit.New(ratelimit.Config{Tenants: limits}); err != nil {
			t.Fatal(err)
		}
	}
	g, err := security.NewGuard(p, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// ACL builds an access policy from "tenant:model=rights" rules, each
// parsed as the daemon's config parses its tenants' rights.
func ACL(t testing.TB, rules ...string) *acl.Policy {
	t.Helper()
	parsed := make([]acl.Rule, 0, len(rules))
	for _, s := range rules {
		r, err := acl.ParseRule(s)
		if err != nil {
			t.Fatal(err)
		}
		parsed = append(parsed, r)
	}
	pol, err := acl.NewPolicy(parsed...)
	if err != nil {
		t.Fatal(err)
	}
	return pol
}

// StartSecure is Start with authentication on: only the tenants may open
// sessions, with their rights and rate limits (see Guard).
func StartSecure(t testing.TB, addr string, limits wire.Limits, tenants ...Tenant) *Server {
	t.Helper()
	g := Guard(t, tenants...)
	return StartWith(t, addr, limits, func(c *server.Config) { c.Guard = g })
}
