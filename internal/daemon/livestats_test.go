package daemon

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/gpucache/gpucache/api/wire"
	"github.com/gpucache/gpucache/internal/hot"
)

// TestLiveStatsReclaimsExpiredLeases: on an idle node a lease that ended
// is reclaimed when the admin's stats are read (and by the status page's
// sampler, which reads them every admin.RateSample), so neither STAT-style
// gauges nor the per-tenant series report it, and its tenant's hold is
// released. The per-tenant series carry what the tenant's leases hold.
func TestLiveStatsReclaimsExpiredLeases(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store, err := hot.New(hot.Config{CapacityBytes: 4 << 20, MinClass: 16 << 10, MaxClass: 1 << 20, SlabBytes: 1 << 20})
		if err != nil {
			t.Fatal(err)
		}
		defer store.Close()
		var ns hot.Namespace
		ns[0] = 1
		var k hot.Key
		k[0] = 7
		r, err := store.ReserveBlock(ns, k, hot.Key{}, hot.BlockMeta{Tokens: 1}, 100)
		if err != nil {
			t.Fatal(err)
		}
		store.Commit(r)
		if _, id, _ := store.LookupFor("a", ns, []hot.Key{k}, time.Second, true); id == 0 {
			t.Fatal("no lease")
		}
		m := &tenantMetrics{store: store}
		m.names.Store(&[]string{"a"})
		if u := m.usage(); len(u) != 1 || u[0].Leases != 1 || u[0].HeldBytes != 16<<10 {
			t.Fatalf("usage with a live lease: %+v", u)
		}

		time.Sleep(2 * time.Second) // the lease ends; nothing touches the store
		if st := store.Stats(); st.LeasesActive != 1 {
			t.Fatalf("LeasesActive %d before the stats read: the store expires leases lazily", st.LeasesActive)
		}
		stats := liveStats(store, func() []wire.StatEntry {
			st := store.Stats()
			return []wire.StatEntry{{Name: "hot_leases_active", Value: st.LeasesActive}, {Name: "hot_leases_expired", Value: st.LeasesExpired}}
		})
		if e := stats(); e[0].Value != 0 || e[1].Value != 1 {
			t.Fatalf("stats after the lease ended: %+v", e)
		}
		if u := m.usage(); u[0].Leases != 0 || u[0].HeldBytes != 0 {
			t.Fatalf("usage after the lease ended: %+v", u)
		}
	})
}
