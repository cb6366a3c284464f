package config

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gpucache/gpucache/api/wire"
	"github.com/gpucache/gpucache/internal/server"
)

// TestMinRequestBuffersMatchesServer: the config's floor for
// request_buffers is the budget the server needs for its largest table.
func TestMinRequestBuffersMatchesServer(t *testing.T) {
	for _, b := range []int{1, 64, 1024, 65536} {
		if got, want := int64(MinRequestBuffers(b)), server.MaxRequestCost(wire.Limits{MaxBatch: uint32(b)}); got != want {
			t.Errorf("max_batch %d: MinRequestBuffers %d, server.MaxRequestCost %d", b, got, want)
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
