package config

import (
	"errors"
	"io"
	"strings"
	"testing"
)

// TestTenantShares: unset caps are a fair share of the hot tier and of the
// fill table (half in open mode, 1/N with N tenants, never below one
// hot_max_class block); set caps win; bad values are refused with a
// message that names the setting.
func TestTenantShares(t *testing.T) {
	c := Default()
	if c.TenantShares() != 2 || c.TenantHoldCap() != 512<<20 || c.TenantFillCap() != 32768 || c.TenantLeaseCap(65536) != 32768 {
		t.Fatalf("open mode: %d shares, hold %d, fills %d, leases %d", c.TenantShares(), c.TenantHoldCap(), c.TenantFillCap(), c.TenantLeaseCap(65536))
	}
	c.Tenants = make([]TenantConfig, 4)
	if c.TenantShares() != 4 || c.TenantHoldCap() != 256<<20 || c.TenantFillCap() != 16384 || c.TenantLeaseCap(65536) != 16384 {
		t.Fatalf("4 tenants: hold %d, fills %d, leases %d", c.TenantHoldCap(), c.TenantFillCap(), c.TenantLeaseCap(65536))
	}
	c.Tenants = make([]TenantConfig, 1000)
	if c.TenantHoldCap() != int64(c.HotMaxClass) || c.TenantFillCap() != 65 || c.TenantLeaseCap(10) != 1 {
		t.Fatalf("1000 tenants: hold %d, fills %d", c.TenantHoldCap(), c.TenantFillCap())
	}
	c.TenantHoldBytes, c.TenantFills = 64<<20, 100
	if c.TenantHoldCap() != 64<<20 || c.TenantFillCap() != 100 {
		t.Fatalf("set caps: hold %d, fills %d", c.TenantHoldCap(), c.TenantFillCap())
	}

	got, err := Load([]string{"--tenant-hold-bytes", "128MiB"}, env(map[string]string{"GPUCACHE_TENANT_FILLS": "500"}), io.Discard)
	if err != nil || got.TenantHoldBytes != 128<<20 || got.TenantFills != 500 {
		t.Fatalf("flag and env: %v %s %d", err, got.TenantHoldBytes, got.TenantFills)
	}
	for _, args := range [][]string{
		{"--tenant-hold-bytes", "1MiB"}, // below hot_max_class (64MiB)
		{"--tenant-hold-bytes", "2GiB"}, // above hot_capacity
		{"--tenant-fills", "-1"},
		{"--tenant-fills", "65537"},
	} {
		_, err := Load(args, env(nil), io.Discard)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), strings.ReplaceAll(args[0][2:], "-", "_")) {
			t.Errorf("%v: %v", args, err)
		}
	}
}

// TestTenantColdQuota: cold_quota is 0 (none) or at least hot_max_class,
// never negative, needs a cold tier, and TenantColdQuotas lists only the
// tenants that have one.
func TestTenantColdQuota(t *testing.T) {
	c := Default()
	c.Tenants = []TenantConfig{{Name: "a", ColdQuota: 10 << 30}, {Name: "b"}}
	if err := c.validateTenantShares(); err != nil {
		t.Fatal(err)
	}
	if q := c.TenantColdQuotas(); len(q) != 1 || q["a"] != 10<<30 {
		t.Fatalf("quotas %v", q)
	}
	for _, bad := range []ByteSize{-1, c.HotMaxClass - 1} {
		c.Tenants[1].ColdQuota = bad
		err := c.validateTenantShares()
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), `tenant "b" cold_quota`) {
			t.Errorf("cold_quota %d: %v", bad, err)
		}
	}
	c.Tenants[1].ColdQuota = 0
	c.ColdStore = "off"
	if err := c.validateTenantShares(); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "cold_store is off") {
		t.Errorf("cold_quota without a cold tier: %v", err)
	}
}

// TestTenantDRAMQuota: dram_quota is 0 (none) or between hot_max_class and
// hot_capacity, and TenantDRAMQuotas lists only the tenants that have one.
func TestTenantDRAMQuota(t *testing.T) {
	c := Default()
	c.Tenants = []TenantConfig{{Name: "a", DRAMQuota: c.HotMaxClass}, {Name: "b"}}
	if err := c.validateTenantShares(); err != nil {
		t.Fatal(err)
	}
	if q := c.TenantDRAMQuotas(); len(q) != 1 || q["a"] != int64(c.HotMaxClass) {
		t.Fatalf("quotas %v", q)
	}
	for _, bad := range []ByteSize{c.HotMaxClass - 1, c.HotCapacity + 1} {
		c.Tenants[1].DRAMQuota = bad
		err := c.validateTenantShares()
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), `tenant "b" dram_quota`) {
			t.Errorf("dram_quota %d: %v", bad, err)
		}
	}
}
