package admin

import (
	"strings"
	"testing"

	"github.com/gpucache/gpucache/api/wire"
)

// Prometheus naming: a gauge never ends in _total, a counter always does
// (once). The cluster's epoch and control mode are levels, not counts: they
// were exported as gpucache_cluster_epoch_total counters.
func TestMetricNamesFollowPrometheusRules(t *testing.T) {
	h := New(func() []wire.StatEntry {
		return []wire.StatEntry{{Name: "cluster_epoch", Value: 3}, {Name: "control_mode", Value: 1},
			{Name: "wrong_epoch", Value: 2}, {Name: "hot_capacity_bytes", Value: 1}}
	})
	_, body := get(t, h, "/metrics")
	for _, want := range []string{
		"# TYPE gpucache_cluster_epoch gauge\ngpucache_cluster_epoch 3\n",
		"# TYPE gpucache_control_mode gauge\ngpucache_control_mode 1\n",
		"# TYPE gpucache_wrong_epoch_total counter\n",
		"# TYPE gpucache_hot_capacity_bytes gauge\n",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	for _, l := range strings.Split(body, "\n") {
		f := strings.Fields(l)
		if len(f) != 4 || f[0] != "#" || f[1] != "TYPE" {
			continue
		}
		switch name, kind := f[2], f[3]; {
		case kind == "gauge" && strings.HasSuffix(name, "_total"):
			t.Errorf("gauge %s ends in _total", name)
		case kind == "counter" && (!strings.HasSuffix(name, "_total") || strings.HasSuffix(name, "_total_total")):
			t.Errorf("counter %s", name)
		}
	}
}
