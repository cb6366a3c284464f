package benchcli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpucache/gpucache/tools/internal/replay"
)

// tinyTrace writes a small Mooncake-format trace: shared prefixes, 8
// unique blocks in 13 block accesses.
func tinyTrace(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "trace.jsonl")
	lines := `{"timestamp": 0, "input_length": 1500, "output_length": 10, "hash_ids": [1, 2, 3]}
{"timestamp": 10, "input_length": 2000, "output_length": 10, "hash_ids": [1, 2, 4, 5]}
{"timestamp": 20, "input_length": 700, "output_length": 10, "hash_ids": [6, 7]}
{"timestamp": 30, "input_length": 300, "output_length": 10, "hash_ids": [8]}
{"timestamp": 40, "input_length": 1500, "output_length": 10, "hash_ids": [1, 2, 3]}
`
	if err := os.WriteFile(path, []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestReplaySimulate(t *testing.T) {
	trace := tinyTrace(t)
	dir := t.TempDir()
	js, svg := filepath.Join(dir, "out.json"), filepath.Join(dir, "out.svg")
	r := run(t, "", "replay", "--trace", trace, "--policies", "lru,opt", "--capacities", "100,50,25",
		"--json", js, "--plot", svg, "--progress", "on")
	if r.code != 0 {
		t.Fatalf("replay: %+v", r)
	}
	for _, want := range []string{"trace.jsonl: 5 requests, 8 unique blocks, 13 block accesses",
		"prefix-hit ratio", "prefill tokens saved", "compute saved", "lru", "opt", "25%", "50%", "100%"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, r.stdout)
		}
	}
	// At 100% nothing is evicted: hits are the blocks seen before in a
	// leading run, 1,2 in request 2 and 1,2,3 in request 5: 5 of 13.
	if !strings.Contains(r.stdout, "0.3846") {
		t.Errorf("no 5/13 hit ratio at 100%%:\n%s", r.stdout)
	}
	if !strings.Contains(r.stderr, "100.0%") || !strings.Contains(r.stderr, "\r") {
		t.Errorf("no progress bar on stderr: %q", r.stderr)
	}
	b, err := os.ReadFile(js)
	if err != nil {
		t.Fatal(err)
	}
	var out struct {
		Trace struct {
			File         string `json:"file"`
			Requests     int    `json:"requests"`
			UniqueBlocks int    `json:"unique_blocks"`
		} `json:"trace"`
		Results []replay.Result `json:"results"`
	}
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	if out.Trace.File != trace || out.Trace.Requests != 5 || out.Trace.UniqueBlocks != 8 || len(out.Results) != 6 {
		t.Fatalf("JSON trace %+v, %d results", out.Trace, len(out.Results))
	}
	for _, res := range out.Results {
		if res.Requests != 5 || res.Blocks != 13 || (res.CapacityFrac == 1 && res.HitBlocks != 5) {
			t.Errorf("result %+v", res)
		}
	}
	svgb, err := os.ReadFile(svg)
	if err != nil || !strings.HasPrefix(string(svgb), "<?xml") || !strings.Contains(string(svgb), "<svg") {
		t.Fatalf("plot: %v %.80q", err, svgb)
	}

	// --limit keeps the first requests; progress off prints nothing on
	// stderr.
	r = run(t, "", "replay", "--trace", trace, "--limit", "2", "--policies", "lru", "--capacities", "100", "--progress", "off")
	if r.code != 0 || !strings.Contains(r.stdout, "2 requests, 5 unique blocks") || r.stderr != "" {
		t.Fatalf("--limit 2: %+v", r)
	}
}

