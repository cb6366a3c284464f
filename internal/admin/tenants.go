package admin

import (
	"github.com/prometheus/client_golang/prometheus"
)

// TenantUsage is one tenant's usage of each tier, for the per-tenant
// metrics; the tenants are those of the running config, so the series
// are bounded by it.
type TenantUsage struct {
	Tenant        string
	DRAMBytes     int64  // hot-tier slot bytes it owns
	DRAMQuota     int64  // 0: none
	HeldBytes     int64  // hot-tier slot bytes its live leases and reservations in flight hold (capped by tenant_hold_bytes)
	Leases        int    // its live leases (capped per tenant)
	ColdBytes     int64  // cold-tier bytes of its packs
	ColdQuota     int64  // 0: none
	ColdEvictions uint64 // its packs evicted for its cold quota
	ColdDropped   uint64 // its blocks not written behind at its cold quota
	HasColdTier   bool   // the node has a cold tier: the cold series are exported
	// The tenant's effective rate limit (its configured limit, bursts
	// defaulted); a rate of 0 is unlimited.
	RateOpsPerSec   float64
	RateOpsBurst    int
	RateBytesPerSec float64
	RateBytesBurst  int64
	ReplayNonces    int // nonces the replay window remembers for it (at most replay_tenant_nonces)
}

// The per-tenant series. The tenant label's values come from the caller
// (the daemon passes the tenants of its config), so the label set is
// bounded by the configuration, never by what clients send.
var (
	descTenantDRAM         = prometheus.NewDesc("gpucache_tenant_dram_bytes", "hot-tier slot bytes the tenant's blocks hold", []string{"tenant"}, nil)
	descTenantDRAMQuota    = prometheus.NewDesc("gpucache_tenant_dram_quota_bytes", "the tenant's DRAM quota (0: none)", []string{"tenant"}, nil)
	descTenantHeld         = prometheus.NewDesc("gpucache_tenant_held_bytes", "hot-tier slot bytes the tenant's live leases and in-flight reservations hold", []string{"tenant"}, nil)
	descTenantLeases       = prometheus.NewDesc("gpucache_tenant_leases", "the tenant's live hot-tier leases", []string{"tenant"}, nil)
	descTenantCold         = prometheus.NewDesc("gpucache_tenant_cold_bytes", "cold-tier bytes of the tenant's packs", []string{"tenant"}, nil)
	descTenantColdQuota    = prometheus.NewDesc("gpucache_tenant_cold_quota_bytes", "the tenant's cold-tier quota (0: none)", []string{"tenant"}, nil)
	descTenantColdEvict    = prometheus.NewDesc("gpucache_tenant_cold_quota_evictions_total", "the tenant's packs deleted to keep it under its cold quota", []string{"tenant"}, nil)
	descTenantRateOps      = prometheus.NewDesc("gpucache_tenant_ratelimit_ops_per_second", "the tenant's effective operations rate limit (0: unlimited)", []string{"tenant"}, nil)
	descTenantRateOpsBurst = prometheus.NewDesc("gpucache_tenant_ratelimit_ops_burst", "the tenant's effective operations burst", []string{"tenant"}, nil)
	descTenantRateBytes    = prometheus.NewDesc("gpucache_tenant_ratelimit_bytes_per_second", "the tenant's effective payload bytes rate limit (0: unlimited)", []string{"tenant"}, nil)
	descTenantRateBytesBur = prometheus.NewDesc("gpucache_tenant_ratelimit_bytes_burst", "the tenant's effective payload bytes burst", []string{"tenant"}, nil)
	descTenantReplay       = prometheus.NewDesc("gpucache_antireplay_tenant_entries", "nonces the replay window remembers for the tenant (at most replay_tenant_nonces)", []string{"tenant"}, nil)
	descTenantColdDrop     = prometheus.NewDesc("gpucache_tenant_cold_quota_dropped_total", "the tenant's blocks not written behind: at its cold quota with nothing of its own to evict", []string{"tenant"}, nil)
)

// tenantCollector exports the per-tenant series on each scrape.
type tenantCollector struct{ h *Handler }

func (tenantCollector) Describe(chan<- *prometheus.Desc) {} // unchecked collector

func (c tenantCollector) Collect(ch chan<- prometheus.Metric) {
	f := c.h.tenants.Load()
	if f == nil {
		return
	}
	for _, u := range (*f)() {
		ch <- prometheus.MustNewConstMetric(descTenantDRAM, prometheus.GaugeValue, float64(u.DRAMBytes), u.Tenant)
		ch <- prometheus.MustNewConstMetric(descTenantDRAMQuota, prometheus.GaugeValue, float64(u.DRAMQuota), u.Tenant)
		ch <- prometheus.MustNewConstMetric(descTenantHeld, prometheus.GaugeValue, float64(u.HeldBytes), u.Tenant)
		ch <- prometheus.MustNewConstMetric(descTenantLeases, prometheus.GaugeValue, float64(u.Leases), u.Tenant)
		ch <- prometheus.MustNewConstMetric(descTenantRateOps, prometheus.GaugeValue, u.RateOpsPerSec, u.Tenant)
		ch <- prometheus.MustNewConstMetric(descTenantRateOpsBurst, prometheus.GaugeValue, float64(u.RateOpsBurst), u.Tenant)
		ch <- prometheus.MustNewConstMetric(descTenantRateBytes, prometheus.GaugeValue, u.RateBytesPerSec, u.Tenant)
		ch <- prometheus.MustNewConstMetric(descTenantRateBytesBur, prometheus.GaugeValue, float64(u.RateBytesBurst), u.Tenant)
		ch <- prometheus.MustNewConstMetric(descTenantReplay, prometheus.GaugeValue, float64(u.ReplayNonces), u.Tenant)
		if !u.HasColdTier {
			continue
		}
		ch <- prometheus.MustNewConstMetric(descTenantCold, prometheus.GaugeValue, float64(u.ColdBytes), u.Tenant)
		ch <- prometheus.MustNewConstMetric(descTenantColdQuota, prometheus.GaugeValue, float64(u.ColdQuota), u.Tenant)
		ch <- prometheus.MustNewConstMetric(descTenantColdEvict, prometheus.CounterValue, float64(u.ColdEvictions), u.Tenant)
		ch <- prometheus.MustNewConstMetric(descTenantColdDrop, prometheus.CounterValue, float64(u.ColdDropped), u.Tenant)
	}
}

// SetTenantUsage installs the source of the per-tenant series; nil
// removes them. fn must return only tenants the operator configured.
func (h *Handler) SetTenantUsage(fn func() []TenantUsage) {
	if fn == nil {
		h.tenants.Store(nil)
		return
	}
	h.tenants.Store(&fn)
}
