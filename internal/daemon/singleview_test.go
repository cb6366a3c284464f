package daemon

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/gpucache/gpucache/internal/config"
)

// getAs GETs url with a bearer secret (none when secret is empty).
func getAs(t *testing.T, url, secret string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if secret != "" {
		req.Header.Set("Authorization", "Bearer "+secret)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// A single node (no etcd) answers GET /cluster as a cluster member does,
// with its static one-member view, instead of 404; the same admin-only
// rule holds (401 without a secret, 403 for a tenant without the admin
// right), and the status page shows the same view.
func TestClusterViewOnSingleNode(t *testing.T) {
	secrets := map[string]string{"OPS": "ops-secret-0123456789abcdef", "ENGINE": "engine-secret-0123456789abcdef"}
	c := testConfig()
	c.AuditLog = "off"
	c.FaultDomain = "rack-7"
	c.Tenants = []config.TenantConfig{
		{Name: "ops", Secrets: []config.SecretConfig{{ID: "s", Env: "OPS"}}, Rights: []string{"*=rwa"}},
		{Name: "engine", Secrets: []config.SecretConfig{{ID: "s", Env: "ENGINE"}}, Rights: []string{"*=rw"}},
	}
	a, _ := startNode(t, c, Options{Getenv: func(k string) (string, bool) { s, ok := secrets[k]; return s, ok }})
	url := "http://" + a.Admin + "/cluster"
	if code, body := getAs(t, url, ""); code != http.StatusUnauthorized {
		t.Fatalf("GET /cluster without a secret: %d %q, want 401", code, body)
	}
	if code, body := getAs(t, url, secrets["ENGINE"]); code != http.StatusForbidden {
		t.Fatalf("GET /cluster as a tenant without the admin right: %d %q, want 403", code, body)
	}
	code, body := getAs(t, url, secrets["OPS"])
	if code != http.StatusOK {
		t.Fatalf("GET /cluster on a single node as admin: %d %q, want 200", code, body)
	}
	var v viewJSON
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		t.Fatalf("/cluster answer %q: %v", body, err)
	}
	if v.Self != a.Data || v.Epoch != 0 || v.Mode != "static" || len(v.Members) != 1 {
		t.Fatalf("single node view %+v, want self %s, epoch 0, mode static, one member", v, a.Data)
	}
	m := v.Members[0]
	if m.ID != a.Data || m.Addr != a.Data || m.FaultDomain != "rack-7" || m.CapacityBytes != uint64(c.HotCapacity) || m.Draining {
		t.Fatalf("single node member %+v, want itself at %s in rack-7 with %d bytes", m, a.Data, uint64(c.HotCapacity))
	}
	_, page := getAs(t, "http://"+a.Admin+"/", secrets["OPS"])
	for _, want := range []string{"static", "rack-7", a.Data} {
		if !strings.Contains(page, want) {
			t.Errorf("the status page does not show %q of the single node view", want)
		}
	}
}
