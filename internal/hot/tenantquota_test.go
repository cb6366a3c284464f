package hot

import (
	"errors"
	"testing"
)

// quotaScenario fills a one-slab store (four 256 KiB slots): tenant b's
// block 1 is the least recently used, then tenant a writes blocks 2, 3, 4
// and then block 5, for which the tier must evict something. It returns
// the store after a's last put and that put's error.
func quotaScenario(t *testing.T, quotas map[string]int64) (*Store, error) {
	t.Helper()
	s := newTestStore(t, testConfig(1*mib))
	if quotas != nil {
		if err := s.SetTenantQuotas(quotas); err != nil {
			t.Fatal(err)
		}
	}
	nsA, nsB := nsOf(1), nsOf(2)
	if err := tenantPut(s, "b", nsB, 1, 0, 256*kib); err != nil {
		t.Fatal(err)
	}
	for id := uint64(2); id <= 4; id++ {
		if err := tenantPut(s, "a", nsA, id, 0, 256*kib); err != nil {
			t.Fatal(err)
		}
	}
	err := tenantPut(s, "a", nsA, 5, 0, 256*kib)
	mustInvariants(t, s)
	return s, err
}

// TestTenantAtQuotaCannotEvictAnotherTenantsBlock is the paired test: the
// same writes, with and without a DRAM quota for tenant a. Without one the
// tier's LRU order evicts tenant b's block for a's; with a's quota at the
// three blocks it has, a's put evicts a's own oldest block and b's block
// stays.
func TestTenantAtQuotaCannotEvictAnotherTenantsBlock(t *testing.T) {
	t.Run("no quota", func(t *testing.T) {
		s, err := quotaScenario(t, nil)
		if err != nil {
			t.Fatal(err)
		}
		if present(s, 1) {
			t.Fatal("control: b's block survived; the scenario does not make the tier evict it")
		}
	})
	t.Run("a at its quota", func(t *testing.T) {
		s, err := quotaScenario(t, map[string]int64{"a": 3 * 256 * kib})
		if err != nil {
			t.Fatal(err)
		}
		if !has(t, s, nsOf(2), 1, 256*kib) {
			t.Fatal("tenant a at its quota evicted tenant b's block")
		}
		if present(s, 2) || !present(s, 3) || !present(s, 4) || !present(s, 5) {
			t.Fatalf("want a's oldest block 2 evicted and 3, 4, 5 cached: %v %v %v %v", present(s, 2), present(s, 3), present(s, 4), present(s, 5))
		}
		if u := s.TenantDRAMUsage("a"); u.Bytes != 3*256*kib || u.Quota != 3*256*kib {
			t.Fatalf("a's usage %+v", u)
		}
		if u := s.TenantDRAMUsage("b"); u.Bytes != 256*kib || u.Quota != 0 {
			t.Fatalf("b's usage %+v", u)
		}
		if st := s.Stats(); st.QuotaEvictions != 1 || st.Evictions != 1 {
			t.Fatalf("quota evictions %d, evictions %d; want 1, 1", st.QuotaEvictions, st.Evictions)
		}
	})
}

// TestTenantAtQuotaNeverEmptiesAnotherTenantsSlab: tenant a at its quota
// evicts its own block of another size class, and the block it writes then
// has no room in its class. It is refused; it does not evict b's blocks of
// that class nor empty b's slab (which is what happens without the quota).
func TestTenantAtQuotaNeverEmptiesAnotherTenantsSlab(t *testing.T) {
	run := func(t *testing.T, quotas map[string]int64) (*Store, error) {
		s := newTestStore(t, testConfig(2*mib))
		if quotas != nil {
			if err := s.SetTenantQuotas(quotas); err != nil {
				t.Fatal(err)
			}
		}
		nsA, nsB := nsOf(1), nsOf(2)
		for id := uint64(1); id <= 3; id++ {
			if err := tenantPut(s, "b", nsB, id, 0, 256*kib); err != nil {
				t.Fatal(err)
			}
		}
		if err := tenantPut(s, "a", nsA, 4, 0, 256*kib); err != nil {
			t.Fatal(err)
		}
		for id := uint64(5); id <= 6; id++ {
			if err := tenantPut(s, "b", nsB, id, 0, 512*kib); err != nil {
				t.Fatal(err)
			}
		}
		err := tenantPut(s, "a", nsA, 7, 0, 512*kib)
		mustInvariants(t, s)
		return s, err
	}
	bIntact := func(s *Store) bool {
		for _, id := range []uint64{1, 2, 3, 5, 6} {
			if !present(s, id) {
				return false
			}
		}
		return true
	}
	t.Run("no quota", func(t *testing.T) {
		s, err := run(t, nil)
		if err != nil {
			t.Fatal(err)
		}
		if bIntact(s) {
			t.Fatal("control: every b block survived; the scenario does not make the tier evict one")
		}
	})
	t.Run("a at its quota", func(t *testing.T) {
		s, err := run(t, map[string]int64{"a": 512 * kib})
		if !errors.Is(err, ErrNoSpace) {
			t.Fatalf("a's put: %v, want ErrNoSpace", err)
		}
		if !bIntact(s) {
			t.Fatal("tenant a at its quota evicted a block of tenant b")
		}
		if present(s, 4) {
			t.Fatal("a's own block 4 should have been evicted first")
		}
		if u := s.TenantDRAMUsage("a"); u.Bytes != 0 {
			t.Fatalf("a owns %d bytes after its refused put, want 0", u.Bytes)
		}
	})
}

// TestTenantQuotaRefusesWhatCannotFit: a block larger than the quota, or a
// quota whose bytes are all in flight, is refused with ErrTenantQuota and
// evicts nothing.
func TestTenantQuotaRefusesWhatCannotFit(t *testing.T) {
	s := newTestStore(t, testConfig(4*mib))
	if err := s.SetTenantQuotas(map[string]int64{"a": 256 * kib}); err != nil {
		t.Fatal(err)
	}
	if err := tenantPut(s, "b", nsOf(2), 1, 0, 16*kib); err != nil {
		t.Fatal(err)
	}
	if err := tenantPut(s, "a", nsOf(1), 2, 0, 512*kib); !errors.Is(err, ErrTenantQuota) {
		t.Fatalf("block over the quota: %v, want ErrTenantQuota", err)
	}
	r, err := s.ReserveBlock(nsOf(1), key(3), Key{}, BlockMeta{Tenant: "a"}, 256*kib)
	if err != nil {
		t.Fatal(err)
	}
	if err := tenantPut(s, "a", nsOf(1), 4, 0, 16*kib); !errors.Is(err, ErrTenantQuota) {
		t.Fatalf("quota in flight: %v, want ErrTenantQuota", err)
	}
	s.Abort(r)
	if !present(s, 1) || s.Stats().Evictions != 0 {
		t.Fatal("a refused put evicted something")
	}
	if u := s.TenantDRAMUsage("a"); u.Bytes != 0 {
		t.Fatalf("a owns %d after the abort", u.Bytes)
	}
	if err := s.SetTenantQuotas(map[string]int64{"a": 1}); err == nil {
		t.Fatal("a quota below the smallest slot was accepted")
	}
	mustInvariants(t, s)
}
