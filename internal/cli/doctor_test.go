package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/gpucache/gpucache/internal/doctor"
)

func runMain(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errb bytes.Buffer
	code = Main(context.Background(), args, Stdio{In: strings.NewReader(""), Out: &out, Err: &errb})
	return out.String(), errb.String(), code
}

// closedLoopback is a 127.0.0.1 address that refuses connections for the
// whole test: a TCP socket bound to it that never listens. Closing a
// listener instead would free the port, and another test's listener could
// take it (a "dead" seed that then answers).
func closedLoopback(t *testing.T) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(sa.(*syscall.SockaddrInet4).Port))
}

type doctorJSON struct {
	Checks []struct {
		Name, Status, Detail, Target string
	}
}

// TestDoctorCommand runs `gpucache doctor` as an operator would: the
// human table, --json in the shape capabilities.json records, the node's
// config from a --config file plus gpucached's flags, and the exit codes
// (0 without a FAIL, 1 with one, 2 for a usage error).
// unsetGpucacheEnv removes the GPUCACHE_* variables of the test's
// environment for the test (restored after it): doctor checks them as
// gpucached does (config.CheckEnv), so a stray one in a developer's shell
// would turn the config line into a WARN.
func unsetGpucacheEnv(t *testing.T) {
	for _, kv := range os.Environ() {
		if k, v, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "GPUCACHE_") {
			t.Setenv(k, v) // restored after the test
			os.Unsetenv(k)
		}
	}
}

func TestDoctorCommand(t *testing.T) {
	unsetGpucacheEnv(t)
	// max_conns 64: RLIMIT_NOFILE holds it on any test machine.
	out, errs, code := runMain(t, "doctor", "--max-conns", "64")
	if code != 0 || !strings.Contains(out, "OK               config") || !strings.Contains(out, " NOT_RUN_HARDWARE\n") {
		t.Fatalf("doctor: %d\n%s\n%s", code, out, errs)
	}

	out, errs, code = runMain(t, "doctor", "--json", "--max-conns", "64", "--hot-capacity", "64MiB", "--hot-slab", "64MiB")
	if code != 0 {
		t.Fatalf("doctor --json: %d\n%s\n%s", code, out, errs)
	}
	var doc doctorJSON
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("doctor --json: %v\n%s", err, out)
	}
	if len(doc.Checks) < 19 || doc.Checks[0].Name != "config" || doc.Checks[0].Status != "OK" {
		t.Fatalf("doctor --json: %+v", doc)
	}
	for _, c := range doc.Checks {
		if c.Name == "memory" && !strings.Contains(c.Detail, "hot_capacity 64MiB") {
			t.Errorf("the --hot-capacity flag did not reach the memory check: %q", c.Detail)
		}
	}

	// A node's config file naming S3 and etcd on closed ports: each line
	// says so, and the command exits 1.
	s3, etcd := "http://"+closedLoopback(t), "http://"+closedLoopback(t)
	cfgFile := filepath.Join(t.TempDir(), "gpucached.yaml")
	yaml := "cold_store: s3\ns3_endpoint: " + s3 + "\ns3_bucket: b\ns3_access_key: a\ns3_secret_key: s\netcd_endpoints: " + etcd + "\n"
	if err := os.WriteFile(cfgFile, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	out, errs, code = runMain(t, "doctor", "--config", cfgFile, "--json", "--probe-timeout=5s", "--max-conns=64")
	if code != 1 || errs != "" {
		t.Fatalf("unreachable: exit %d, want 1\n%s\n%s", code, out, errs)
	}
	doc = doctorJSON{}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"s3 " + s3: "WARN", "etcd " + etcd: "FAIL", "clock_etcd ": "WARN"}
	for _, c := range doc.Checks {
		key := c.Name + " " + c.Target
		if st, ok := want[key]; ok {
			if c.Status != st || (c.Name != "clock_etcd" && !strings.Contains(c.Detail, "unreachable")) {
				t.Errorf("%s: %s %q, want %s", key, c.Status, c.Detail, st)
			}
			delete(want, key)
		}
	}
	if len(want) != 0 {
		t.Errorf("missing lines %v in %s", want, out)
	}

	// A config gpucached refuses: a FAIL line, the rest still checked.
	out, _, code = runMain(t, "doctor", "--max-conns", "0")
	if code != 1 || !strings.Contains(out, "FAIL             config") || !strings.Contains(out, "cpu_sha_ni") {
		t.Errorf("invalid config: exit %d\n%s", code, out)
	}

	for _, bad := range [][]string{{"doctor", "--no-such-flag"}, {"doctor", "--probe-timeout", "soon"}, {"doctor", "--probe-timeout"}} {
		if _, errs, code := runMain(t, bad...); code != 2 || !strings.Contains(errs, "gpucache doctor:") {
			t.Errorf("%v: exit %d %q, want 2", bad, code, errs)
		}
	}
	if out, _, code := runMain(t, "doctor", "--help"); code != 0 || !strings.Contains(out, "NOT_RUN_HARDWARE") || !strings.Contains(out, "Exit codes") {
		t.Errorf("--help: %d\n%s", code, out)
	}
	if _, errs, code := runMain(t, "docter"); code != 2 || !strings.Contains(errs, `did you mean "doctor"`) {
		t.Errorf("typo: %d %q", code, errs)
	}
}

// TestDoctorReadsSecrets: `gpucache doctor --config` reads the secrets the
// config names, through the environment it runs in, as gpucached does: an
// unset secret_env variable or a 1-byte secret file is a FAIL config line
// (exit 1) naming the tenant, the secret and what to do; with the variable
// set and a real secret the config is OK.
func TestDoctorReadsSecrets(t *testing.T) {
	unsetGpucacheEnv(t)
	dir := t.TempDir()
	short := filepath.Join(dir, "short.secret")
	if err := os.WriteFile(short, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	base := "max_conns: 64\naudit_log: off\ntenants:\n  - name: acme\n    secrets:\n"
	for _, tc := range []struct {
		name, secret string
		env          map[string]string
		code         int
		want         string
	}{
		{"env unset", "{id: a, env: ACME_SECRET}", nil, 1, `FAIL             config                 gpucached would refuse it: tenant "acme": gpucache/config: invalid config: secret "a": environment variable ACME_SECRET is not set`},
		{"1-byte file", "{id: a, file: " + short + "}", nil, 1, `secret "a" is 1 bytes; use at least 16 random bytes (e.g. openssl rand -hex 32)`},
		{"env set", "{id: a, env: ACME_SECRET}", map[string]string{"ACME_SECRET": "acme-secret-0123456789abcdef"}, 0, "OK               config                 valid"},
	} {
		cfgFile := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "_")+".yaml")
		if err := os.WriteFile(cfgFile, []byte(base+"      - "+tc.secret+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		getenv := func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok }
		err := doctorWith(context.Background(), []string{"--config", cfgFile}, Stdio{Out: &out, Err: &out}, getenv, doctor.Env{})
		if code := Exit(Stdio{Out: io.Discard, Err: io.Discard}, "gpucache", "doctor", err); code != tc.code || !strings.Contains(out.String(), tc.want) {
			t.Errorf("%s: exit %d, want %d and %q in\n%s", tc.name, code, tc.code, tc.want, out.String())
		}
	}
}
