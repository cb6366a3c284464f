package daemon

import (
	"context"
	"fmt"
	"net/http/httptest"
	"net/http/httputil"
	neturl "net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpucache/gpucache/client"
	"github.com/gpucache/gpucache/internal/config"
)

// chromium finds headless Chromium (Debian's chromium; scripts/test
// installs it). GPUCACHE_CHROMIUM overrides; without one the browser test
// skips, unless CI is set, where it fails.
func chromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("GPUCACHE_CHROMIUM"); p != "" {
		return p
	}
	for _, n := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(n); err == nil {
			return p
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("chromium is not installed (apt-get install chromium)")
	}
	t.Skip("chromium is not installed (apt-get install chromium)")
	return ""
}

// browse renders url in headless Chromium and returns the DOM it built;
// with shot set it also saves a PNG screenshot there.
func browse(t *testing.T, bin, url, shot string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // a bound on a stuck browser, not a pass criterion
	defer cancel()
	args := []string{"--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-dev-shm-usage",
		"--user-data-dir=" + t.TempDir(), "--window-size=1100,1500"}
	if shot != "" {
		args = append(args, "--screenshot="+shot, "--hide-scrollbars")
	} else {
		args = append(args, "--dump-dom")
	}
	out, err := exec.CommandContext(ctx, bin, append(args, url)...).Output()
	if err != nil {
		t.Fatalf("chromium %s: %v", url, err)
	}
	return string(out)
}

var pageFigure = regexp.MustCompile(`id="stat-([a-z0-9_]+)" data-value="(\d+)"`)