func TestReplayUsageErrors(t *testing.T) {
	trace := tinyTrace(t)
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"replay"}, "--trace FILE is required"},
		{[]string{"replay", "--trace", trace, "--policies", "lru,bogus"}, `unknown policy "bogus"`},
		{[]string{"replay", "--trace", trace, "--capacities", "0"}, "capacity 0% out of range (0, 100]"},
		{[]string{"replay", "--trace", trace, "--capacities", "150"}, "capacity 150% out of range"},
		{[]string{"replay", "--trace", trace, "--capacities", "ten"}, `"ten" is not a percentage`},
		{[]string{"replay", "--trace", trace, "--plot", "out.gif"}, "--plot: want a .svg, .png or .pdf"},
		{[]string{"replay", "--trace", trace, "--progress", "maybe"}, "--progress must be auto, on or off"},
		{[]string{"replay", "--trace", trace, "--limit", "-1"}, "--limit must not be negative"},
		{[]string{"replay", "--trace", trace, "--speedup", "2"}, "--speedup needs --live"},
		{[]string{"replay", "--trace", trace, "--live", "--capacities", "5"}, "--capacities is a simulate flag"},
		{[]string{"replay", "--trace", trace, "--live", "--capacity-frac", "1.5"}, "--capacity-frac 1.5 out of range"},
		{[]string{"replay", "--trace", trace, "--live", "--sim-policy", "bogus"}, `--sim-policy: unknown policy "bogus"`},
		{[]string{"replay", "--trace", trace, "--live", "--speedup", "-1"}, "--speedup must be a number >= 0"},
		{[]string{"replay", "--trace", trace, "--live", "--conns", "0"}, "--conns 0 out of range"},
		{[]string{"replay", "--trace", trace, "--live", "--print-capacity"}, "not both"},
		{[]string{"replay", "--trace", trace, "--print-capacity", "--addr", "x:1"}, "--addr is a --live flag"},
		{[]string{"replay", "--trace", trace, "--print-capacity", "--capacity-frac", "0.01"}, "less than one block"},
		{[]string{"replay", "--trace", filepath.Join(t.TempDir(), "none.jsonl")}, "--trace: open"},
		{[]string{"replay", "--trace", trace, "extra"}, "unexpected argument"},
	} {
		r := run(t, "", tc.args...)
		if r.code != 2 || !strings.Contains(r.stderr, tc.msg) {
			t.Errorf("%v: code %d stderr %q; want 2 and %q", tc.args[1:], r.code, r.stderr, tc.msg)
		}
	}
	// A malformed trace is an error naming the line (exit 5).
	bad := filepath.Join(t.TempDir(), "bad.jsonl")
	os.WriteFile(bad, []byte(`{"timestamp": 0, "input_length": 5, "hash_ids": [1]}`+"\n{oops\n"), 0o644)
	if r := run(t, "", "replay", "--trace", bad); r.code != exitFailed || !strings.Contains(r.stderr, "2") {
		t.Errorf("malformed trace: %+v", r)
	}
	if r := run(t, "", "replay", "-h"); r.code != 0 || !strings.Contains(r.stdout, "--print-capacity") {
		t.Errorf("replay -h: %+v", r)
	}
	if r := run(t, "", "help"); !strings.Contains(r.stdout, "replay") {
		t.Errorf("help does not list replay")
	}
}

func TestReplayPrintCapacity(t *testing.T) {
	trace := tinyTrace(t)
	r := run(t, "", "replay", "--trace", trace, "--print-capacity", "--capacity-frac", "0.5", "--scale", "256")
	if r.code != 0 {
		t.Fatalf("%+v", r)
	}
	// 8 unique blocks at 50%: 4 blocks of 256 KiB.
	for _, want := range []string{"capacity_blocks=4\n", "payload_bytes=262144\n", "hot_capacity=1048576\n",
		"hot_min_class=262144\n", "hot_max_class=262144\n", "hot_slab=1048576\n",
		"gpucached_flags='--hot-capacity 1048576 --hot-min-class 262144 --hot-max-class 262144 --hot-slab 1048576'\n"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, r.stdout)
		}
	}
}

func TestReplayLive(t *testing.T) {
	addr := startServer(t)
	trace := tinyTrace(t)
	js := filepath.Join(t.TempDir(), "live.json")
	// 4 KiB payloads; the test server's store has room for every block, so
	// the capacity to compare with is 100%. The server runs the store's
	// built-in order, so the simulator runs lru, not the default adaptive.
	r := run(t, "", "replay", "--live", "--addr", addr, "--trace", trace, "--scale", "16384", "--capacity-frac", "1",
		"--conns", "1", "--policy-name", "builtin", "--sim-policy", "lru", "--json", js, "--progress", "off")
	if r.code != 0 {
		t.Fatalf("%+v", r)
	}
	for _, want := range []string{"live replay of trace.jsonl: 5 requests", "daemon policy builtin", "payload 4096 bytes per block (scale 16384), 1 request in flight",
		"hit ratio      0.3846   simulator (lru, 8 blocks) 0.3846   difference +0.0000", "0 wrong", "p50", "p99"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, r.stdout)
		}
	}
	// The test server's capacity is not the replay's: the report says so.
	if !strings.Contains(r.stdout, "warning: the daemon's hot capacity") {
		t.Errorf("no capacity warning:\n%s", r.stdout)
	}
	b, err := os.ReadFile(js)
	if err != nil {
		t.Fatal(err)
	}
	var out struct {
		PolicyName string `json:"policy_name"`
		Live       struct {
			Requests      int     `json:"requests"`
			HitRatio      float64 `json:"hit_ratio"`
			WrongPayloads int64   `json:"wrong_payloads"`
			Sim           *replay.Result
		} `json:"live"`
	}
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	if out.PolicyName != "builtin" || out.Live.Requests != 5 || out.Live.Sim == nil || out.Live.HitRatio != out.Live.Sim.HitRatio {
		t.Fatalf("JSON %+v", out)
	}
	// A second replay finds the blocks cached: it warns.
	r = run(t, "", "replay", "--live", "--addr", addr, "--trace", trace, "--scale", "16384", "--progress", "off", "--capacity-frac", "1")
	if r.code != 0 || !strings.Contains(r.stdout, "warning: the daemon held 8 blocks before the replay") {
		t.Fatalf("second replay: %+v", r)
	}
}

