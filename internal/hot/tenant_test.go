package hot

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"testing/synctest"
	"time"
)

// tenantPut reserves and commits block id for tenant under ns.
func tenantPut(s *Store, tenant string, ns Namespace, id, parent uint64, size int) error {
	var p Key
	if parent != 0 {
		p = key(parent)
	}
	r, err := s.ReserveBlock(ns, key(id), p, BlockMeta{Tokens: 16, Tenant: tenant}, size)
	if err != nil {
		return err
	}
	fillPayload(r.Buf, id)
	s.Commit(r)
	return nil
}

// errName names a store error for a transcript.
func errName(err error) string {
	for _, e := range []error{ErrExists, ErrTooLarge, ErrNoSpace, ErrClosed, ErrTenantQuota, ErrNotAdmitted} {
		if errors.Is(err, e) {
			return e.Error()
		}
	}
	if err == nil {
		return "ok"
	}
	return err.Error()
}

// tenantBScript runs a fixed script of tenant b: a chain of puts in three
// size classes, lookups with leases, reads under the lease, a put that
// repeats a block, a delete, more puts, a lookup that misses past a gap.
// It returns what b saw. Its blocks (2.6 MiB in three size classes) fit
// beside tenant a's share of an 8 MiB store.
func tenantBScript(t *testing.T, s *Store) []string {
	t.Helper()
	ns := nsOf(2)
	var out []string
	log := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	sizes := map[uint64]int{}
	size := func(id uint64) int {
		switch {
		case id%11 == 0:
			return 256 * kib
		case id%3 == 0:
			return 64 * kib
		}
		return 16 * kib
	}
	var chain []uint64
	for id := uint64(5001); id <= 5030; id++ {
		parent := uint64(0)
		if len(chain) > 0 {
			parent = chain[len(chain)-1]
		}
		sizes[id] = size(id)
		log("put %d: %s", id, errName(tenantPut(s, "b", ns, id, parent, sizes[id])))
		chain = append(chain, id)
	}
	hits, lease, ttl := s.LookupFor("b", ns, chainKeys(chain...), 10*time.Second, true)
	log("lookup chain: hits %d lease %v ttl %v", hits, lease != 0, ttl)
	for _, id := range chain[:hits] {
		log("read %d: %v", id, has(t, s, ns, id, sizes[id]))
	}
	log("put again: %s", errName(tenantPut(s, "b", ns, chain[3], chain[2], sizes[chain[3]])))
	log("release: %v", s.ReleaseLease(lease))
	deleted, busy := s.Delete(ns, key(chain[len(chain)-1]))
	log("delete tail: %v %v", deleted, busy)
	for id := uint64(6001); id <= 6020; id++ {
		sizes[id] = size(id)
		log("put %d: %s", id, errName(tenantPut(s, "b", ns, id, 0, sizes[id])))
	}
	hits, lease, ttl = s.LookupFor("b", ns, chainKeys(chain...), 0, true)
	log("lookup chain again: hits %d lease %v ttl %v", hits, lease != 0, ttl)
	log("release: %v", s.ReleaseLease(lease))
	for id := uint64(6001); id <= 6020; id += 5 {
		log("read %d: %v", id, has(t, s, ns, id, sizes[id]))
	}
	return out
}

// tenantAHogs makes tenant a take everything it can: 40 blocks of 64 KiB
// (2.5 MiB) stored and leased one lease each, then stalled reservations of
// 256 KiB until the store refuses one, then a second lease on all of its
// blocks. It returns what a got, so the test can check a reached its caps
// and nothing more. Its reservations are returned for the caller to end.
func tenantAHogs(t *testing.T, s *Store) (leases, stalled int, res []Reservation) {
	t.Helper()
	ns := nsOf(1)
	var ids []uint64
	for id := uint64(1); id <= 40; id++ {
		if err := tenantPut(s, "a", ns, id, 0, 64*kib); err != nil {
			t.Fatalf("a: put %d: %v", id, err)
		}
		if _, l, _ := s.LookupFor("a", ns, chainKeys(id), time.Minute, true); l != 0 {
			leases++
		}
		ids = append(ids, id)
	}
	for id := uint64(100); id < 200; id++ {
		r, err := s.ReserveBlock(ns, key(id), Key{}, BlockMeta{Tenant: "a"}, 256*kib)
		if err != nil {
			break
		}
		res = append(res, r)
	}
	if _, l, _ := s.LookupFor("a", ns, chainKeys(ids...), time.Minute, true); l != 0 {
		leases++
	}
	return leases, len(res), res
}

