package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDepsLeaveOutServer: the client command links neither the server, the
// hot tier, the daemon nor the load tools and their plotting (gonum): those
// are tools/cmd/gpucache-bench's. Subpackages count too (internal/hot/x would
// be the hot tier's code). It asks `go list -deps`, which go test puts on
// PATH.
func TestDepsLeaveOutServer(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("go not on PATH (go test puts GOROOT/bin there): %v", err)
	}
	out, err := exec.Command(goBin, "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	const mod = "github.com/gpucache/gpucache/"
	banned := map[string]bool{}
	for _, p := range []string{"internal/server", "internal/hot", "internal/daemon", "internal/directory",
		"tools/internal/bench", "tools/internal/soak", "tools/internal/replay/plot", "tools/internal/benchcli"} {
		banned[mod+p] = true
	}
	deps := strings.Fields(string(out))
	if len(deps) == 0 || deps[len(deps)-1] != mod+"cmd/gpucache" {
		t.Fatalf("go list -deps did not list cmd/gpucache last: %q", deps)
	}
	for _, d := range deps {
		if isBanned(banned, d) || strings.HasPrefix(d, "gonum.org/") {
			t.Errorf("cmd/gpucache depends on %s", d)
		}
	}
}

// isBanned reports whether d is a banned package or inside one.
func isBanned(banned map[string]bool, d string) bool {
	for p := d; p != ""; {
		if banned[p] {
			return true
		}
		i := strings.LastIndexByte(p, '/')
		if i < 0 {
			return false
		}
		p = p[:i]
	}
	return false
}
