package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/gpucache/gpucache/api/wire"
	"github.com/gpucache/gpucache/internal/control"
	"github.com/gpucache/gpucache/internal/server"
	"github.com/gpucache/gpucache/internal/server/servertest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// startServer runs a real server on 127.0.0.1:0 over a small hot store.
func startServer(t *testing.T) string {
	return servertest.Start(t, "127.0.0.1:0", wire.Limits{}).Addr
}

type result struct {
	code           int
	stdout, stderr string
}

func run(t *testing.T, stdin string, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	code := Main(ctx, args, Stdio{In: strings.NewReader(stdin), Out: &out, Err: &errb})
	return result{code, out.String(), errb.String()}
}

func TestPutGetRoundTrip(t *testing.T) {
	addr := startServer(t)
	t.Setenv("GPUCACHE_ADDR", addr)
	dir := t.TempDir()
	in := filepath.Join(dir, "in.bin")
	data := bytes.Repeat([]byte("kv-cache "), 5000)
	if err := os.WriteFile(in, data, 0o644); err != nil {
		t.Fatal(err)
	}

	// Flags may follow the file.
	r := run(t, "", "put", in, "--key-text", "demo")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "stored 45000 bytes as ") {
		t.Fatalf("put: %+v", r)
	}
	if r := run(t, "", "put", "--key-text", "demo", in); r.code != 0 || !strings.HasPrefix(r.stdout, "exists") {
		t.Fatalf("second put: %+v", r)
	}
	out := filepath.Join(dir, "out.bin")
	if r := run(t, "", "get", "--key-text", "demo", "-o", out); r.code != 0 {
		t.Fatalf("get: %+v", r)
	}
	if got, _ := os.ReadFile(out); !bytes.Equal(got, data) {
		t.Fatal("get wrote different bytes")
	}
	// To stdout, and from stdin with tokens.
	if r := run(t, "hello", "put", "--tokens", "1,2,3", "-"); r.code != 0 {
		t.Fatalf("put stdin: %+v", r)
	}
	if r := run(t, "", "get", "--tokens", "1,2,3"); r.code != 0 || r.stdout != "hello" {
		t.Fatalf("get stdout: %+v", r)
	}
	// Another identity misses: exit 1, one clear line.
	r = run(t, "", "get", "--key-text", "demo", "--model", "other")
	if r.code != 1 || r.stderr != "gpucache get: miss: gpucache/client: not cached\n" {
		t.Fatalf("miss: %+v", r)
	}
	if r := run(t, "", "lookup", "--key-text", "demo", "--lease-ttl", "1s"); r.code != 0 ||
		!strings.Contains(r.stdout, "1 of 1 blocks cached") || !strings.Contains(r.stdout, "lease ") {
		t.Fatalf("lookup: %+v", r)
	}
	if r := run(t, "", "delete", "--tokens", "1,2,3"); r.code != 0 || !strings.HasPrefix(r.stdout, "deleted ") {
		t.Fatalf("delete: %+v", r)
	}
}

func TestStatPingVersion(t *testing.T) {
	addr := startServer(t)
	r := run(t, "", "stat", "--addr", addr)
	if r.code != 0 || !strings.Contains(r.stdout, "go_heap_inuse_bytes") {
		t.Fatalf("stat: %+v", r)
	}
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	for i := 1; i < len(lines); i++ {
		if lines[i-1] > lines[i] {
			t.Fatalf("stat not sorted: %q before %q", lines[i-1], lines[i])
		}
	}
	r = run(t, "", "stat", "--addr", addr, "--json")
	var m map[string]uint64
	if err := json.Unmarshal([]byte(r.stdout), &m); err != nil || r.code != 0 {
		t.Fatalf("stat --json: %v %+v", err, r)
	}
	if _, ok := m["hot_bytes_cached"]; !ok {
		t.Fatal("stat --json lacks hot_bytes_cached")
	}
	if r := run(t, "", "ping", "--addr", addr, "--count", "2"); r.code != 0 || strings.Count(r.stdout, "pong") != 2 {
		t.Fatalf("ping: %+v", r)
	}
	if r := run(t, "", "version"); r.code != 0 || !strings.Contains(r.stdout, fmt.Sprintf("wire protocol v1..v%d", wire.VersionMax)) {
		t.Fatalf("version: %+v", r)
	}
}

func TestUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		msg  string
	}{
		{nil, 2, "Usage:"},
		{[]string{"frobnicate"}, 2, `unknown command "frobnicate"`},
		{[]string{"get"}, 2, "--key-text TEXT or --tokens"},
		{[]string{"get", "--key-text", "a", "--tokens", "1"}, 2, "not both"},
		{[]string{"get", "--tokens", "1,x"}, 2, `"x" is not a token id`},
		{[]string{"put", "--key-text", "a"}, 2, "want one FILE"},
		{[]string{"get", "--key-text", "a", "--no-such-flag"}, 2, "flag provided but not defined"},
		{[]string{"get", "--key-text", "abc", "--block-tokens", "2"}, 2, "do not fit one block"},
		{[]string{"get", "--key-text", "a", "--model", ""}, 2, "model_id is empty"},
		{[]string{"put", "--key-text", "a", "/no/such/file"}, exitFailed, "no such file"},
		{[]string{"stat", "--addr", "127.0.0.1:1", "--timeout", "1s"}, exitUnavailable, "server unavailable"},
	} {
		r := run(t, "", tc.args...)
		if r.code != tc.code || !strings.Contains(r.stderr, tc.msg) {
			t.Errorf("%v: code %d stderr %q; want %d and %q", tc.args, r.code, r.stderr, tc.code, tc.msg)
		}
		if tc.args != nil && strings.Count(r.stderr, "\n") != 1 {
			t.Errorf("%v: error is not one line: %q", tc.args, r.stderr)
		}
	}
	if r := run(t, "", "help"); r.code != 0 || !strings.Contains(r.stdout, "gpucache put --key-text demo ./file.bin") {
		t.Fatalf("help: %+v", r)
	}
	if r := run(t, "", "get", "-h"); r.code != 0 || !strings.Contains(r.stdout, "-key-text") {
		t.Fatalf("get -h: %+v", r)
	}
}

// TestMovedCommands: a demo or load tool typed into gpucache exits 2 with
// one line naming gpucache-bench and the command line to run there.
func TestMovedCommands(t *testing.T) {
	for _, cmd := range MovedCommands {
		r := run(t, "", cmd, "--addr", "127.0.0.1:1")
		want := "gpucache: " + cmd + " is a command of gpucache-bench now: run 'gpucache-bench " + cmd + " --addr 127.0.0.1:1'\n"
		if r.code != exitUsage || r.stderr != want || r.stdout != "" {
			t.Errorf("%s: %+v, want exit %d and %q", cmd, r, exitUsage, want)
		}
	}
	if r := run(t, "", "help"); !strings.Contains(r.stdout, "gpucache-bench --help") || strings.Contains(r.stdout, "shard-demo  run") {
		t.Errorf("help does not point at gpucache-bench: %s", r.stdout)
	}
}

func TestMembers(t *testing.T) {
	single := startServer(t)
	if r := run(t, "", "members", "--addr", single); r.code != 0 || !strings.Contains(r.stdout, "single node") {
		t.Fatalf("members of a single node: %+v", r)
	}
	v, err := control.NewView(7, []control.Member{
		{ID: "gpu-1", Addr: "10.0.0.1:9400", FaultDomain: "rack-a", ProtoVersion: 2, CapacityBytes: 96 << 30},
		{ID: "gpu-2", Addr: "10.0.0.2:9400", FaultDomain: "rack-b", ProtoVersion: 1, CapacityBytes: 32 << 30},
		{ID: "gpu-3", Addr: "10.0.0.3:9400", FaultDomain: "rack-b", ProtoVersion: 2, CapacityBytes: 32 << 30, Draining: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	node := servertest.StartWith(t, "127.0.0.1:0", wire.Limits{}, func(c *server.Config) { c.Cluster = server.NewCluster("gpu-1", v) })
	r := run(t, "", "members", "--addr", node.Addr)
	for _, want := range []string{"epoch 7, 3 members", "gpu-1", "75.0%", "rack-b", "v1", "draining"} {
		if r.code != 0 || !strings.Contains(r.stdout, want) {
			t.Fatalf("members output lacks %q: %+v", want, r)
		}
	}
	pinned := servertest.StartWith(t, "127.0.0.1:0", wire.Limits{}, func(c *server.Config) { c.MaxVersion = 1 })
	if r := run(t, "", "members", "--addr", pinned.Addr); r.code != exitFailed || !strings.Contains(r.stderr, "protocol version 1") {
		t.Fatalf("members of a v1 node: %+v", r)
	}
}
