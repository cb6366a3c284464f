package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/gpucache/gpucache/internal/cold/s3store/s3test"
)

// localClusterScript is the recipe of docs/OPERATIONS.md, "A three-node
// cluster on this machine".
const localClusterScript = "../../scripts/local-cluster"

// TestLocalClusterRecipe runs scripts/local-cluster as the docs show it:
// up starts etcd, versitygw and three gpucached nodes (the
// deploy/config/cluster-node*.yaml examples) and prints the --cluster seed;
// gpucache members through the seed lists three active members; blocks put
// through one node come back through another; up again says it is already
// up; down stops every process it started, and the nodes' drain spilled
// the blocks into versitygw's bucket, so a second up serves them again from
// the cold tier. The script waits for readiness itself; the test only runs
// commands.
func TestLocalClusterRecipe(t *testing.T) {
	if testing.Short() {
		t.Skip("runs etcd, versitygw and three daemons through scripts/local-cluster")
	}
	etcd := os.Getenv("GPUCACHE_ETCD")
	if etcd == "" {
		etcd = needTool(t, "etcd", "etcd-server")
	}
	vgw, err := s3test.Binary()
	if err != nil {
		t.Fatal(err)
	}
	if vgw == "" {
		msg := "versitygw not found: run scripts/s3-server install (or set GPUCACHE_VERSITYGW to the binary)"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	dir := t.TempDir()
	// scriptEnv runs the script with extra environment; script without.
	scriptEnv := func(env []string, args ...string) (stdout, stderr string, code int) {
		t.Helper()
		c := exec.Command("bash", append([]string{localClusterScript}, append(args, "--dir", dir)...)...)
		c.Env = append(append(os.Environ(), "GPUCACHE_ETCD="+etcd, "GPUCACHE_VERSITYGW="+vgw), env...)
		var out, errb strings.Builder
		c.Stdout, c.Stderr = &out, &errb
		err := c.Run()
		var ee *exec.ExitError
		switch {
		case errors.As(err, &ee):
			code = ee.ExitCode()
		case err != nil:
			t.Fatalf("local-cluster %s: %v", args[0], err)
		}
		t.Logf("local-cluster %s: exit %d\n%s%s", strings.Join(args, " "), code, out.String(), errb.String())
		return out.String(), errb.String(), code
	}
	script := func(args ...string) (string, int) {
		t.Helper()
		out, _, code := scriptEnv(nil, args...)
		return out, code
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, name := range []string{"etcd", "versitygw", "gpu-1", "gpu-2", "gpu-3"} {
				if b, err := os.ReadFile(filepath.Join(dir, name, "log")); err == nil {
					t.Logf("%s log:\n%s", name, tail(string(b), 30))
				}
			}
		}
		script("down") // always: stops whatever up started, even half of it
	})

	// A node that cannot start: up names it, prints its log's tail and
	// stops etcd and versitygw, which had started.
	_, errs, code := scriptEnv([]string{"LOCAL_CLUSTER_HOT_CAPACITY=lots"}, "up", "--base-port", "auto")
	for _, want := range []string{"gpu-1 exited before ready for writes", `invalid value "lots" for flag --hot-capacity`, "stopped versitygw (pid ", "stopped etcd (pid "} {
		if code != 1 || !strings.Contains(errs, want) {
			t.Errorf("up with a bad hot capacity: exit %d, want 1 and %q on stderr", code, want)
		}
	}
	if _, code := script("status"); code != 3 {
		t.Fatalf("status after a failed up: exit %d, want 3 (nothing running)", code)
	}

	// --base-port auto: other tests and daemons on this machine may hold
	// the default 9410-9441.
	out, code := script("up", "--base-port", "auto")
	if code != 0 {
		t.Fatalf("up: exit %d", code)
	}
	seed, pids := parseUp(t, out)
	if len(pids) != 5 {
		t.Fatalf("up printed %d processes, want etcd, versitygw and 3 nodes: %v", len(pids), pids)
	}
	seeds := strings.Split(seed, ",")
	if len(seeds) != 3 {
		t.Fatalf("seed %q: want the three nodes' data addresses", seed)
	}
	for _, want := range []string{"stop: scripts/local-cluster down --dir " + dir, "admin:", "http://127.0.0.1:"} {
		if !strings.Contains(out, want) {
			t.Errorf("up's output lacks %q", want)
		}
	}

	cli := filepath.Join(dir, "bin", "gpucache")
	ops := filepath.Join(dir, "secrets", "ops")
	run := func(stdin string, args ...string) (string, int) {
		t.Helper()
		c := exec.Command(cli, append(args, "--secret-file", ops)...)
		c.Env = append(os.Environ(), "GPUCACHE_CLUSTER=", "GPUCACHE_ADDR=", "GPUCACHE_SECRET_FILE=")
		c.Stdin = strings.NewReader(stdin)
		var o, e strings.Builder
		c.Stdout, c.Stderr = &o, &e
		err := c.Run()
		var ee *exec.ExitError
		switch {
		case errors.As(err, &ee):
			t.Logf("gpucache %s: exit %d: %s", strings.Join(args, " "), ee.ExitCode(), e.String())
			return o.String(), ee.ExitCode()
		case err != nil:
			t.Fatal(err)
		}
		return o.String(), 0
	}

	members, code := run("", "members", "--cluster", seed)
	if code != 0 || !strings.Contains(members, ", 3 members (view of ") {
		t.Fatalf("members: exit %d\n%s", code, members)
	}
	for _, id := range []string{"gpu-1", "gpu-2", "gpu-3"} {
		if !regexp.MustCompile(`(?m)^` + id + ` +127\.0\.0\.1:\d+ .*active$`).MatchString(members) {
			t.Errorf("members lacks an active %s:\n%s", id, members)
		}
	}

	// Put through the first node, get through the third: each routes every
	// key to its owner, so the keys spread over the three nodes.
	const keys = 12
	payload := func(i int) string { return fmt.Sprintf("local-cluster block %d", i) }
	for i := range keys {
		key := fmt.Sprintf("recipe-%d", i)
		if out, code := run(payload(i), "put", "--cluster", seeds[0], "--key-text", key, "-"); code != 0 || !strings.HasPrefix(out, "stored") {
			t.Fatalf("put %s through %s: exit %d %q", key, seeds[0], code, out)
		}
	}
	getAll := func(through string) {
		t.Helper()
		for i := range keys {
			key := fmt.Sprintf("recipe-%d", i)
			if out, code := run("", "get", "--cluster", through, "--key-text", key); code != 0 || out != payload(i) {
				t.Fatalf("get %s through %s: exit %d %q, want %q", key, through, code, out, payload(i))
			}
		}
	}
	getAll(seeds[2])

	if out, code := script("status"); code != 0 || !strings.Contains(out, "seed: "+seed) {
		t.Fatalf("status of a running cluster: exit %d", code)
	}
	if out, code := script("up"); code != 0 || !strings.Contains(out, "already up") || !strings.Contains(out, "seed: "+seed) {
		t.Fatalf("second up: exit %d, want 0 and \"already up\" with the same seed", code)
	}

	out, code = script("down")
	if code != 0 {
		t.Fatalf("down: exit %d", code)
	}
	for name, pid := range pids {
		if !strings.Contains(out, fmt.Sprintf("stopped %s (pid %d)", name, pid)) {
			t.Errorf("down did not report stopping %s (pid %d)", name, pid)
		}
		if processRunning(pid) {
			t.Errorf("%s (pid %d) still runs after down", name, pid)
		}
	}
	if _, code := script("status"); code != 3 {
		t.Errorf("status after down: exit %d, want 3 (down)", code)
	}
	// The drain spilled the blocks to the cold tier: versitygw's posix
	// backend keeps the bucket gpucache as a directory.
	index, err := filepath.Glob(filepath.Join(dir, "versitygw", "data", "gpucache", "prod", "index", "*", "*"))
	if err != nil || len(index) < keys {
		t.Fatalf("versitygw's bucket holds %d index objects after down (%v), want at least %d", len(index), err, keys)
	}

	// A second up (fresh etcd, same bucket) serves every block again: the
	// owners refill them from versitygw.
	out, code = script("up", "--base-port", "auto")
	if code != 0 {
		t.Fatalf("up after down: exit %d", code)
	}
	seed, _ = parseUp(t, out)
	getAll(strings.Split(seed, ",")[1])
}

