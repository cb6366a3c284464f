package daemon

import (
	"io"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/gpucache/gpucache/internal/config"
)

// TestReloadKeepsLimiterOnlyWhenLimitsAreUnchanged: a reload that leaves
// every rate limit as it was keeps the running buckets (a flooding tenant
// cannot reset its bucket by provoking reloads); any change, including a
// tenant losing its limit, builds new ones.
func TestReloadKeepsLimiterOnlyWhenLimitsAreUnchanged(t *testing.T) {
	env := map[string]string{"A": "acme-secret-0123456789", "B": "beta-secret-0123456789"}
	getenv := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	cfg := testConfig()
	cfg.AuditLog = "off"
	cfg.Tenants = []config.TenantConfig{
		{Name: "acme", Secrets: []config.SecretConfig{{ID: "a", Env: "A"}}, OpsPerSec: 100},
		{Name: "beta", Secrets: []config.SecretConfig{{ID: "b", Env: "B"}}, OpsPerSec: 50},
	}
	s, err := newSecure(cfg, quiet(), io.Discard, getenv)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	first := s.guard.Policy().Limiter
	same := cfg
	same.Tenants = append([]config.TenantConfig(nil), cfg.Tenants...)
	same.Tenants[0].Rights = []string{"*=r"} // rights change, limits do not
	if err := s.reload(same, "test"); err != nil {
		t.Fatal(err)
	}
	if s.guard.Policy().Limiter != first {
		t.Fatal("unchanged limits got new buckets")
	}
	fewer := same
	fewer.Tenants = append([]config.TenantConfig(nil), same.Tenants...)
	fewer.Tenants[1].OpsPerSec = 0
	if err := s.reload(fewer, "test"); err != nil {
		t.Fatal(err)
	}
	if l := s.guard.Policy().Limiter; l == first || l.Limit("beta").OpsPerSec != 0 {
		t.Fatal("a removed limit kept the old buckets")
	}
}

// TestSecretFIFORefusedAtStart: a daemon whose seal key or tenant secret
// file is a FIFO refuses to start, naming the file, instead of waiting in
// open(2) for a writer that never comes (where SIGTERM could not stop it).
func TestSecretFIFORefusedAtStart(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "secret")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	seal := testConfig()
	seal.SealKeys = []config.SecretConfig{{ID: "k1", File: fifo}}
	tenant := testConfig()
	tenant.Tenants = []config.TenantConfig{{Name: "acme", Secrets: []config.SecretConfig{{ID: "a", File: fifo}}}}
	for name, cfg := range map[string]config.Config{"seal key": seal, "tenant secret": tenant} {
		err := RunWith(t.Context(), cfg, quiet(), Options{})
		if err == nil || !strings.Contains(err.Error(), fifo) || !strings.Contains(err.Error(), "not a regular file") {
			t.Errorf("%s in a FIFO: %v", name, err)
		}
	}
}
