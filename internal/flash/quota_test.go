package flash

import (
	"testing"
)

// TestTenantQuotaEvictsOnlyItsOwnBlocks: a tenant at its quota makes
// room by dropping its own oldest blocks, never another tenant's; the
// drops survive a restart; a reload of the quotas applies at once.
func TestTenantQuotaEvictsOnlyItsOwnBlocks(t *testing.T) {
	const size = 50_000
	cfg := testConfig(t)
	cfg.TenantQuotas = map[string]int64{"acme": 3 * size}
	tr := openTier(t, cfg)
	a := blocks(t, "acme", "m1", 5, size)
	b := blocks(t, "beta", "m1", 3, size)
	put(t, tr, b...)
	put(t, tr, a...)
	flush(t, tr)
	mustMiss(t, tr, a[0], a[1])
	mustRead(t, tr, a[2:]...)
	mustRead(t, tr, b...)
	if stat(t, tr, "flash_quota_evictions") != 2 || stat(t, tr, "tenant_flash_bytes") != 3*size ||
		stat(t, tr, "tenant_flash_quota_bytes") != 3*size {
		t.Fatalf("evictions %d, acme bytes %d, quota %d", stat(t, tr, "flash_quota_evictions"),
			stat(t, tr, "tenant_flash_bytes"), stat(t, tr, "tenant_flash_quota_bytes"))
	}
	big := blocks(t, "acme", "m3", 1, 4*size)[0]
	tr.Stored(big.ID, big.Digest, big.Key)
	if tr.Evicted(big.Digest, big.Key, big.ID.Parent, 4, big.Payload) || stat(t, tr, "flash_declined_quota") != 1 {
		t.Fatal("a block larger than its tenant's quota was taken")
	}
	closeTier(t, tr)

	tr = openTier(t, cfg)
	mustMiss(t, tr, a[0], a[1])
	mustRead(t, tr, a[2:]...)
	mustRead(t, tr, b...)

	tr.SetTenantQuotas(map[string]int64{"acme": size, "beta": 0})
	mustMiss(t, tr, a[2], a[3])
	mustRead(t, tr, a[4])
	mustRead(t, tr, b...)
	if stat(t, tr, "tenant_flash_bytes") != size {
		t.Fatalf("acme bytes %d after the reload", stat(t, tr, "tenant_flash_bytes"))
	}
	tr.SetTenantQuotas(nil)
	more := blocks(t, "acme", "m4", 3, size)
	put(t, tr, more...)
	flush(t, tr)
	mustRead(t, tr, more...)
	mustRead(t, tr, a[4])
}

// TestQuotaAtRestartApplies: a quota set lower than what the files hold
// drops the tenant's oldest blocks when the tier opens.
func TestQuotaAtRestartApplies(t *testing.T) {
	const size = 20_000
	cfg := testConfig(t)
	tr := openTier(t, cfg)
	a := blocks(t, "acme", "m1", 6, size)
	b := blocks(t, "beta", "m1", 2, size)
	put(t, tr, a...)
	put(t, tr, b...)
	closeTier(t, tr)
	cfg.TenantQuotas = map[string]int64{"acme": 2 * size, "beta": 1}
	tr = openTier(t, cfg)
	mustMiss(t, tr, a[:4]...)
	mustRead(t, tr, a[4:]...)
	mustMiss(t, tr, b...)
}
