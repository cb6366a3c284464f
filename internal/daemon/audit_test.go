package daemon

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpucache/gpucache/client"
	"github.com/gpucache/gpucache/internal/config"
	"github.com/gpucache/gpucache/internal/security/audit"
)

// adminGet sends GET url with a bearer secret through cl and returns the
// status code.
func adminGet(t *testing.T, cl *http.Client, url, secret string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+secret)
	resp, err := cl.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// metric reads one unlabelled metric from /metrics.
func metric(t *testing.T, admin, name string) uint64 {
	t.Helper()
	_, body := httpGet(t, "http://"+admin+"/metrics")
	for _, l := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(l, name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", l, err)
			}
			return uint64(f)
		}
	}
	t.Fatalf("/metrics has no %s", name)
	return 0
}

// TestAuditFloodThroughAdminAndData: one address floods the admin
// listener with wrong bearer secrets over one keep-alive connection and
// the data listener with wrong HELLO secrets. Every failure is counted
// on /metrics, but the audit file gets audit_auth_failures_per_source
// lines for that address and, when the node closes, one summary with the
// exact count suppressed; a second address's failure during the flood
// and a later ACL denial from the flooding address are written.
func TestAuditFloodThroughAdminAndData(t *testing.T) {
	const adminFlood, dataFlood = 2000, 20
	secrets := map[string]string{"OPS": "ops-secret-0123456789abcdef0123", "ENGINE": "engine-secret-0123456789abcdef01"}
	c := testConfig()
	c.Tenants = []config.TenantConfig{
		{Name: "ops", Secrets: []config.SecretConfig{{ID: "s", Env: "OPS"}}, Rights: []string{"*=rwa"}},
		{Name: "engine", Secrets: []config.SecretConfig{{ID: "s", Env: "ENGINE"}}, Rights: []string{"*=rw"}},
	}
	path := filepath.Join(t.TempDir(), "audit.log")
	c.AuditLog, c.AuditMaxBytes, c.AuditMaxFiles = path, 1<<20, 1
	c.AuditAuthFailureInterval = time.Hour // one interval for the whole test, however slow the machine
	a, n := startNode(t, c, Options{Getenv: func(k string) (string, bool) { s, ok := secrets[k]; return s, ok }})
	page := "http://" + a.Admin + "/"

	flooder := &http.Client{} // one keep-alive connection
	defer flooder.CloseIdleConnections()
	for i := range adminFlood {
		if code := adminGet(t, flooder, page, "wrong-secret-0123456789abcdef"); code != http.StatusUnauthorized {
			t.Fatalf("request %d: %d, want 401", i, code)
		}
		if i == adminFlood/2 { // a quiet second address, mid-flood
			quiet := &http.Client{Transport: &http.Transport{DialContext: (&net.Dialer{
				LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}).DialContext}}
			if code := adminGet(t, quiet, page, "another-wrong-secret-0123456789"); code != http.StatusUnauthorized {
				t.Fatalf("quiet source: %d, want 401", code)
			}
			quiet.CloseIdleConnections()
		}
	}
	ctx := context.Background()
	for range dataFlood {
		if _, err := client.Dial(ctx, client.Config{Addr: a.Data, Tenant: "engine", Conns: 1, Secret: []byte("not-the-secret-0123456789")}); err == nil {
			t.Fatal("a HELLO with a wrong secret was accepted")
		}
	}
	if code := adminGet(t, flooder, page, secrets["ENGINE"]); code != http.StatusForbidden { // authenticated, not an admin
		t.Fatalf("engine on the admin page: %d, want 403", code)
	}

	dataFails := metric(t, a.Admin, "gpucache_auth_failures_total")
	total := adminFlood + 1 + dataFails
	if dataFails < dataFlood {
		t.Fatalf("gpucache_auth_failures_total %d, want at least %d", dataFails, dataFlood)
	}
	if got := metric(t, a.Admin, "gpucache_audit_auth_failures_total"); got != total {
		t.Errorf("gpucache_audit_auth_failures_total %d, want %d", got, total)
	}
	lines := uint64(c.AuditAuthFailuresPerSource)
	if got := metric(t, a.Admin, "gpucache_audit_auth_failures_suppressed_total"); got != total-lines-1 {
		t.Errorf("gpucache_audit_auth_failures_suppressed_total %d, want %d", got, total-lines-1)
	}
	if got := metric(t, a.Admin, "gpucache_audit_sources"); got != 2 {
		t.Errorf("gpucache_audit_sources %d, want 2", got)
	}
	if err := n.Close(ctx); err != nil { // writes the open interval's summary
		t.Fatal(err)
	}

	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	count := map[string]uint64{}
	var summary map[string]any
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("audit line %q: %v", sc.Text(), err)
		}
		switch m["event"] {
		case audit.EventAuthFailure:
			host, _, _ := net.SplitHostPort(m["remote"].(string))
			count["auth_failure "+host]++
		case audit.EventSuppressed:
			summary = m
			count["suppressed "+m["source"].(string)]++
		case audit.EventDenied:
			if m["tenant"] == "engine" && m["right"] == "admin" {
				count["denied engine"]++
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	want := map[string]uint64{"auth_failure 127.0.0.1": lines, "auth_failure 127.0.0.2": 1, "suppressed 127.0.0.1": 1, "denied engine": 1}
	for k, v := range want {
		if count[k] != v {
			t.Errorf("%d %q lines, want %d (all: %v)", count[k], k, v, count)
		}
	}
	if len(count) != len(want) {
		t.Errorf("lines %v, want %v", count, want)
	}
	if summary == nil || uint64(summary["count"].(float64)) != total-lines-1 ||
		!strings.HasPrefix(summary["msg"].(string), fmt.Sprintf("suppressed %d auth_failure events from 127.0.0.1 in the last ", total-lines-1)) {
		t.Errorf("summary %v, want %d suppressed", summary, total-lines-1)
	}
}

// TestAuditFullDiskKeepsServing: with the audit file on a full disk
// (/dev/full answers every write with ENOSPC) requests are answered as
// ever, each lost event is counted, and the status page still lists the
// events.
func TestAuditFullDiskKeepsServing(t *testing.T) {
	if fi, err := os.Stat("/dev/full"); err != nil || fi.Mode()&os.ModeDevice == 0 {
		t.Skip("no /dev/full")
	}
	secrets := map[string]string{"OPS": "ops-secret-0123456789abcdef0123"}
	c := testConfig()
	c.Tenants = []config.TenantConfig{{Name: "ops", Secrets: []config.SecretConfig{{ID: "s", Env: "OPS"}}, Rights: []string{"*=rwa"}}}
	c.AuditLog = "/dev/full"
	a, _ := startNode(t, c, Options{Getenv: func(k string) (string, bool) { s, ok := secrets[k]; return s, ok }})
	cl := &http.Client{}
	defer cl.CloseIdleConnections()
	page := "http://" + a.Admin + "/"
	for i := range 50 {
		if code := adminGet(t, cl, page, "wrong-secret-0123456789abcdef"); code != http.StatusUnauthorized {
			t.Fatalf("request %d: %d, want 401", i, code)
		}
	}
	req, err := http.NewRequest(http.MethodGet, page, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+secrets["OPS"])
	resp, err := cl.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "<td>auth_failure</td>") {
		t.Fatalf("status page: %d, auth_failure listed %v", resp.StatusCode, strings.Contains(string(body), "<td>auth_failure</td>"))
	}
	if got, want := metric(t, a.Admin, "gpucache_audit_write_errors_total"), uint64(c.AuditAuthFailuresPerSource); got < want {
		t.Errorf("gpucache_audit_write_errors_total %d, want at least %d (the auth_failure lines written)", got, want)
	}
	if got := metric(t, a.Admin, "gpucache_audit_auth_failures_total"); got != 50 {
		t.Errorf("gpucache_audit_auth_failures_total %d, want 50", got)
	}
}
