package config

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gpucache/gpucache/api/wire"
	"github.com/gpucache/gpucache/internal/reqbuf"
)

// TestMinRequestBuffersMatchesServer: the config's floor for
// request_buffers is the budget the server needs for its largest table.
func TestMinRequestBuffersMatchesServer(t *testing.T) {
	for _, b := range []int{1, 64, 1024, 65536} {
		if got, want := int64(MinRequestBuffers(b)), reqbuf.MaxRequestCost(wire.Limits{MaxBatch: uint32(b)}); got != want {
			t.Errorf("max_batch %d: MinRequestBuffers %d, reqbuf.MaxRequestCost %d", b, got, want)
		}
	}
}

func TestConnSettings(t *testing.T) {
	env := func(kv map[string]string) func(string) (string, bool) {
		return func(k string) (string, bool) { v, ok := kv[k]; return v, ok }
	}
	c, err := Load([]string{"--hello-timeout", "2s", "--max-unauth-per-addr", "8", "--request-buffers", "64MiB",
		"--admin-max-conns", "16"}, env(map[string]string{"GPUCACHE_ADMIN_IDLE_TIMEOUT": "10s"}), new(strings.Builder))
	if err != nil {
		t.Fatal(err)
	}
	if c.HelloTimeout != 2*time.Second || c.MaxUnauthPerAddr != 8 || c.RequestBuffers != 64<<20 ||
		c.AdminMaxConns != 16 || c.AdminIdleTimeout != 10*time.Second {
		t.Fatalf("settings not applied: %+v", c)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--hello-timeout", "0s"}, "hello_timeout must be positive"},
		{[]string{"--admin-idle-timeout", "-1s"}, "admin_idle_timeout must be positive"},
		{[]string{"--max-unauth-per-addr", "0"}, "max_unauth_per_addr 0 not in"},
		{[]string{"--admin-max-conns", "0"}, "admin_max_conns 0 not in"},
		{[]string{"--request-buffers", "1MiB"}, "request_buffers 1MiB cannot hold the largest request table with max_batch 1024"},
	} {
		_, err := Load(tc.args, env(nil), new(strings.Builder))
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want %q", tc.args, err, tc.want)
		}
	}
}

// TestTenantRequestBufferShare: an unset tenant_request_buffers is a fair
// share of request_buffers: what the pre-session bucket leaves, halved in
// open mode, divided among N tenants, never below the largest request nor
// above request_buffers; it is reqbuf.FairShare. A set
// share wins; one out of range is refused with a message that names it.
func TestTenantRequestBufferShare(t *testing.T) {
	c := Default()
	pre := int64(PreSessionBuffers(c.MaxBatch))
	if got, want := c.TenantRequestBufferCap(), (128<<20-pre)/2; got != want {
		t.Fatalf("open mode: %d, want %d", got, want)
	}
	c.Tenants = make([]TenantConfig, 4)
	if got, want := c.TenantRequestBufferCap(), (128<<20-pre)/4; got != want {
		t.Fatalf("4 tenants: %d, want %d", got, want)
	}
	c.Tenants = make([]TenantConfig, 100)
	if got, want := c.TenantRequestBufferCap(), int64(MinRequestBuffers(c.MaxBatch)); got != want {
		t.Fatalf("100 tenants: %d, want the largest request's %d", got, want)
	}
	for _, tc := range []struct {
		total    ByteSize
		maxBatch int
		tenants  int
	}{{128 << 20, 1024, 0}, {128 << 20, 1024, 3}, {16 << 20, 1024, 0}, {MinRequestBuffers(64), 64, 1}, {1 << 30, 65536, 7}} {
		c := Default()
		c.RequestBuffers, c.MaxBatch, c.Tenants = tc.total, tc.maxBatch, make([]TenantConfig, tc.tenants)
		want := reqbuf.FairShare(int64(tc.total), wire.Limits{MaxBatch: uint32(tc.maxBatch)}, c.TenantShares())
		if got := c.TenantRequestBufferCap(); got != want {
			t.Errorf("%+v: config %d, server %d", tc, got, want)
		}
	}
	c.TenantRequestBuffers = 20 << 20
	if c.TenantRequestBufferCap() != 20<<20 {
		t.Fatalf("set share: %d", c.TenantRequestBufferCap())
	}

	got, err := Load([]string{"--tenant-request-buffers", "32MiB"}, func(string) (string, bool) { return "", false }, new(strings.Builder))
	if err != nil || got.TenantRequestBuffers != 32<<20 {
		t.Fatalf("flag: %v %s", err, got.TenantRequestBuffers)
	}
	got, err = Load(nil, func(k string) (string, bool) {
		v, ok := map[string]string{"GPUCACHE_TENANT_REQUEST_BUFFERS": "24MiB"}[k]
		return v, ok
	}, new(strings.Builder))
	if err != nil || got.TenantRequestBuffers != 24<<20 {
		t.Fatalf("env: %v %s", err, got.TenantRequestBuffers)
	}
	for _, args := range [][]string{
		{"--tenant-request-buffers", "1MiB"},   // below the largest request (10.8 MiB)
		{"--tenant-request-buffers", "256MiB"}, // above request_buffers
	} {
		_, err := Load(args, func(string) (string, bool) { return "", false }, new(strings.Builder))
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "tenant_request_buffers "+args[1]) {
			t.Errorf("%v: %v", args, err)
		}
	}
}
