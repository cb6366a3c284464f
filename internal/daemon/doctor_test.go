package daemon

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpucache/gpucache/internal/config"
	"github.com/gpucache/gpucache/internal/doctor"
)

// TestDoctorRefusesWhatTheDaemonRefuses: for each config gpucached refuses
// at start because of a secret (a tenant's secret file missing, a 1-byte
// secret file, a secret_env variable unset, a short seal key, a short cold
// encryption key), gpucache doctor's config line is FAIL with the message
// gpucached gives; a good config starts and passes doctor.
func TestDoctorRefusesWhatTheDaemonRefuses(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good.secret", "acme-secret-0123456789abcdef\n")
	short := write("short.secret", "x")
	missing := filepath.Join(dir, "missing.secret")
	env := map[string]string{"GOOD_SECRET": "beta-secret-0123456789abcdef", "SHORT_KEY": "tooshort"}
	getenv := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	base := "listen: 127.0.0.1:0\nadmin_listen: 127.0.0.1:0\nhot_capacity: 64MiB\nhot_slab: 4MiB\nhot_max_class: 4MiB\ncold_store: off\naudit_log: off\n"
	tenant := func(secret string) string {
		return "tenants:\n  - name: acme\n    secrets:\n      - " + secret + "\n"
	}
	for _, tc := range []struct {
		name, yaml string
		want       string // in gpucached's error; "" for a config it starts with
	}{
		{"good", base + tenant("{id: a, file: "+good+"}") + "  - name: beta\n    secrets:\n      - {id: b, env: GOOD_SECRET}\n", ""},
		{"secret file missing", base + tenant("{id: a, file: "+missing+"}"), "no such file"},
		{"1-byte secret file", base + tenant("{id: a, file: "+short+"}"), "is 1 bytes; use at least 16 random bytes"},
		{"secret_env unset", base + tenant("{id: a, env: NO_SUCH_SECRET}"), "environment variable NO_SUCH_SECRET is not set"},
		{"seal key too short", base + "seal_keys:\n  - {id: k1, env: SHORT_KEY}\n", "seal_keys: key \"k1\""},
		{"cold key too short", strings.Replace(base, "cold_store: off", "cold_store: fs\ncold_dir: "+filepath.Join(dir, "cold"), 1) + "cold_encryption_keys:\n  - {id: c1, env: SHORT_KEY}\n", "cold_encryption_keys: key \"c1\""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := write(strings.ReplaceAll(tc.name, " ", "_")+".yaml", tc.yaml)
			cfg, err := config.Load([]string{"--config", file}, getenv, io.Discard)
			if err != nil {
				t.Fatalf("config.Load: %v", err)
			}
			n, startErr := Start(t.Context(), cfg, Options{Logger: quiet(), Getenv: getenv, Stderr: io.Discard})
			if startErr == nil {
				if err := n.Close(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			rep := doctor.Run(t.Context(), cfg, nil, doctor.Env{Getenv: getenv, Environ: func() []string { return nil }})
			line, ok := rep.Find("config", "")
			if !ok {
				t.Fatal("no config line")
			}
			if tc.want == "" {
				if startErr != nil || line.Status != doctor.OK {
					t.Fatalf("good config: gpucached %v; doctor %s %q", startErr, line.Status, line.Detail)
				}
				return
			}
			if startErr == nil || !strings.Contains(startErr.Error(), tc.want) {
				t.Fatalf("gpucached started or said %v, want %q", startErr, tc.want)
			}
			if want := "gpucached would refuse it: " + startErr.Error(); line.Status != doctor.Fail || line.Detail != want {
				t.Fatalf("doctor: %s %q, want FAIL %q", line.Status, line.Detail, want)
			}
		})
	}
}

// TestDoctorChecksEnvLikeTheDaemon: a GPUCACHE_* variable a typo away from
// a setting makes gpucached refuse to start (config.CheckEnv in Main), so
// doctor's config line is FAIL with the same message; one gpucached would
// only log makes it a WARN that quotes the log line.
func TestDoctorChecksEnvLikeTheDaemon(t *testing.T) {
	cfg, err := config.Load([]string{"--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--cold-store", "off"}, func(string) (string, bool) { return "", false }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	typo := []string{"GPUCACHE_HOT_CAPCITY=2GiB", "PATH=/usr/bin"}
	_, daemonErr := config.CheckEnv(cfg, typo)
	if daemonErr == nil {
		t.Fatal("config.CheckEnv accepted GPUCACHE_HOT_CAPCITY")
	}
	run := func(environ []string) doctor.Check {
		rep := doctor.Run(t.Context(), cfg, nil, doctor.Env{Getenv: func(string) (string, bool) { return "", false }, Environ: func() []string { return environ }})
		line, ok := rep.Find("config", "")
		if !ok {
			t.Fatal("no config line")
		}
		return line
	}
	if line := run(typo); line.Status != doctor.Fail || line.Detail != "gpucached would refuse it: "+daemonErr.Error() {
		t.Fatalf("typo'd variable: doctor %s %q, want FAIL with %q", line.Status, line.Detail, daemonErr)
	}
	if line := run([]string{"GPUCACHE_SOMETHING_ELSE=1"}); line.Status != doctor.Warn || !strings.Contains(line.Detail, "GPUCACHE_SOMETHING_ELSE") {
		t.Fatalf("unknown variable: doctor %s %q, want WARN naming it", line.Status, line.Detail)
	}
	if line := run([]string{"GPUCACHE_ADDR=127.0.0.1:9400", "GPUCACHE_HOT_CAPACITY=2GiB"}); line.Status != doctor.OK {
		t.Fatalf("known variables: doctor %s %q, want OK", line.Status, line.Detail)
	}
}
