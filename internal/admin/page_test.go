package admin

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gpucache/gpucache/api/wire"
)

func pageStats() []wire.StatEntry {
	return []wire.StatEntry{
		{Name: "hot_bytes_cached", Value: 3 << 20}, {Name: "hot_capacity_bytes", Value: 64 << 20},
		{Name: "hot_blocks", Value: 12}, {Name: "blocks_hit", Value: 30}, {Name: "blocks_miss", Value: 10},
		{Name: "hot_hits", Value: 30}, {Name: "hot_misses", Value: 10},
		{Name: "cold_store_connected", Value: 1}, {Name: "cold_write_degraded", Value: 1},
		{Name: "cold_packs_pending", Value: 4}, {Name: "cold_bytes_held", Value: 5 << 10},
		{Name: "flash_degraded", Value: 1}, {Name: "flash_live_bytes", Value: 1 << 30}, {Name: "flash_capacity_bytes", Value: 4 << 30},
		{Name: "flash_segments", Value: 5}, {Name: "flash_hits", Value: 9},
	}
}

func getAs(h http.Handler, path, bearer string) (int, string) {
	rec := httptest.NewRecorder()
	r := httptest.NewRequest(http.MethodGet, path, nil)
	if bearer != "" {
		r.Header.Set("Authorization", "Bearer "+bearer)
	}
	h.ServeHTTP(rec, r)
	return rec.Code, rec.Body.String()
}

// The page answers under the admin rule: 403 with no authorizer, 401
// without a credential, 403 for a tenant that is not an admin, 200 for an
// admin; and only GET /, not every unknown path.
func TestPageAuth(t *testing.T) {
	h := New(pageStats)
	h.HandlePage(PageSource{Node: "n1", Version: "9.9"})
	if code, _ := getAs(h, "/", ""); code != http.StatusForbidden {
		t.Fatalf("no authorizer: %d, want 403", code)
	}
	h.SetAuthorizer(func(r *http.Request) (string, error) {
		switch r.Header.Get("Authorization") {
		case "Bearer admin":
			return "ops", nil
		case "Bearer user":
			return "", fmt.Errorf("%w: tenant %q", ErrForbidden, "user")
		}
		return "", errors.New("authentication required")
	})
	for _, c := range []struct {
		bearer string
		want   int
	}{{"", 401}, {"user", 403}, {"admin", 200}} {
		code, body := getAs(h, "/", c.bearer)
		if code != c.want {
			t.Fatalf("bearer %q: %d, want %d", c.bearer, code, c.want)
		}
		if code != 200 && strings.Contains(body, "hot_bytes_cached") {
			t.Fatalf("bearer %q: refused, but the body shows figures", c.bearer)
		}
	}
	if code, _ := getAs(h, "/nosuch", "admin"); code != http.StatusNotFound {
		t.Fatalf("/nosuch: %d, want 404", code)
	}
	rec := httptest.NewRecorder()
	r := httptest.NewRequest(http.MethodPost, "/", nil)
	r.Header.Set("Authorization", "Bearer admin")
	h.ServeHTTP(rec, r)
	if rec.Code != http.StatusMethodNotAllowed {
		t.Fatalf("POST /: %d, want 405", rec.Code)
	}
}

var dataValue = regexp.MustCompile(`id="stat-([a-z0-9_]+)" data-value="(\d+)"`)

