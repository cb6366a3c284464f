package lint

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestClientModuleIsLean: a program that imports only the public client
// pulls in neither etcd nor gonum nor the product module (ADR 0028). It
// writes such a program into a temporary module that requires the client,
// points the client and api modules at this checkout's client/ and api/
// (replace), and reads the module graph with `go list -m all` outside the
// workspace (GOWORK=off), as a user's program would see it.
func TestClientModuleIsLean(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is not on PATH: %v", err)
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	write := func(name, text string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", `module example.com/leanclient

go 1.26.8

require github.com/gpucache/gpucache/client v0.0.0-00010101000000-000000000000

replace (
	github.com/gpucache/gpucache/api => `+filepath.Join(root, "api")+`
	github.com/gpucache/gpucache/client => `+filepath.Join(root, "client")+`
)
`)
	// The client's own go.sum holds the checksums of what it requires, so
	// the listing needs no network once the client module is downloaded.
	sum, err := os.ReadFile(filepath.Join(root, "client", "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	write("go.sum", string(sum))
	write("main.go", `package main

import (
	"fmt"

	"github.com/gpucache/gpucache/client"
)

func main() { fmt.Println(client.DefaultAddr) }
`)
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(goBin, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
		}
		return string(out)
	}
	run("build", "-o", os.DevNull, ".")
	mods := run("list", "-m", "all")
	t.Logf("go list -m all:\n%s", mods)
	for _, line := range strings.Split(strings.TrimSpace(mods), "\n") {
		path, _, _ := strings.Cut(line, " ")
		switch {
		case path == "github.com/gpucache/gpucache":
			t.Errorf("the client pulls in the product module: %s", line)
		case strings.HasPrefix(path, "go.etcd.io/"):
			t.Errorf("the client pulls in etcd: %s", line)
		case strings.HasPrefix(path, "gonum.org/"):
			t.Errorf("the client pulls in gonum: %s", line)
		}
	}
	if !strings.Contains(mods, "github.com/gpucache/gpucache/client ") || !strings.Contains(mods, "github.com/gpucache/gpucache/api ") {
		t.Errorf("the listing lacks the client or api module:\n%s", mods)
	}
}
