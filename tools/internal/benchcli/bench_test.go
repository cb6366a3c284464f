package benchcli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpucache/gpucache/api/wire"
	"github.com/gpucache/gpucache/internal/cli"
	"github.com/gpucache/gpucache/internal/control"
	"github.com/gpucache/gpucache/internal/server"
	"github.com/gpucache/gpucache/internal/server/servertest"
	"github.com/gpucache/gpucache/tools/internal/bench"
)

func TestUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		msg  string
	}{
		{nil, 2, "Usage:"},
		{[]string{"frobnicate"}, 2, `unknown command "frobnicate"`},
		{[]string{"bnech"}, 2, `did you mean "bench"?`},
		{[]string{"put"}, 2, "data, admin and doctor commands are gpucache's"},
		{[]string{"bench", "--sizes", "lots"}, 2, "--sizes"},
		{[]string{"bench", "--op", "scan"}, 2, "--op"},
		{[]string{"bench", "--no-such-flag"}, 2, "gpucache-bench bench: flag provided but not defined: -no-such-flag; see 'gpucache-bench bench --help'"},
	} {
		r := run(t, "", tc.args...)
		if r.code != tc.code || !strings.Contains(r.stderr, tc.msg) {
			t.Errorf("%v: code %d stderr %q; want %d and %q", tc.args, r.code, r.stderr, tc.code, tc.msg)
		}
		if tc.args != nil && strings.Count(r.stderr, "\n") != 1 {
			t.Errorf("%v: error is not one line: %q", tc.args, r.stderr)
		}
	}
	if r := run(t, "", "help"); r.code != 0 || !strings.Contains(r.stdout, "gpucache-bench <command>") {
		t.Fatalf("help: %+v", r)
	}
	if r := run(t, "", "bench", "-h"); r.code != 0 || !strings.Contains(r.stdout, "Usage: gpucache-bench bench") || !strings.Contains(r.stdout, "-hold-bytes") {
		t.Fatalf("bench -h: %+v", r)
	}
	if r := run(t, "", "--version"); r.code != 0 || !strings.HasPrefix(r.stdout, "gpucache-bench ") {
		t.Fatalf("--version: %+v", r)
	}
}

func TestBenchCommand(t *testing.T) {
	addr := startServer(t)
	js := filepath.Join(t.TempDir(), "bench.json")
	r := run(t, "", "bench", "--addr", addr, "--op", "both", "--sizes", "16KiB,64KiB", "--conns", "1,2",
		"--requests", "50", "--keys", "16", "--batch", "2", "--pipeline", "2", "--hold-bytes", "2MiB", "--json", js)
	if r.code != 0 {
		t.Fatalf("bench: %+v", r)
	}
	for _, want := range []string{"ops/s", "GB/s", "p999", "corrupt", "16KiB", "go_heap_inuse"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("table lacks %q:\n%s", want, r.stdout)
		}
	}
	if n := strings.Count(r.stderr, "case "); n != 8 {
		t.Errorf("%d progress lines, want 8:\n%s", n, r.stderr)
	}
	b, err := os.ReadFile(js)
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Cases []struct {
			Op      string `json:"op"`
			Corrupt uint64 `json:"corrupt"`
			Errors  uint64 `json:"errors"`
		} `json:"cases"`
		ServerStat map[string]uint64 `json:"server_stat"`
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Cases) != 8 || rep.ServerStat["go_heap_inuse_bytes"] == 0 {
		t.Fatalf("json: %d cases, stat %v", len(rep.Cases), rep.ServerStat["go_heap_inuse_bytes"])
	}
	for _, c := range rep.Cases {
		if c.Corrupt != 0 || c.Errors != 0 {
			t.Fatalf("case %+v", c)
		}
	}
}

func TestShardDemo(t *testing.T) {
	var out, errb bytes.Buffer
	code := Main(context.Background(), []string{"shard-demo", "--clients", "4", "--blocks", "16"}, cli.Stdio{Out: &out, Err: &errb})
	if code != 0 {
		t.Fatalf("exit %d\n%s%s", code, out.String(), errb.String())
	}
	for _, want := range []string{"SHARD_OK", "rdma=NOT_RUN_HARDWARE", "dma_posted=false fallback=RdmaNotLinked", "16 fills for 16 blocks"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("output lacks %q:\n%s", want, out.String())
		}
	}
}

func TestColdDemo(t *testing.T) {
	var out, errb bytes.Buffer
	code := Main(context.Background(), []string{"cold-demo", "--dir", t.TempDir()}, cli.Stdio{Out: &out, Err: &errb})
	if code != 0 {
		t.Fatalf("exit %d\n%s%s", code, out.String(), errb.String())
	}
	for _, want := range []string{"COLD_CONTRACT_OK", "gds=NOT_RUN_HARDWARE", "8/8 blocks byte-identical", "0 payload reads", "0 bytes returned", "0 store writes"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("output lacks %q:\n%s", want, out.String())
		}
	}
}

// TestClusterBench: bench --cluster against three real nodes splits every
// case over all members (checkClusterBench).
func TestClusterBench(t *testing.T) {
	nodes := servertest.StartCluster(t, 3)
	checkClusterBench(t, nodes[0].Addr+","+nodes[1].Addr, 3)
}