// TestReplayFlash: --flash-capacities adds the two-tier tables and the
// JSON's "flash" results, one per policy × DRAM capacity × flash capacity
// × reclaim order, each what replay.SimulateFlash returns.
func TestReplayFlash(t *testing.T) {
	trace := tinyTrace(t)
	js := filepath.Join(t.TempDir(), "out.json")
	r := run(t, "", "replay", "--trace", trace, "--policies", "lru", "--capacities", "25,50", "--flash-capacities", "50,25",
		"--flash-segment", "2", "--progress", "off", "--json", js)
	if r.code != 0 {
		t.Fatalf("replay: %+v", r)
	}
	for _, want := range []string{"prefix-hit ratio (leading-run hits / block accesses)",
		"and each × 2 flash capacities × 2 reclaim orders",
		"two tiers: DRAM (the policy, at --capacities) above flash (log-structured, 2-block segments reclaimed whole)",
		"hit ratio by tier", "compute saved by tier", "flash and cold writes", "cold write-through", "cold on-reclaim", "fewest-live",
		// LRU at 2 DRAM blocks above 2 segments of 2: every reuse is
		// found in some tier, 5 of 13.
		"     lru   25%    50%         2       oldest  0.0769  0.1538  0.1538      0.2308  0.3846\n"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, r.stdout)
		}
	}
	b, err := os.ReadFile(js)
	if err != nil {
		t.Fatal(err)
	}
	var out struct {
		Results []replay.Result      `json:"results"`
		Flash   []replay.FlashResult `json:"flash"`
	}
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	if len(out.Results) != 2 || len(out.Flash) != 8 {
		t.Fatalf("%d results, %d flash results; want 2, 8", len(out.Results), len(out.Flash))
	}
	reqs, err := readTraceFile(trace, 0)
	if err != nil {
		t.Fatal(err)
	}
	i := 0
	for _, dram := range []float64{0.25, 0.5} {
		for _, fl := range []float64{0.25, 0.5} {
			for _, order := range replay.ReclaimOrders() {
				want, err := replay.SimulateFlash(reqs, "lru", replay.FlashConfig{DRAMFrac: dram, FlashFrac: fl, SegmentBlocks: 2, Reclaim: order}, nil)
				if err != nil {
					t.Fatal(err)
				}
				got := out.Flash[i]
				got.Seconds, want.Seconds = 0, 0
				if got != want {
					t.Errorf("flash result %d: %+v\nwant %+v", i, got, want)
				}
				i++
			}
		}
	}
}

func TestReplayFlashUsageErrors(t *testing.T) {
	trace := tinyTrace(t)
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"--flash-segment", "2"}, "--flash-segment needs --flash-capacities"},
		{[]string{"--flash-reclaim", "oldest"}, "--flash-reclaim needs --flash-capacities"},
		{[]string{"--flash-capacities", "0"}, "--flash-capacities: capacity 0% out of range (0, 100]"},
		{[]string{"--flash-capacities", "lots"}, `--flash-capacities: "lots" is not a percentage`},
		{[]string{"--flash-capacities", "50", "--flash-segment", "0"}, "--flash-segment must be at least 1 block"},
		{[]string{"--flash-capacities", "50", "--flash-segment", "2", "--flash-reclaim", "newest"}, `--flash-reclaim: unknown order "newest"`},
		{[]string{"--flash-capacities", "50", "--flash-segment", "2", "--flash-reclaim", ","}, "--flash-reclaim names no order"},
		// 8 unique blocks: 25% is 2 blocks, less than the default segment.
		{[]string{"--flash-capacities", "25"}, "25% of 8 unique blocks is 2 blocks, less than one segment (--flash-segment 256)"},
		{[]string{"--live", "--flash-capacities", "50"}, "--flash-capacities is a simulate flag"},
	} {
		r := run(t, "", append([]string{"replay", "--trace", trace, "--progress", "off"}, tc.args...)...)
		if r.code != 2 || !strings.Contains(r.stderr, tc.msg) {
			t.Errorf("%v: code %d stderr %q; want 2 and %q", tc.args, r.code, r.stderr, tc.msg)
		}
	}
}
