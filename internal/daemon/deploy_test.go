package daemon

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/gpucache/gpucache/internal/config"
	"github.com/gpucache/gpucache/internal/security/tlsconf/tlstest"
)

var metricRef = regexp.MustCompile(`\b(?:gpucache|go|process)_[a-z0-9_]+\b`)

// The Grafana dashboard and the alert rules in deploy/ query only metrics a
// live daemon exports (up comes from Prometheus itself); the rules pass
// promtool. The daemon serves TLS, so the certificate-expiry series exists.
func TestDeployQueriesExportedMetrics(t *testing.T) {
	c := testConfig()
	c.ColdStore, c.ColdDir = "fs", t.TempDir()
	// The flash tier, so its series (gpucache_flash_*) are exported too.
	c.FlashDir, c.FlashCapacity, c.FlashSegment = t.TempDir(), 512<<20, 128<<20
	ca := tlstest.NewCA(t, "deploy-ca")
	c.TLSCert, c.TLSKey = ca.IssueFiles(t, t.TempDir(), "server", "server", tlstest.ServerAuth(), tlstest.IP(net.IPv4(127, 0, 0, 1)))
	// A configured tenant, so the per-tenant series (gpucache_tenant_*,
	// labelled by the config's tenants) are exported too.
	secret := filepath.Join(t.TempDir(), "t1.secret")
	if err := os.WriteFile(secret, []byte("t1-secret-0123456789abcdef"), 0o600); err != nil {
		t.Fatal(err)
	}
	c.AuditLog = "off"
	c.Tenants = []config.TenantConfig{{Name: "t1", Secrets: []config.SecretConfig{{ID: "t1-1", File: secret}}, ColdQuota: 1 << 30}}
	a, _ := startNode(t, c, Options{})
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.CertPEM())
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}}}
	defer hc.CloseIdleConnections()
	req, err := http.NewRequest(http.MethodGet, "https://"+a.Admin+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	raw0, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("/metrics: %d %v", resp.StatusCode, err)
	}
	body := string(raw0)
	exported := map[string]bool{}
	for _, l := range strings.Split(body, "\n") {
		if f := strings.Fields(l); len(f) == 4 && f[1] == "TYPE" {
			exported[f[2]] = true
			if f[3] == "histogram" { // queried by its series
				exported[f[2]+"_bucket"], exported[f[2]+"_sum"], exported[f[2]+"_count"] = true, true, true
			}
		}
	}
	// The latency histograms, with the server's bucket layout (16 µs
	// doubling to 2^20·16 µs, then +Inf).
	for _, want := range []string{`gpucache_request_seconds_bucket{op="get",tier="dram",le="1.6e-05"} `,
		`gpucache_request_seconds_bucket{op="resp_get",tier="forwarded",le="16.777216"} `,
		`gpucache_request_seconds_bucket{op="put",tier="dram",le="+Inf"} `,
		`gpucache_fill_wait_seconds_count{outcome="finished",path="refill"} `} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
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

// Every example config in deploy/config loads through gpucached's own
// loader (the YAML keys are known fields, the values parse) and passes its
// validation, as `gpucached --config FILE` would; the cluster examples name
// three distinct members over the same etcd and tenants. Only a hot
// capacity larger than this machine's memory is lowered (by flag, as an
// operator would), since the examples size a GPU host.
func TestDeployConfigsLoad(t *testing.T) {
	files, err := filepath.Glob("../../deploy/config/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"cluster-node1.yaml", "cluster-node2.yaml", "cluster-node3.yaml", "secure-single.yaml", "single.yaml"}
	var got []string
	for _, f := range files {
		got = append(got, filepath.Base(f))
	}
	if !slices.Equal(got, want) {
		t.Fatalf("deploy/config holds %v, want %v", got, want)
	}
	noEnv := func(string) (string, bool) { return "", false }
	load := func(t *testing.T, f string) config.Config {
		t.Helper()
		args := []string{"--config", f}
		raw := config.Default()
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.Unmarshal(b, &raw); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if mem, ok := config.MemTotal(); ok && uint64(raw.HotCapacity) > mem {
			args = append(args, "--hot-capacity", config.ByteSize(mem/2).String())
		}
		c, err := config.Load(args, noEnv, io.Discard)
		if err != nil {
			t.Fatalf("gpucached --config %s: %v", f, err)
		}
		if _, _, _, err := c.Member(c.Listen); c.Clustered() && err != nil {
			t.Fatalf("%s: cluster member: %v", f, err)
		}
		if _, err := c.ACLRules(); err != nil {
			t.Fatalf("%s: rights: %v", f, err)
		}
		return c
	}
	cfgs := map[string]config.Config{}
	for _, f := range files {
		cfgs[filepath.Base(f)] = load(t, f)
	}
	if c := cfgs["single.yaml"]; c.Clustered() || c.AuthEnabled() || c.TLSEnabled() || c.ColdStore != "fs" {
		t.Errorf("single.yaml: clustered %v, auth %v, tls %v, cold %q; want a plain single node with an fs cold tier",
			c.Clustered(), c.AuthEnabled(), c.TLSEnabled(), c.ColdStore)
	}
	if c := cfgs["secure-single.yaml"]; c.Clustered() || !c.AuthEnabled() || !c.TLSEnabled() || c.TLSClientCA == "" || len(c.SealKeys) == 0 || c.AuditLog == "off" {
		t.Errorf("secure-single.yaml: clustered %v, auth %v, tls %v, client CA %q, seal keys %d, audit %q; want tenants, mTLS, sealing and an audit log",
			c.Clustered(), c.AuthEnabled(), c.TLSEnabled(), c.TLSClientCA, len(c.SealKeys), c.AuditLog)
	}
	ids, domains := map[string]bool{}, map[string]bool{}
	var etcd, tenants string
	for i, name := range want[:3] {
		c := cfgs[name]
		if !c.Clustered() || c.ColdStore != "s3" {
			t.Errorf("%s: clustered %v, cold %q; want a cluster member over a shared S3 cold tier", name, c.Clustered(), c.ColdStore)
		}
		id, _, domain, _ := c.Member(c.Listen)
		ids[id], domains[domain] = true, true
		tn := fmt.Sprint(c.Tenants)
		if i == 0 {
			etcd, tenants = strings.Join(c.Endpoints(), ","), tn
		} else if strings.Join(c.Endpoints(), ",") != etcd || tn != tenants {
			t.Errorf("%s: etcd %v and tenants differ from cluster-node1.yaml's", name, c.Endpoints())
		}
	}
	if len(ids) != 3 || len(domains) != 3 {
		t.Errorf("the cluster examples name members %v in fault domains %v; want 3 distinct of each", ids, domains)
	}
}
