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

// TestReadyzControlModes: /readyz by control mode. Live is ready (with the
// degraded reason when there is one); read-only is ready for readers with
// a body of its own, and not ready for writers (?write=1); unknown (past
// control_grace: nothing is served) is not ready; starting or draining is
// not ready whatever the mode.
func TestReadyzControlModes(t *testing.T) {
	h := New(func() []wire.StatEntry { return nil })
	mode, why := ControlLive, ""
	h.SetControl(func() (ControlMode, string) { return mode, why })
	degraded := ""
	h.SetDegraded(func() string { return degraded })
	h.SetReady(true)
	const reason = "etcd unreachable: context deadline exceeded"
	for _, tc := range []struct {
		name     string
		mode     ControlMode
		why      string
		degraded string
		path     string
		code     int
		body     string
	}{
		{"live", ControlLive, "", "", "/readyz", 200, "ready\n"},
		{"live, writer", ControlLive, "", "", "/readyz?write=1", 200, "ready\n"},
		{"live, degraded", ControlLive, "", "cold tier unreachable", "/readyz?write=1", 200, "ready, degraded: cold tier unreachable\n"},
		{"read-only", ControlReadOnly, reason, "", "/readyz", 200, "ready-read-only: " + reason + "\n"},
		{"read-only, write=0", ControlReadOnly, reason, "", "/readyz?write=0", 200, "ready-read-only: " + reason + "\n"},
		{"read-only, writer", ControlReadOnly, reason, "", "/readyz?write=1", 503, "not ready for writes: read-only (" + reason + ")\n"},
		{"read-only, writer, true", ControlReadOnly, reason, "", "/readyz?write=true", 503, "not ready for writes: read-only (" + reason + ")\n"},
		{"read-only and degraded", ControlReadOnly, reason, "cold tier unreachable", "/readyz", 200, "ready-read-only: " + reason + "\n"},
		{"unknown", ControlUnknown, reason, "", "/readyz", 503, "not ready: control plane unreachable for longer than control_grace\n"},
		{"unknown, writer", ControlUnknown, reason, "", "/readyz?write=1", 503, "not ready: control plane unreachable for longer than control_grace\n"},
	} {
		mode, why, degraded = tc.mode, tc.why, tc.degraded
		if code, body := get(t, h, tc.path); code != tc.code || body != tc.body {
			t.Errorf("%s: GET %s = %d %q, want %d %q", tc.name, tc.path, code, body, tc.code, tc.body)
		}
	}
	mode, why, degraded = ControlReadOnly, reason, ""
	if code, body := get(t, h, "/readyz?write=maybe"); code != http.StatusBadRequest || !strings.Contains(body, "?write=1") {
		t.Errorf("bad write value: %d %q", code, body)
	}
	// Starting or draining: 503 "not ready" in every mode.
	h.SetReady(false)
	for _, m := range []ControlMode{ControlLive, ControlReadOnly, ControlUnknown} {
		mode = m
		if code, body := get(t, h, "/readyz"); code != http.StatusServiceUnavailable || body != "not ready\n" {
			t.Errorf("draining in mode %d: %d %q", m, code, body)
		}
	}
}
