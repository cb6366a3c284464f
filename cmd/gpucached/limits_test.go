package main

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestFDLimitRefused starts gpucached under a 1024-descriptor limit with
// the default max_conns (4096): it must refuse to start, exit 1, and name
// the settings, the descriptors they need and the limit.
func TestFDLimitRefused(t *testing.T) {
	if testing.Short() {
		t.Skip("builds binaries")
	}
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh to lower the limit with")
	}
	bin := buildDaemon(t)
	// Failure bound only: a daemon that does not refuse serves until killed.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", "-c", `ulimit -n 1024 && exec "$0" "$@"`, bin,
		"--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--cold-store", "off")
	out, err := cmd.CombinedOutput()
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() != 1 {
		t.Fatalf("exit %v, want 1\n%s", err, out)
	}
	for _, want := range []string{"file descriptor limit too low", "max_conns 4096", "admin_max_conns 64",
		"need 4416 file descriptors", "RLIMIT_NOFILE is 1024", "lower max_conns"} {
		if !strings.Contains(string(out), want) {
			t.Fatalf("message lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(string(out), "gpucached serving") {
		t.Fatal("the daemon served")
	}
}
