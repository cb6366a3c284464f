package config

import (
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func env(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestDefaultIsValidAndEmbedded(t *testing.T) {
	c, err := Load(nil, env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.Listen != "127.0.0.1:9400" || c.AdminListen != "127.0.0.1:9401" || c.HotCapacity != 1<<30 {
		t.Fatalf("defaults: %+v", c)
	}
}

func TestPrecedenceFileEnvFlags(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "gpucached.yaml")
	os.WriteFile(path, []byte("listen: 127.0.0.1:7000\nhot_capacity: 256MiB\nread_timeout: 3s\nmax_batch: 16\n"), 0o600)
	c, err := Load([]string{"--config", path, "--max-batch", "32"},
		env(map[string]string{"GPUCACHE_HOT_CAPACITY": "512MiB", "GPUCACHE_MAX_BATCH": "8"}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.Listen != "127.0.0.1:7000" {
		t.Errorf("file not applied: listen %s", c.Listen)
	}
	if c.HotCapacity != 512<<20 {
		t.Errorf("env should override file: capacity %s", c.HotCapacity)
	}
	if c.MaxBatch != 32 {
		t.Errorf("flag should override env: max_batch %d", c.MaxBatch)
	}
	if c.ReadTimeout != 3*time.Second {
		t.Errorf("file duration: %s", c.ReadTimeout)
	}
}

func TestInvalidConfigsNameTheField(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--listen", "nonsense"}, "listen"},
		{[]string{"--listen", "0.0.0.0:9400"}, "not a loopback address"},
		{[]string{"--admin-listen", "10.1.2.3:9401"}, "admin_listen"},
		{[]string{"--hot-capacity", "64PiB"}, "bad size"},
		{[]string{"--hot-capacity", "100TiB"}, "larger than this machine's memory"},
		{[]string{"--hot-capacity", "1MiB"}, "smaller than one"},
		{[]string{"--hot-min-class", "3000"}, "powers of two"},
		{[]string{"--hot-prefault", "maybe"}, "hot_prefault"},
		{[]string{"--max-in-flight", "0"}, "max_in_flight"},
		{[]string{"--read-timeout", "-1s"}, "read_timeout"},
		{[]string{"--read-timeout", "soon"}, "bad duration"},
		{[]string{"--log-level", "loud"}, "log_level"},
		{[]string{"--max-frame", "1MiB"}, "max_frame"},
		{[]string{"stray"}, "unexpected argument"},
	}
	for _, tc := range cases {
		_, err := Load(tc.args, env(nil), io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: got %v, want an error mentioning %q", tc.args, err, tc.want)
		}
	}
	if _, err := Load(nil, env(map[string]string{"GPUCACHE_MAX_CONNS": "many"}), io.Discard); err == nil || !errors.Is(err, ErrInvalid) {
		t.Errorf("bad env: %v", err)
	}
}

func TestUnknownFileKeyIsAnError(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.yaml")
	os.WriteFile(path, []byte("hot_capacty: 1GiB\n"), 0o600)
	_, err := Load([]string{"--config=" + path}, env(nil), io.Discard)
	if err == nil || !strings.Contains(err.Error(), "hot_capacty") {
		t.Fatalf("typo in file: %v", err)
	}
	_, err = Load([]string{"--config", filepath.Join(t.TempDir(), "missing.yaml")}, env(nil), io.Discard)
	if err == nil || !errors.Is(err, ErrInvalid) {
		t.Fatalf("missing file: %v", err)
	}
}

func TestRemoteBindNeedsExplicitOptIn(t *testing.T) {
	if _, err := Load([]string{"--listen", "0.0.0.0:9400", "--allow-remote-unauthenticated"}, env(nil), io.Discard); err != nil {
		t.Fatal(err)
	}
}

func TestHelp(t *testing.T) {
	var sb strings.Builder
	_, err := Load([]string{"--help"}, env(nil), &sb)
	if !errors.Is(err, flag.ErrHelp) || !strings.Contains(sb.String(), "GPUCACHE_HOT_CAPACITY") {
		t.Fatalf("help: %v\n%s", err, sb.String())
	}
}

func TestByteSize(t *testing.T) {
	for in, want := range map[string]ByteSize{"64KiB": 64 << 10, "1GiB": 1 << 30, "4MB": 4e6, "1024": 1024, "1.5MiB": 3 << 19, "2G": 2 << 30} {
		got, err := ParseByteSize(in)
		if err != nil || got != want {
			t.Errorf("%s: %d %v, want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "abc", "-1KiB", "1XB"} {
		if _, err := ParseByteSize(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
	if s := ByteSize(64 << 20).String(); s != "64MiB" {
		t.Errorf("String: %s", s)
	}
}