// Every section is there, every figure equals STAT, names from the config
// are escaped, and the page carries no script.
func TestPageContent(t *testing.T) {
	h := New(pageStats)
	h.SetAuthorizer(func(*http.Request) (string, error) { return "local", nil })
	audit := NewRecentLines(2)
	audit.Write([]byte(`{"event":"auth_failure","n":1}` + "\n"))
	audit.Write([]byte(`{"event":"admin_action","action":"reload","actor":"<b>ops</b>"}` + "\n"))
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	rates := NewHitRates()
	rates.Record(now.Add(-time.Minute), []wire.StatEntry{{Name: "blocks_hit", Value: 10}, {Name: "blocks_miss", Value: 10}})
	h.SetTenantUsage(func() []TenantUsage {
		return []TenantUsage{{Tenant: "<script>x</script>", DRAMBytes: 1 << 20, DRAMQuota: 4 << 20, ColdBytes: 3 << 10, HasColdTier: true}}
	})
	h.HandlePage(PageSource{
		Node: "gpu-1", Version: "9.9", Now: func() time.Time { return now }, Audit: audit, Rates: rates,
		Cluster: func() ClusterView {
			return ClusterView{Self: "gpu-1", Epoch: 7, Mode: "live", Members: []ClusterMember{
				{ID: "gpu-1", Addr: "127.0.0.1:1", FaultDomain: "a", CapacityBytes: 1 << 30},
				{ID: "gpu-2", Addr: "127.0.0.1:2", FaultDomain: "b", Draining: true}}}
		},
		Tenants: func() []TenantRow { return []TenantRow{{Name: "<script>x</script>", Rights: "*=rw"}} },
	})
	code, body := getAs(h, "/", "")
	if code != 200 {
		t.Fatalf("GET /: %d %s", code, body)
	}
	want := map[string]uint64{}
	for _, e := range pageStats() {
		want[e.Name] = e.Value
	}
	got := map[string]string{}
	for _, m := range dataValue.FindAllStringSubmatch(body, -1) {
		got[m[1]] = m[2]
		if fmt.Sprint(want[m[1]]) != m[2] {
			t.Errorf("page %s = %s, STAT %d", m[1], m[2], want[m[1]])
		}
	}
	for _, n := range []string{"hot_bytes_cached", "hot_capacity_bytes", "cold_packs_pending", "cold_bytes_held", "cold_write_degraded", "flash_hits", "flash_degraded"} {
		if _, ok := got[n]; !ok {
			t.Errorf("page lacks %s", n)
		}
	}
	for _, s := range []string{
		`<meta http-equiv="refresh" content="5">`, `id="node">gpu-1<`, `id="version">9.9<`,
		`id="dram-used">3.0 MiB<`, `id="dram-capacity">64.0 MiB<`,
		`id="cold-health">connected<`, `id="cold-writebehind">degraded<`, `id="cold-backlog">4 packs, 5.0 KiB<`,
		`id="flash-health">failing: writes off`, `id="flash-used">1.0 GiB<`, `id="flash-capacity">4.0 GiB<`, `5 segments`,
		`id="cluster-epoch">7<`, `<td>gpu-2</td>`, `draining`,
		`&lt;script&gt;x&lt;/script&gt;`, // a tenant name is text, never markup
		`data-value="1048576">1.0 MiB of 4.0 MiB</td><td class="n">3.0 KiB (no quota)</td>`, // the tenant's usage
		// the last minute: 20 more hits, 0 more misses → 20/20; STAT's ratio since start is 30/40
		`data-hits="20" data-total="20">100.0%`,
		`<td>admin_action</td><td></td><td>action=reload actor=&lt;b&gt;ops&lt;/b&gt;</td>`, // one row per event, fields in columns
	} {
		if !strings.Contains(body, s) {
			t.Errorf("page lacks %q", s)
		}
	}
	if strings.Contains(strings.ToLower(body), "<script") {
		t.Error("the page carries a script")
	}
	if strings.Index(body, "admin_action") > strings.Index(body, "auth_failure") {
		t.Error("audit events are not newest first")
	}
}