// TestTenantAtItsCapsDoesNotChangeAnotherTenantsResults: one tenant at its
// caps does not change another's results, at the store: tenant a leases and reserves all it can (with
// no caps it pinned or reserved the whole store, and every other PUT
// answered NO_SPACE); tenant b's script must see exactly what it sees on
// a store of its own.
func TestTenantAtItsCapsDoesNotChangeAnotherTenantsResults(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		alone := newTestStore(t, testConfig(8*mib))
		want := tenantBScript(t, alone)
		mustInvariants(t, alone)

		s := newTestStore(t, testConfig(8*mib))
		leases, stalled, res := tenantAHogs(t, s)
		held, _ := s.TenantUsage("a")
		// a's share is half of the store (the default): 40 leases of 64 KiB
		// and 6 reservations of 256 KiB; its second, 2.5 MiB lease is refused.
		if leases != 40 || stalled != 6 || held != 4*mib {
			t.Errorf("tenant a got %d leases, %d stalled reservations, holds %d bytes; want 40, 6, %d", leases, stalled, held, 4*mib)
		}
		got := tenantBScript(t, s)
		if !slices.Equal(got, want) {
			t.Errorf("tenant b's results changed while tenant a held its share:\n%s", diffLines(want, got))
		}
		mustInvariants(t, s)
		for _, r := range res {
			s.Abort(r)
		}
		if held, n := s.TenantUsage("a"); held != 40*64*kib || n != 40 {
			t.Fatalf("after its reservations ended a holds %d bytes in %d leases", held, n)
		}
		mustInvariants(t, s)
	})
}

// diffLines lists the lines where want and got differ.
func diffLines(want, got []string) string {
	var b []byte
	for i := range max(len(want), len(got)) {
		var w, g string
		if i < len(want) {
			w = want[i]
		}
		if i < len(got) {
			g = got[i]
		}
		if w != g {
			b = fmt.Appendf(b, "  want %q\n  got  %q\n", w, g)
		}
	}
	return string(b)
}

// TestTenantCaps: the hold cap counts leases (per lease) and reservations,
// is checked before any space is looked for (a refused tenant evicts
// nothing), and is given back by Commit, Abort, ReleaseLease and expiry;
// the lease-count cap; the empty tenant is not charged; SetTenantLimits.
func TestTenantCaps(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := testConfig(2 * mib)
		cfg.TenantHoldBytes = 1 * mib
		cfg.TenantLeases = 3
		s := newTestStore(t, cfg)
		ns := nsOf(1)
		for id := uint64(1); id <= 128; id++ { // fill the store: 128 x 16 KiB
			put(t, s, ns, id, 0, 16*kib)
		}
		// Four reservations of 256 KiB are a's whole share; each evicts 16
		// of the anonymous blocks.
		var res []Reservation
		for id := uint64(200); id < 204; id++ {
			r, err := s.ReserveBlock(ns, key(id), Key{}, BlockMeta{Tenant: "a"}, 256*kib)
			if err != nil {
				t.Fatalf("reservation %d within the share: %v", id, err)
			}
			res = append(res, r)
		}
		before := s.Stats()
		if _, err := s.ReserveBlock(ns, key(300), Key{}, BlockMeta{Tenant: "a"}, 16*kib); !errors.Is(err, ErrTenantQuota) {
			t.Fatalf("reservation over the share: %v, want ErrTenantQuota", err)
		}
		st := s.Stats()
		if st.Evictions != before.Evictions || st.TenantRejects != 1 || st.PutRejects != before.PutRejects+1 {
			t.Fatalf("a refused reservation changed the store: %+v -> %+v", before, st)
		}
		// Another tenant, and the empty tenant, are not affected.
		if err := tenantPut(s, "b", ns, 301, 0, 16*kib); err != nil {
			t.Fatalf("tenant b: %v", err)
		}
		put(t, s, ns, 302, 0, 16*kib)
		// A lease over the share: the hits are reported, no lease.
		if hits, id, _ := s.LookupFor("a", ns, chainKeys(301), time.Second, true); hits != 1 || id != 0 {
			t.Fatalf("lease over the share: hits %d id %d", hits, id)
		}
		if st := s.Stats(); st.LeasesRefused != 1 || st.LeasesGranted != 0 {
			t.Fatalf("stats %+v", st)
		}
		s.Commit(res[0])
		s.Abort(res[1])
		if held, _ := s.TenantUsage("a"); held != 512*kib {
			t.Fatalf("after a commit and an abort a holds %d", held)
		}
		// Leases: 3 at most, each charged.
		var ids []LeaseID
		for i := range 4 {
			hits, id, _ := s.LookupFor("a", ns, chainKeys(301, 302), time.Second, true)
			if hits != 2 || (id != 0) != (i < 3) {
				t.Fatalf("lease %d: hits %d id %d", i, hits, id)
			}
			if id != 0 {
				ids = append(ids, id)
			}
		}
		if held, n := s.TenantUsage("a"); held != 512*kib+3*32*kib || n != 3 {
			t.Fatalf("a holds %d bytes in %d leases", held, n)
		}
		mustInvariants(t, s)
		s.ReleaseLease(ids[0])
		time.Sleep(2 * time.Second) // synctest: the fake clock moves at once
		if n := s.ExpireLeases(); n != 2 {
			t.Fatalf("expired %d leases", n)
		}
		s.Abort(res[2])
		s.Abort(res[3])
		if held, n := s.TenantUsage("a"); held != 0 || n != 0 {
			t.Fatalf("a still holds %d bytes in %d leases", held, n)
		}
		mustInvariants(t, s)

		// New caps apply to what comes next.
		if err := s.SetTenantLimits(16*kib, 0); !errors.Is(err, ErrConfig) {
			t.Fatalf("a cap below MaxClass: %v", err)
		}
		if err := s.SetTenantLimits(2*mib, 1); err != nil {
			t.Fatal(err)
		}
		if _, id, _ := s.LookupFor("a", ns, chainKeys(301), time.Second, true); id == 0 {
			t.Fatal("no lease under the new caps")
		}
		if _, id, _ := s.LookupFor("a", ns, chainKeys(301), time.Second, true); id != 0 {
			t.Fatal("a second lease past the new lease cap")
		}
		mustInvariants(t, s)
		s.Close()
		if held, n := s.TenantUsage("a"); held != 0 || n != 0 {
			t.Fatalf("closed store reports %d bytes %d leases", held, n)
		}
	})
}