// The status page, rendered by a real browser against a live daemon under
// load, shows STAT's figures; with the load stopped they equal STAT
// exactly.
func TestStatusPageInBrowser(t *testing.T) {
	bin := chromium(t)
	c := testConfig()
	c.ColdStore, c.ColdDir = "fs", t.TempDir()
	a, _ := startNode(t, c, Options{})
	ctx := context.Background()
	cl, err := client.Dial(ctx, client.Config{Addr: a.Data, Conns: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ns := client.Namespace{Tenant: "default", TrustDomain: "t", ModelID: "m", ConfigRevision: "c", TokenizerRevision: "k",
		RoPE: "rope", DType: "fp16", Quantization: "none",
		Layout: client.Layout{Format: "raw", TPSize: 1, PPSize: 1, LayerCount: 1, KVHeads: 1, HeadDim: 1, BlockTokens: 16}}
	d, err := ns.Digest()
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var load sync.WaitGroup
	var loaded sync.WaitGroup
	loaded.Add(1)
	load.Add(1)
	go func() { // the load: puts, then hits and misses, until stopped
		defer load.Done()
		payload := make([]byte, 64<<10)
		for i := 0; ; i++ {
			name := []byte(fmt.Sprintf("k%d", i%200))
			if _, err := cl.PutOpaque(ctx, ns, name, payload); err != nil {
				t.Errorf("put: %v", err)
				return
			}
			cl.Get(ctx, ns, []client.BlockKey{client.OpaqueKey(d, name), client.OpaqueKey(d, []byte("absent"))})
			if i == 50 {
				loaded.Done()
			}
			select {
			case <-stop:
				return
			default:
			}
		}
	}()
	loaded.Wait()
	url := "http://" + a.Admin + "/"
	dom := browse(t, bin, url, "") // under load
	for _, s := range []string{`id="node">` + a.Data, `id="version">` + Version, `id="dram-capacity">64.0 MiB`,
		`id="cold-health">connected`, `id="cold-writebehind">`, `id="cluster-mode"`, "static", `id="ratios"`,
		`id="tenants"`, `id="audit"`} {
		if !strings.Contains(dom, s) {
			t.Errorf("page under load lacks %q", s)
		}
	}
	close(stop)
	load.Wait()

	dom = browse(t, bin, url, "")
	st, err := cl.Stat(ctx)
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, m := range pageFigure.FindAllStringSubmatch(dom, -1) {
		switch m[1] {
		case "conns_open", "hot_leases_active", "cold_packs_pending", "cold_bytes_held", "cold_bytes_batched", "cold_packs_written":
			continue // these move on their own (the STAT connection, the write-behind flush)
		}
		seen++
		if m[2] != fmt.Sprint(st[m[1]]) {
			t.Errorf("page %s = %s, STAT %d", m[1], m[2], st[m[1]])
		}
	}
	if seen < 8 {
		t.Fatalf("the page showed %d comparable figures:\n%s", seen, dom)
	}
	if st["blocks_hit"] == 0 || st["blocks_miss"] == 0 || st["hot_bytes_cached"] == 0 {
		t.Fatalf("the load did not show in STAT: %v", st)
	}
	if shot := os.Getenv("GPUCACHE_PAGE_SCREENSHOT"); shot != "" {
		browse(t, bin, url, shot)
	}
}

// The status page as an operator sees it on a node with tenants: Chromium
// without a secret gets the 401 refusal; through a loopback proxy that adds
// the admin tenant's bearer secret (a browser cannot be given a header on
// its command line) it shows the tenants and the recent audit events,
// including the failed HELLO the test made.
func TestStatusPageInBrowserAsAdmin(t *testing.T) {
	bin := chromium(t)
	secrets := map[string]string{"OPS": "ops-secret-0123456789abcdef", "ENGINE": "engine-secret-0123456789abcdef"}
	c := testConfig()
	c.AuditLog = filepath.Join(t.TempDir(), "audit.jsonl")
	c.Tenants = []config.TenantConfig{
		{Name: "ops", Secrets: []config.SecretConfig{{ID: "s", Env: "OPS"}}, Rights: []string{"*=rwa"}},
		{Name: "engine", Secrets: []config.SecretConfig{{ID: "s", Env: "ENGINE"}}, Rights: []string{"*=rw"},
			DRAMQuota: 16 << 20, ColdQuota: 256 << 20},
	}
	c.ColdStore, c.ColdDir = "fs", t.TempDir()
	a, _ := startNode(t, c, Options{Getenv: func(k string) (string, bool) { s, ok := secrets[k]; return s, ok }})
	ctx := context.Background()
	if _, err := client.Dial(ctx, client.Config{Addr: a.Data, Tenant: "engine", Secret: []byte("not-the-secret-0123456789")}); err == nil {
		t.Fatal("a HELLO with a wrong secret was accepted")
	}
	cl, err := client.Dial(ctx, client.Config{Addr: a.Data, Tenant: "engine", Secret: []byte(secrets["ENGINE"])})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ns := client.Namespace{Tenant: "engine", TrustDomain: "t", ModelID: "m", ConfigRevision: "c", TokenizerRevision: "k",
		RoPE: "rope", DType: "fp16", Quantization: "none",
		Layout: client.Layout{Format: "raw", TPSize: 1, PPSize: 1, LayerCount: 1, KVHeads: 1, HeadDim: 1, BlockTokens: 16}}
	for i := range 20 {
		if _, err := cl.PutOpaque(ctx, ns, []byte(fmt.Sprintf("k%d", i)), make([]byte, 4096)); err != nil {
			t.Fatal(err)
		}
	}

	direct := browse(t, bin, "http://"+a.Admin+"/", "")
	if strings.Contains(direct, `id="tenants"`) || strings.Contains(direct, "engine") {
		t.Fatalf("the page without a secret showed the tenants:\n%s", direct)
	}
	target, err := neturl.Parse("http://" + a.Admin)
	if err != nil {
		t.Fatal(err)
	}
	proxy := &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) {
		r.SetURL(target)
		r.Out.Header.Set("Authorization", "Bearer "+secrets["OPS"])
	}}
	srv := httptest.NewServer(proxy)
	defer srv.Close()
	dom := browse(t, bin, srv.URL+"/", "")
	for _, s := range []string{`<table id="tenants">`, "<td>ops</td>", "<td>engine</td>", " of 16.0 MiB</td>", "of 256.0 MiB</td>", `<table id="audit">`, "<td>auth_failure</td>", "<td>engine</td><td>reason=unknown_credential</td>"} {
		if !strings.Contains(dom, s) {
			t.Errorf("the admin's page lacks %q", s)
		}
	}
	st, err := cl.Stat(ctx) // the engine session's STAT: its own tenant's DRAM bytes
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf(`id="tenant-dram-engine" data-value="%d"`, st["tenant_dram_bytes"]); st["tenant_dram_bytes"] == 0 || !strings.Contains(dom, want) {
		t.Errorf("the page lacks %s (STAT tenant_dram_bytes %d)", want, st["tenant_dram_bytes"])
	}
	if strings.Contains(dom, secrets["ENGINE"]) || strings.Contains(dom, secrets["OPS"]) {
		t.Fatal("the page shows a secret")
	}
	if t.Failed() {
		t.Fatalf("page:\n%s", dom)
	}
	if shot := os.Getenv("GPUCACHE_PAGE_SCREENSHOT_ADMIN"); shot != "" {
		browse(t, bin, srv.URL+"/", shot)
	}
}
