package daemon

import (
	"encoding/json"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

var metricRef = regexp.MustCompile(`\b(?:gpucache|go|process)_[a-z0-9_]+\b`)

// The Grafana dashboard and the alert rules in deploy/ query only metrics a
// live daemon exports (the certificate alert's probe_* comes from the
// blackbox exporter, up from Prometheus itself); the rules pass promtool.
func TestDeployQueriesExportedMetrics(t *testing.T) {
	c := testConfig()
	c.ColdStore, c.ColdDir = "fs", t.TempDir()
	a, _ := startNode(t, c, Options{})
	code, body := httpGet(t, "http://"+a.Admin+"/metrics")
	if code != 200 {
		t.Fatalf("/metrics: %d", code)
	}
	exported := map[string]bool{}
	for _, l := range strings.Split(body, "\n") {
		if f := strings.Fields(l); len(f) == 4 && f[1] == "TYPE" {
			exported[f[2]] = true
		}
	}
	raw, err := os.ReadFile("../../deploy/grafana/gpucache-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("dashboard: %v", err)
	}
	refs := 0
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			for _, m := range metricRef.FindAllString(tg.Expr, -1) {
				refs++
				if !exported[m] {
					t.Errorf("dashboard panel %q queries %s, which the daemon does not export", p.Title, m)
				}
			}
		}
	}
	rules, err := os.ReadFile("../../deploy/prometheus/gpucache-alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(rules), "\n") {
		if strings.Contains(l, "summary:") || strings.Contains(l, "description:") || strings.HasPrefix(strings.TrimSpace(l), "#") {
			continue // prose and query() templates may name anything
		}
		for _, m := range metricRef.FindAllString(l, -1) {
			refs++
			if !exported[m] {
				t.Errorf("alert rules query %s, which the daemon does not export", m)
			}
		}
	}
	if refs < 20 {
		t.Fatalf("only %d metric references found", refs)
	}
	if p, err := exec.LookPath("promtool"); err == nil {
		if out, err := exec.Command(p, "check", "rules", "../../deploy/prometheus/gpucache-alerts.yml").CombinedOutput(); err != nil {
			t.Fatalf("promtool check rules: %v\n%s", err, out)
		}
	} else if os.Getenv("CI") != "" {
		t.Fatal("promtool is not installed (apt-get install prometheus)")
	}
}