// TestTenantDefaults: half of the store and of MaxLeases, at least one
// largest block; a cap below MaxClass is refused.
func TestTenantDefaults(t *testing.T) {
	c := Config{CapacityBytes: 64 * mib, MaxClass: 4 * mib}.WithDefaults()
	if c.TenantHoldBytes != 32*mib || c.TenantLeases != DefaultMaxLeases/2 {
		t.Fatalf("defaults %d %d", c.TenantHoldBytes, c.TenantLeases)
	}
	c = Config{CapacityBytes: 4 * mib, MaxClass: 4 * mib}.WithDefaults()
	if c.TenantHoldBytes != 4*mib {
		t.Fatalf("small store: TenantHoldBytes %d, want one MaxClass block", c.TenantHoldBytes)
	}
	c = Config{CapacityBytes: 64 * mib, MaxClass: 4 * mib, TenantHoldBytes: 1 * mib}.WithDefaults()
	if err := c.Validate(); !errors.Is(err, ErrConfig) {
		t.Fatalf("TenantHoldBytes below MaxClass: %v", err)
	}
}

// TestLeasedBlocksDoNotStopEviction: leased blocks leave the LRU list, so
// a tenant leasing more blocks than one eviction scan inspects (EvictScan)
// cannot make another tenant's puts fail. Before, the leased blocks sat at
// the tail of the list and every scan gave up on them: ErrNoSpace with
// the rest of the store evictable.
func TestLeasedBlocksDoNotStopEviction(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := testConfig(2 * mib)
		cfg.EvictScan = 8
		s := newTestStore(t, cfg)
		nsA, nsB := nsOf(1), nsOf(2)
		var leased []uint64
		for id := uint64(1); id <= 16; id++ {
			if err := tenantPut(s, "a", nsA, id, 0, 16*kib); err != nil {
				t.Fatal(err)
			}
			leased = append(leased, id)
		}
		if hits, id, _ := s.LookupFor("a", nsA, chainKeys(leased...), time.Minute, true); hits != 16 || id == 0 {
			t.Fatalf("lease: hits %d id %d", hits, id)
		}
		// b writes three times the store; the leased blocks become the oldest.
		for id := uint64(1000); id < 1000+3*128; id++ {
			if err := tenantPut(s, "b", nsB, id, 0, 16*kib); err != nil {
				t.Fatalf("tenant b put %d with 16 blocks leased: %v", id, err)
			}
		}
		for _, id := range leased {
			if !has(t, s, nsA, id, 16*kib) {
				t.Fatalf("leased block %d evicted", id)
			}
		}
		mustInvariants(t, s)
	})
}
