package main

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestBinariesEndToEnd builds gpucached and gpucache, starts the daemon on
// its embedded default (with free ports), round-trips 1 MiB of random bytes
// through `gpucache put` and `gpucache get`, scrapes /metrics, and stops the
// daemon with SIGTERM.
func TestBinariesEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("builds binaries")
	}
	dir := t.TempDir()
	for _, cmd := range []string{"gpucached", "gpucache"} {
		out, err := exec.Command("go", "build", "-o", filepath.Join(dir, cmd), "github.com/gpucache/gpucache/cmd/"+cmd).CombinedOutput()
		if err != nil {
			t.Fatalf("build %s: %v\n%s", cmd, err, out)
		}
	}
	d := exec.Command(filepath.Join(dir, "gpucached"), "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--hot-capacity", "256MiB",
		"--cold-dir", filepath.Join(dir, "cold"))
	stderr, err := d.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	logs := make(chan string, 64)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			logs <- sc.Text()
		}
		close(logs)
		exited <- d.Wait()
	}()
	t.Cleanup(func() { d.Process.Kill() })

	serving := regexp.MustCompile(`msg="gpucached serving" data=(\S+) admin=(\S+)`)
	var data, admin string
	for line := range logs {
		if m := serving.FindStringSubmatch(line); m != nil {
			data, admin = m[1], m[2]
			break
		}
	}
	if data == "" {
		t.Fatalf("daemon exited before serving: %v", <-exited)
	}

	in := make([]byte, 1<<20)
	rand.Read(in)
	inPath, outPath := filepath.Join(dir, "in.bin"), filepath.Join(dir, "out.bin")
	os.WriteFile(inPath, in, 0o600)
	cli := func(args ...string) (string, error) {
		c := exec.Command(filepath.Join(dir, "gpucache"), append(args, "--addr", data)...)
		out, err := c.CombinedOutput()
		return string(out), err
	}
	if out, err := cli("put", "--key-text", "e2e", inPath); err != nil {
		t.Fatalf("put: %v\n%s", err, out)
	}
	if out, err := cli("get", "--key-text", "e2e", "-o", outPath); err != nil {
		t.Fatalf("get: %v\n%s", err, out)
	}
	got, _ := os.ReadFile(outPath)
	if !bytes.Equal(got, in) {
		t.Fatalf("round trip differs: %d bytes back", len(got))
	}
	if out, err := cli("get", "--key-text", "never-stored", "-o", outPath+".2"); err == nil || !strings.Contains(out, "miss") {
		t.Fatalf("get of an absent key: %v %q", err, out)
	}
	resp, err := http.Get("http://" + admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), "gpucache_hot_bytes_cached 1.048576e+06") {
		t.Fatalf("metrics do not show the cached block")
	}

	d.Process.Signal(syscall.SIGTERM)
	var stopped bool
	for line := range logs {
		stopped = stopped || strings.Contains(line, "gpucached stopped")
	}
	select {
	case err := <-exited:
		if err != nil || !stopped {
			t.Fatalf("daemon exit after SIGTERM: %v (stopped logged: %v)", err, stopped)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("daemon did not exit within 30s of SIGTERM")
	}
}
