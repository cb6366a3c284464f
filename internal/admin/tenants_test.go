package admin

import (
	"strings"
	"testing"

	"github.com/gpucache/gpucache/api/wire"
)

// TestPerTenantMetrics: /metrics exports each tenant's DRAM and cold usage
// and quotas, what its leases and reservations hold, its effective rate
// limit and its replay-window nonces, with a tenant label (gauges without _total, counters with it),
// the cold series only with a cold tier, and nothing per tenant without a
// source.
func TestPerTenantMetrics(t *testing.T) {
	h := New(func() []wire.StatEntry { return nil })
	if _, body := get(t, h, "/metrics"); strings.Contains(body, "gpucache_tenant_") {
		t.Fatalf("per-tenant series without a source:\n%s", body)
	}
	h.SetTenantUsage(func() []TenantUsage {
		return []TenantUsage{
			{Tenant: "a", DRAMBytes: 1 << 20, DRAMQuota: 4 << 20, HeldBytes: 96 << 10, Leases: 2, RateOpsPerSec: 50, RateOpsBurst: 50, RateBytesPerSec: 1 << 20, RateBytesBurst: 1 << 20, ReplayNonces: 12, ColdBytes: 7000, ColdQuota: 9000, ColdEvictions: 3, ColdDropped: 1, HasColdTier: true},
			{Tenant: "b", DRAMBytes: 2 << 20},
		}
	})
	_, body := get(t, h, "/metrics")
	for _, want := range []string{
		"# TYPE gpucache_tenant_dram_bytes gauge\n",
		`gpucache_tenant_dram_bytes{tenant="a"} 1.048576e+06`,
		`gpucache_tenant_dram_bytes{tenant="b"} 2.097152e+06`,
		`gpucache_tenant_dram_quota_bytes{tenant="a"} 4.194304e+06`,
		"# TYPE gpucache_tenant_held_bytes gauge\n",
		`gpucache_tenant_held_bytes{tenant="a"} 98304`,
		`gpucache_tenant_leases{tenant="a"} 2`,
		`gpucache_tenant_leases{tenant="b"} 0`,
		"# TYPE gpucache_tenant_ratelimit_ops_per_second gauge\n",
		`gpucache_tenant_ratelimit_ops_per_second{tenant="a"} 50`,
		`gpucache_tenant_ratelimit_ops_burst{tenant="a"} 50`,
		`gpucache_tenant_ratelimit_bytes_per_second{tenant="a"} 1.048576e+06`,
		`gpucache_tenant_ratelimit_bytes_burst{tenant="a"} 1.048576e+06`,
		`gpucache_tenant_ratelimit_ops_per_second{tenant="b"} 0`,
		"# TYPE gpucache_antireplay_tenant_entries gauge\n",
		`gpucache_antireplay_tenant_entries{tenant="a"} 12`,
		"# TYPE gpucache_tenant_cold_bytes gauge\n",
		`gpucache_tenant_cold_bytes{tenant="a"} 7000`,
		`gpucache_tenant_cold_quota_bytes{tenant="a"} 9000`,
		"# TYPE gpucache_tenant_cold_quota_evictions_total counter\n",
		`gpucache_tenant_cold_quota_evictions_total{tenant="a"} 3`,
		`gpucache_tenant_cold_quota_dropped_total{tenant="a"} 1`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	if strings.Contains(body, `gpucache_tenant_cold_bytes{tenant="b"}`) {
		t.Error("cold series for a tenant on a node without a cold tier")
	}
}
