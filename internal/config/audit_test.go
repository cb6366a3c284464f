package config

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestAuditSettings: the audit file's bound and the auth_failure throttle
// default to 100MiB × (5 + 1) and 10 lines per source per 10s over 1024
// sources, are set from the file, environment or flags, and an
// out-of-range value is refused with an error naming the setting.
func TestAuditSettings(t *testing.T) {
	c := Default()
	if c.AuditMaxBytes != 100<<20 || c.AuditMaxFiles != 5 || c.AuditAuthFailuresPerSource != 10 ||
		c.AuditAuthFailureInterval != 10*time.Second || c.AuditAuthFailureSources != 1024 {
		t.Fatalf("defaults: %s %d %d %s %d", c.AuditMaxBytes, c.AuditMaxFiles, c.AuditAuthFailuresPerSource,
			c.AuditAuthFailureInterval, c.AuditAuthFailureSources)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "c.yaml")
	os.WriteFile(path, []byte("audit_max_bytes: 1MiB\naudit_max_files: 0\naudit_auth_failure_interval: 1m\n"), 0o600)
	c, err := Load([]string{"--config", path, "--audit-auth-failure-sources", "7"},
		env(map[string]string{"GPUCACHE_AUDIT_AUTH_FAILURES_PER_SOURCE": "3"}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.AuditMaxBytes != 1<<20 || c.AuditMaxFiles != 0 || c.AuditAuthFailureInterval != time.Minute ||
		c.AuditAuthFailuresPerSource != 3 || c.AuditAuthFailureSources != 7 {
		t.Fatalf("loaded: %s %d %s %d %d", c.AuditMaxBytes, c.AuditMaxFiles, c.AuditAuthFailureInterval,
			c.AuditAuthFailuresPerSource, c.AuditAuthFailureSources)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--audit-max-bytes", "64KiB"}, "audit_max_bytes 64KiB not in 1MiB..1TiB"},
		{[]string{"--audit-max-bytes", "2TiB"}, "audit_max_bytes"},
		{[]string{"--audit-max-files", "-1"}, "audit_max_files -1 not in 0..1000"},
		{[]string{"--audit-max-files", "1001"}, "audit_max_files"},
		{[]string{"--audit-auth-failures-per-source", "0"}, "audit_auth_failures_per_source 0 not in 1..1000000"},
		{[]string{"--audit-auth-failure-interval", "500ms"}, "audit_auth_failure_interval 500ms not in 1s..1h"},
		{[]string{"--audit-auth-failure-interval", "2h"}, "audit_auth_failure_interval"},
		{[]string{"--audit-auth-failure-sources", "0"}, "audit_auth_failure_sources 0 not in 1..65536"},
		{[]string{"--audit-auth-failure-sources", "65537"}, "audit_auth_failure_sources"},
	} {
		_, err := Load(tc.args, env(nil), io.Discard)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want %q", tc.args, err, tc.want)
		}
	}
}
