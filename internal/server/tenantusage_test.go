package server

import (
	"testing"
	"time"

	"github.com/gpucache/gpucache/api/wire"
	"github.com/gpucache/gpucache/internal/hot"
	"github.com/gpucache/gpucache/internal/security"
	"github.com/gpucache/gpucache/internal/security/antireplay"
	"github.com/gpucache/gpucache/internal/security/audit"
	"github.com/gpucache/gpucache/internal/testfix"
)

// TestStatShowsOnlyTheSessionsOwnTenantUsage: each authenticated session's
// STAT carries its own tenant's DRAM and cold usage and quotas, never
// another tenant's figures.
func TestStatShowsOnlyTheSessionsOwnTenantUsage(t *testing.T) {
	f := &secFixture{clock: testfix.NewClock(time.Unix(1_800_000_000, 0)), audit: &syncBuffer{}}
	w, err := antireplay.New(antireplay.Config{Window: 5 * time.Minute, MaxNonces: 1024, TenantNonces: 256, Now: f.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	f.guard, err = security.NewGuard(testPolicy(t, testTenants(), nil), w, audit.New(f.audit), f.clock.Now)
	if err != nil {
		t.Fatal(err)
	}
	cold := map[string][2]int64{"acme": {7000, 9000}, "beta": {123, 0}}
	f.ts = startServer(t, func(c *Config) {
		c.Guard = f.guard
		c.Lower = &tierFuncs{tenantStats: func(tenant string) []wire.StatEntry {
			u := cold[tenant]
			return []wire.StatEntry{{Name: "tenant_cold_bytes", Value: uint64(u[0])}, {Name: "tenant_cold_quota_bytes", Value: uint64(u[1])}}
		}}
	})
	st := f.ts.store
	if err := st.SetTenantQuotas(map[string]int64{"acme": 8 << 20}); err != nil {
		t.Fatal(err)
	}
	ns := hot.Namespace{1}
	r, err := st.ReserveBlock(ns, hot.Key{2}, hot.Key{}, hot.BlockMeta{Tokens: 1, Tenant: "acme"}, 1000)
	if err != nil {
		t.Fatal(err)
	}
	st.Commit(r)
	acmeDRAM := st.TenantDRAMUsage("acme").Bytes
	if acmeDRAM <= 0 {
		t.Fatalf("acme owns %d DRAM bytes after a block", acmeDRAM)
	}

	want := map[string]map[string]uint64{
		"acme": {"tenant_dram_bytes": uint64(acmeDRAM), "tenant_dram_quota_bytes": 8 << 20, "tenant_cold_bytes": 7000, "tenant_cold_quota_bytes": 9000},
		"beta": {"tenant_dram_bytes": 0, "tenant_dram_quota_bytes": 0, "tenant_cold_bytes": 123, "tenant_cold_quota_bytes": 0},
	}
	for tenant, secret := range map[string][]byte{"acme": secretA, "beta": secretB} {
		got := statMap(t, f.dial(t, secret).do(wire.OpStat, nil))
		for name, v := range want[tenant] {
			if g, ok := got[name]; !ok || g != v {
				t.Errorf("%s's STAT %s = %d (present %v), want %d", tenant, name, g, ok, v)
			}
		}
	}
}