// TestBenchReadOnly: against a node that lost its control plane, the bench
// counts READ_ONLY on its own, not as errors.
func TestBenchReadOnly(t *testing.T) {
	cl := server.NewCluster("gpu-1", control.View{})
	node := servertest.StartWith(t, "127.0.0.1:0", wire.Limits{}, func(c *server.Config) { c.Cluster = cl })
	v, err := control.NewView(1, []control.Member{{ID: "gpu-1", Addr: node.Addr, FaultDomain: "r", ProtoVersion: wire.VersionMax, CapacityBytes: 1 << 30}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := node.Srv.AdvanceView(v); err != nil {
		t.Fatal(err)
	}
	cl.SetMode(server.ControlReadOnly)
	// The bench counts READ_ONLY on its own, not as errors.
	r := run(t, "", "bench", "--addr", node.Addr, "--op", "put", "--sizes", "16KiB", "--conns", "1",
		"--requests", "8", "--keys", "8", "--batch", "4")
	// 8 requests of 4 blocks each.
	if r.code != exitOK || !strings.Contains(r.stdout, "read-only 32: PUT blocks answered READ_ONLY") ||
		!strings.Contains(r.stderr, "errors 0 misses 0 corrupt 0 read-only 32") {
		t.Fatalf("bench against a read-only node: %+v", r)
	}
}

// checkClusterBench runs bench --cluster seeds and checks the report: no
// errors, no misses, no corruption, and every case split over all members
// whose shares add up to the case.
func checkClusterBench(t *testing.T, seeds string, members int) {
	t.Helper()
	js := filepath.Join(t.TempDir(), "bench.json")
	r := run(t, "", "bench", "--cluster", seeds, "--op", "both", "--sizes", "16KiB", "--conns", "1,2",
		"--requests", "60", "--keys", "48", "--batch", "4", "--json", js)
	if r.code != exitOK {
		t.Fatalf("bench --cluster: %+v", r)
	}
	if !strings.Contains(r.stdout, "per node") || !strings.Contains(r.stdout, "0 WRONG_EPOCH") {
		t.Errorf("bench table lacks the per-node figures:\n%s", r.stdout)
	}
	b, err := os.ReadFile(js)
	if err != nil {
		t.Fatal(err)
	}
	var rep bench.Report
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Cluster == nil || len(rep.Cluster.Members) != members || len(rep.Cluster.Nodes) != members {
		t.Fatalf("report's cluster: %+v", rep.Cluster)
	}
	for _, n := range rep.Cluster.Nodes {
		if n.Error != "" || n.Summary.HotBytesCached == 0 {
			t.Errorf("node %s: %+v", n.ID, n)
		}
	}
	if len(rep.Cases) != 4 {
		t.Fatalf("%d cases, want 4", len(rep.Cases))
	}
	for _, c := range rep.Cases {
		if c.Errors != 0 || c.Misses != 0 || c.Corrupt != 0 || c.Blocks == 0 || c.GBPerSec <= 0 {
			t.Errorf("case %s %s conns=%d: %d blocks, %d errors, %d misses, %d corrupt, %.3f GB/s (%s)",
				c.Op, c.SizeLabel, c.Conns, c.Blocks, c.Errors, c.Misses, c.Corrupt, c.GBPerSec, c.FirstError)
		}
		if len(c.Nodes) != members {
			t.Fatalf("case %s: %d nodes, want %d", c.Op, len(c.Nodes), members)
		}
		var blocks, bytes uint64
		for _, n := range c.Nodes {
			if n.Blocks == 0 || n.Addr == "" {
				t.Errorf("case %s conns=%d: node %s has no share: %+v", c.Op, c.Conns, n.ID, n)
			}
			blocks += n.Blocks
			bytes += n.Bytes
		}
		if blocks != c.Blocks || bytes != c.Bytes {
			t.Errorf("case %s conns=%d: nodes add up to %d blocks %d bytes, case has %d and %d", c.Op, c.Conns, blocks, bytes, c.Blocks, c.Bytes)
		}
	}
}

// TestBenchCPUProfile: --cpuprofile writes a CPU profile (gzipped
// protobuf) of the client's run.
func TestBenchCPUProfile(t *testing.T) {
	addr := startServer(t)
	prof := filepath.Join(t.TempDir(), "client.pprof")
	r := run(t, "", "bench", "--addr", addr, "--op", "put", "--sizes", "16KiB", "--conns", "1",
		"--requests", "20", "--keys", "8", "--cpuprofile", prof)
	if r.code != exitOK {
		t.Fatalf("bench --cpuprofile: %+v", r)
	}
	b, err := os.ReadFile(prof)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b {
		t.Fatalf("profile is not gzipped: % x", b[:min(len(b), 8)])
	}
	if r := run(t, "", "bench", "--addr", addr, "--requests", "1", "--cpuprofile", filepath.Join(t.TempDir(), "no", "such", "dir")); r.code == exitOK {
		t.Fatalf("bench --cpuprofile into a missing directory succeeded: %+v", r)
	}
}
