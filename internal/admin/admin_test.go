package admin

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gpucache/gpucache/api/wire"
)

func get(t *testing.T, h http.Handler, path string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	return rec.Code, rec.Body.String()
}

// /readyz: 503 until ready; then 200, with the degraded reason when there
// is one (a degraded node still serves, so a load balancer keeps it).
func TestReadyzDegraded(t *testing.T) {
	h := New(func() []wire.StatEntry { return nil })
	if code, body := get(t, h, "/readyz"); code != http.StatusServiceUnavailable || !strings.HasPrefix(body, "not ready") {
		t.Fatalf("before ready: %d %q", code, body)
	}
	h.SetReady(true)
	if code, body := get(t, h, "/readyz"); code != 200 || body != "ready\n" {
		t.Fatalf("ready: %d %q", code, body)
	}
	why := "cold tier unreachable"
	h.SetDegraded(func() string { return why })
	if code, body := get(t, h, "/readyz"); code != 200 || body != "ready, degraded: cold tier unreachable\n" {
		t.Fatalf("degraded: %d %q", code, body)
	}
	why = ""
	if code, body := get(t, h, "/readyz"); code != 200 || body != "ready\n" {
		t.Fatalf("no longer degraded: %d %q", code, body)
	}
	h.SetReady(false)
	why = "cold tier unreachable"
	if code, _ := get(t, h, "/readyz"); code != http.StatusServiceUnavailable {
		t.Fatalf("draining and degraded: %d, want 503", code)
	}
}

// The cold tier's levels are gauges, its event counts counters.
func TestColdMetricKinds(t *testing.T) {
	h := New(func() []wire.StatEntry {
		return []wire.StatEntry{{Name: "cold_bytes_held", Value: 7}, {Name: "cold_write_degraded", Value: 1},
			{Name: "cold_store_connected", Value: 1}, {Name: "cold_packs_given_up", Value: 2}}
	})
	_, body := get(t, h, "/metrics")
	for _, want := range []string{"# TYPE gpucache_cold_bytes_held gauge\ngpucache_cold_bytes_held 7\n",
		"# TYPE gpucache_cold_write_degraded gauge\n", "# TYPE gpucache_cold_store_connected gauge\n",
		"# TYPE gpucache_cold_packs_given_up_total counter\ngpucache_cold_packs_given_up_total 2\n"} {
		if !strings.Contains(body, want) {
			t.Fatalf("metrics lack %q", want)
		}
	}
}