// The ratios are over each window, from the oldest sample inside it.
func TestHitRatesWindows(t *testing.T) {
	r := NewHitRates()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	st := func(hit, miss uint64) []wire.StatEntry {
		return []wire.StatEntry{{Name: "blocks_hit", Value: hit}, {Name: "blocks_miss", Value: miss},
			{Name: "hot_hits", Value: hit / 2}, {Name: "hot_misses", Value: miss}}
	}
	if w := r.Windows(t0); len(w) != 3 || w[0].Blocks.Total != 0 {
		t.Fatalf("empty: %+v", w)
	}
	// 10 minutes of 90% hits, then 2 minutes of 0% hits.
	var hit, miss uint64
	at := t0
	for range 60 {
		r.Record(at, st(hit, miss))
		hit, miss, at = hit+9, miss+1, at.Add(RateSample)
	}
	for range 12 {
		r.Record(at, st(hit, miss))
		miss, at = miss+10, at.Add(RateSample)
	}
	now := at.Add(-RateSample)
	w := r.Windows(now)
	if w[0].Window != time.Minute || w[0].Blocks.Hits != 0 || w[0].Blocks.Total != 60 || w[0].Span != time.Minute {
		t.Fatalf("1m: %+v", w[0])
	}
	if w[1].Blocks.Hits != 171 || w[1].Blocks.Total != 300 { // 19 steps of the 90% phase, 11 of the 0% one
		t.Fatalf("5m: %+v", w[1])
	}
	if w[2].Span != 71*RateSample || w[2].Blocks.Hits != 540 || w[2].Blocks.Total != 710 {
		t.Fatalf("15m: %+v", w[2])
	}
	// Samples closer than RateSample replace the newest; the ring is bounded.
	r.Record(now.Add(time.Second), st(hit, miss+5))
	r.Record(now.Add(2*time.Second), st(hit, miss+6))
	if r.mu.ring[len(r.mu.ring)-1].miss != miss+6 || r.mu.ring[len(r.mu.ring)-2].at != now {
		t.Fatal("a sample closer than RateSample was not replaced")
	}
	for i := range 3 * rateRing {
		r.Record(now.Add(time.Duration(i+1)*RateSample), st(hit, miss))
	}
	if len(r.mu.ring) != rateRing {
		t.Fatalf("ring holds %d samples, bound %d", len(r.mu.ring), rateRing)
	}
}

// RecentLines keeps the last N lines, each cut to MaxLineBytes.
func TestRecentLinesBound(t *testing.T) {
	r := NewRecentLines(3)
	for i := range 5 {
		fmt.Fprintf(r, "line %d\n", i)
	}
	r.Write([]byte(strings.Repeat("x", 3*MaxLineBytes) + "\n"))
	l := r.Lines()
	if len(l) != 3 || l[1] != "line 4" || l[2] != "line 3" || len(l[0]) > MaxLineBytes+len("…") {
		t.Fatalf("lines: %d %q %q", len(l), l[1], l[2])
	}
}

// An audit event's details group renders as its fields, key=value, with
// empty ones left out and numbers as integers: never "details=map[tenant:]"
// or "2.68435716e+08".
func TestPageAuditDetails(t *testing.T) {
	h := New(pageStats)
	h.SetAuthorizer(func(*http.Request) (string, error) { return "local", nil })
	audit := NewRecentLines(3)
	audit.Write([]byte(`{"time":"2026-12-06T07:09:09.522Z","level":"INFO","msg":"admin action","audit":true,"event":"admin_action","actor":"local","action":"inventory","details":{"tenant":""}}` + "\n"))
	audit.Write([]byte(`{"event":"admin_action","actor":"ops","action":"backfill","details":{"tenant":"acme","bytes_read":268435716,"note":"two words"}}` + "\n"))
	h.HandlePage(PageSource{Node: "gpu-1", Audit: audit})
	code, body := getAs(h, "/", "")
	if code != 200 {
		t.Fatalf("GET /: %d %s", code, body)
	}
	for _, s := range []string{
		`<td>07:09:09.522</td><td>admin_action</td><td></td><td>action=inventory actor=local</td>`,
		`<td>admin_action</td><td></td><td>action=backfill actor=ops bytes_read=268435716 note=&#34;two words&#34; tenant=acme</td>`,
	} {
		if !strings.Contains(body, s) {
			t.Errorf("page lacks %q", s)
		}
	}
	for _, s := range []string{"map[", "e+08", "details="} {
		if strings.Contains(body, s) {
			t.Errorf("page shows %q", s)
		}
	}
}