// TestLocalClusterScriptArguments: scripts/local-cluster's usage and
// refusals, which start nothing (so they also run under -short): --help,
// an unknown command or flag (exit 2, named), a base port out of range
// (exit 1, with the range), and status and down of a directory where
// nothing was started (exit 3 and 0; the directory is not created).
func TestLocalClusterScriptArguments(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "never-up")
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--help"}, 0, "scripts/local-cluster up [--dir DIR] [--base-port N|auto]"},
		{[]string{"start"}, 2, "unknown command start (up, status or down)"},
		{[]string{"up", "--dir", dir, "--ports", "9410"}, 2, "unknown argument --ports"},
		{[]string{"up", "--dir", dir, "--base-port", "80"}, 1, "--base-port 80: give a port from 1024 to 65504, or auto"},
		{[]string{"status", "--dir", dir}, 3, "local cluster in " + dir + " is down (start it: scripts/local-cluster up --dir " + dir + ")"},
		{[]string{"down", "--dir", dir}, 0, "nothing running in " + dir},
	} {
		out, err := exec.Command("bash", append([]string{localClusterScript}, tc.args...)...).CombinedOutput()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if code != tc.code || !strings.Contains(string(out), tc.want) {
			t.Errorf("local-cluster %s: exit %d, want %d and %q:\n%s", strings.Join(tc.args, " "), code, tc.code, tc.want, out)
		}
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("status, down or a refused up created %s (%v)", dir, err)
	}

	// A busy port of the layout is named before anything is looked up,
	// built or started.
	var ln net.Listener
	for ln == nil {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		if l.Addr().(*net.TCPAddr).Port+31 <= 65535 {
			ln = l
			defer ln.Close()
		} else {
			l.Close()
		}
	}
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	out, err := exec.Command("bash", localClusterScript, "up", "--dir", dir, "--base-port", port).CombinedOutput()
	want := "port " + port + " on 127.0.0.1 is in use"
	if ee := (*exec.ExitError)(nil); !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(string(out), want) || strings.Contains(string(out), "building") {
		t.Errorf("up on a busy port: %v, want exit 1 and %q, nothing built:\n%s", err, want, out)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("up refused for a busy port created %s (%v)", dir, err)
	}
}

var (
	upSeed = regexp.MustCompile(`(?m)^seed: (\S+)$`)
	upProc = regexp.MustCompile(`(?m)^  (\S+) +.*\bpid (\d+) +log (\S+)$`)
)

// parseUp reads up's output: the seed line and each process's pid.
func parseUp(t *testing.T, out string) (seed string, pids map[string]int) {
	t.Helper()
	m := upSeed.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("up printed no seed line:\n%s", out)
	}
	pids = map[string]int{}
	for _, p := range upProc.FindAllStringSubmatch(out, -1) {
		pid, err := strconv.Atoi(p[2])
		if err != nil {
			t.Fatal(err)
		}
		pids[p[1]] = pid
	}
	return m[1], pids
}

// processRunning reports whether pid is a live process: it exists and is
// not a zombie (exited, waiting for its parent to reap it).
func processRunning(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(stat)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] != 'Z'
	}
	return true
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
