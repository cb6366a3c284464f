package daemon

import (
	"io"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

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

// TestReloadRefusesMoreTenantsThanTheReplayWindowHolds: the replay window
// gives each tenant its own nonce budget and is sized at start, so a reload
// that adds tenants beyond it is refused, even with a larger
// replay_max_nonces (which needs a restart).
func TestReloadRefusesMoreTenantsThanTheReplayWindowHolds(t *testing.T) {
	getenv := func(k string) (string, bool) { return k + "-secret-0123456789abcdef", true }
	tenant := func(name string) config.TenantConfig {
		return config.TenantConfig{Name: name, Secrets: []config.SecretConfig{{ID: "s", Env: name}}}
	}
	cfg := testConfig()
	cfg.AuditLog = "off"
	cfg.ReplayMaxNonces, cfg.ReplayTenantNonces = 2048, 1024
	cfg.Tenants = []config.TenantConfig{tenant("a"), tenant("b")}
	s, err := newSecure(cfg, quiet(), io.Discard, getenv)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got := s.guard.Replay().MaxTenants(); got != 2 {
		t.Fatalf("MaxTenants = %d, want 2", got)
	}
	more := cfg
	more.Tenants = append([]config.TenantConfig{tenant("c")}, cfg.Tenants...)
	more.ReplayMaxNonces = 4096
	if err := s.reload(more, "test"); err == nil || !strings.Contains(err.Error(), "replay window holds nonces for 2") {
		t.Fatalf("reload to 3 tenants: %v", err)
	}
	if _, err := s.guard.Policy().Auth.Bearer([]byte("c-secret-0123456789abcdef"), time.Now()); err == nil {
		t.Fatal("the refused reload added tenant c")
	}
	same := cfg
	same.Tenants = []config.TenantConfig{tenant("a"), tenant("c")}
	if err := s.reload(same, "test"); err != nil {
		t.Fatalf("reload within the window's size: %v", err)
	}
	if _, err := s.guard.Policy().Auth.Bearer([]byte("c-secret-0123456789abcdef"), time.Now()); err != nil {
		t.Fatalf("tenant c after the reload: %v", err)
	}
}

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
		err := startErr(t, cfg, Options{})
		if err == nil || !strings.Contains(err.Error(), fifo) || !strings.Contains(err.Error(), "not a regular file") {
			t.Errorf("%s in a FIFO: %v", name, err)
		}
	}
}
