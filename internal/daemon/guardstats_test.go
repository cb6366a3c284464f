package daemon

import (
	"testing"
	"time"

	"github.com/gpucache/gpucache/api/wire"
	"github.com/gpucache/gpucache/internal/hot"
	"github.com/gpucache/gpucache/internal/security"
	"github.com/gpucache/gpucache/internal/security/antireplay"
	"github.com/gpucache/gpucache/internal/security/ratelimit"
)

// TestGuardMetrics: /metrics carry each configured tenant's effective rate
// limit (bursts defaulted as the limiter applies them; 0 is unlimited) and
// the size of the limiter's table of buckets for tenants without a
// configured limit, which never passes its bound; and the replay window's
// remembered nonces, all tenants together and per configured tenant.
func TestGuardMetrics(t *testing.T) {
	lim, err := ratelimit.New(ratelimit.Config{MaxTenants: 4,
		Tenants: map[string]ratelimit.Limit{"a": {OpsPerSec: 2.5, BytesPerSec: 1 << 20}}})
	if err != nil {
		t.Fatal(err)
	}
	g, err := security.NewGuard(&security.Policy{Limiter: lim}, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	store, err := hot.New(hot.Config{CapacityBytes: 4 << 20, MinClass: 16 << 10, MaxClass: 1 << 20, SlabBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	m := &tenantMetrics{store: store, guard: g}
	m.names.Store(&[]string{"a", "b"})
	u := m.usage()
	if len(u) != 2 || u[0].RateOpsPerSec != 2.5 || u[0].RateOpsBurst != 3 || u[0].RateBytesPerSec != 1<<20 || u[0].RateBytesBurst != 1<<20 {
		t.Fatalf("tenant a's limit: %+v", u)
	}
	if u[1].RateOpsPerSec != 0 || u[1].RateOpsBurst != 0 || u[1].RateBytesPerSec != 0 {
		t.Fatalf("tenant b (no limit) reads limited: %+v", u[1])
	}

	stat := func(name string) (uint64, bool) {
		for _, e := range guardStats(g, func() []wire.StatEntry { return nil })() {
			if e.Name == name {
				return e.Value, true
			}
		}
		return 0, false
	}
	if n, ok := stat("ratelimit_dynamic_buckets"); !ok || n != 0 {
		t.Fatalf("ratelimit_dynamic_buckets %d (present %v), want 0", n, ok)
	}
	for _, tn := range []string{"a", "x1", "x2", "x3", "x4", "x5", "x6"} {
		lim.Allow(tn, 1, 0)
	}
	if n, _ := stat("ratelimit_dynamic_buckets"); n == 0 || n > 4 {
		t.Fatalf("ratelimit_dynamic_buckets %d, want 1..4 (MaxTenants)", n)
	}

	if n, ok := stat("antireplay_entries"); !ok || n != 0 {
		t.Fatalf("antireplay_entries %d (present %v), want 0", n, ok)
	}
	now := time.Now()
	for i, tn := range []string{"a", "a", "b", "outsider"} {
		if err := g.Replay().CheckStamp(tn, antireplay.NewStamp(now, [16]byte{byte(i + 1)})); err != nil {
			t.Fatal(err)
		}
	}
	if n, _ := stat("antireplay_entries"); n != 4 {
		t.Fatalf("antireplay_entries %d, want 4", n)
	}
	if u := m.usage(); u[0].ReplayNonces != 2 || u[1].ReplayNonces != 1 {
		t.Fatalf("per-tenant nonces a=%d b=%d, want 2 and 1", u[0].ReplayNonces, u[1].ReplayNonces)
	}
}
