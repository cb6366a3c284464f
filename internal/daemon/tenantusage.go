package daemon

import (
	"sync/atomic"

	"github.com/gpucache/gpucache/api/wire"
	"github.com/gpucache/gpucache/internal/admin"
	"github.com/gpucache/gpucache/internal/cold/tier"
	"github.com/gpucache/gpucache/internal/config"
	"github.com/gpucache/gpucache/internal/hot"
	"github.com/gpucache/gpucache/internal/security"
	"github.com/gpucache/gpucache/internal/security/ratelimit"
)

// coldQuotaStats are the cold quota ledger's server-wide STAT entries.
func coldQuotaStats(ct *tier.Tier) []wire.StatEntry {
	u := ct.ColdUsage()
	return []wire.StatEntry{
		{Name: "cold_quota_tracked_packs", Value: uint64(max(u.Groups, 0))}, // a gauge
		{Name: "cold_quota_evictions", Value: u.Evictions},
		{Name: "cold_quota_dropped", Value: u.Dropped},
		{Name: "cold_quota_untracked", Value: u.Untracked},
	}
}

// tenantMetrics is the source of the per-tenant /metrics series: the
// tenants named in the running config, so the tenant label's values are
// bounded by the config (an open-mode client naming tenants at will adds
// no series).
type tenantMetrics struct {
	names atomic.Pointer[[]string]
	store *hot.Store
	tier  *tier.Tier      // nil without a cold tier
	guard *security.Guard // nil: no rate-limit or replay-window series
}

func newTenantMetrics(cfg config.Config, store *hot.Store, ct *tier.Tier, g *security.Guard) *tenantMetrics {
	m := &tenantMetrics{store: store, tier: ct, guard: g}
	m.set(cfg)
	return m
}

// set takes the tenant names of cfg (at start and on reload).
func (m *tenantMetrics) set(cfg config.Config) {
	names := make([]string, 0, len(cfg.Tenants))
	for _, t := range cfg.Tenants {
		names = append(names, t.Name)
	}
	m.names.Store(&names)
}

func (m *tenantMetrics) usage() []admin.TenantUsage {
	names := *m.names.Load()
	out := make([]admin.TenantUsage, 0, len(names))
	var lim *ratelimit.Limiter // nil: every tenant unlimited
	if m.guard != nil {
		lim = m.guard.Policy().Limiter
	}
	for _, n := range names {
		d := m.store.TenantDRAMUsage(n)
		held, leases := m.store.TenantUsage(n)
		u := admin.TenantUsage{Tenant: n, DRAMBytes: d.Bytes, DRAMQuota: d.Quota, HeldBytes: held, Leases: leases}
		if m.tier != nil {
			c := m.tier.TenantColdUsage(n)
			u.HasColdTier, u.ColdBytes, u.ColdQuota, u.ColdEvictions, u.ColdDropped = true, c.Bytes, c.Quota, c.Evictions, c.Dropped
		}
		if m.guard != nil {
			u.ReplayNonces = m.guard.Replay().TenantLen(n)
		}
		if lim != nil {
			l := lim.Limit(n)
			u.RateOpsPerSec, u.RateOpsBurst, u.RateBytesPerSec, u.RateBytesBurst = l.OpsPerSec, l.OpsBurst, l.BytesPerSec, l.BytesBurst
		}
		out = append(out, u)
	}
	return out
}

// liveStats is stats after the hot tier reclaimed its expired leases.
// Without it an idle node (no Lookup or Reserve to expire them lazily)
// would report leases that ended as live, and keep their blocks pinned
// and their tenants' hold charged, until the next request. The status
// page's sampler calls it every admin.RateSample, so it is also the
// node's periodic lease sweep.
func liveStats(store *hot.Store, stats admin.StatsFunc) admin.StatsFunc {
	return func() []wire.StatEntry {
		store.ExpireLeases()
		return stats()
	}
}

// guardStats is stats plus the sizes of the guard's bounded tables, so
// an operator watches them against their bounds: the rate limiter's
// buckets for tenants without a configured limit (at most its
// MaxTenants) and the replay window's remembered nonces (at most
// replay_max_nonces).
func guardStats(g *security.Guard, stats admin.StatsFunc) admin.StatsFunc {
	return func() []wire.StatEntry {
		e := stats()
		if l := g.Policy().Limiter; l != nil {
			e = append(e, wire.StatEntry{Name: "ratelimit_dynamic_buckets", Value: uint64(l.Len())})
		}
		return append(e, wire.StatEntry{Name: "antireplay_entries", Value: uint64(g.Replay().Len())})
	}
}
