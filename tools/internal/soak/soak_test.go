package soak

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/gpucache/gpucache/api/wire"
	"github.com/gpucache/gpucache/client"
	"github.com/gpucache/gpucache/internal/degrade"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func testKeys(t *testing.T, n int) []client.BlockKey {
	t.Helper()
	ks, err := newKeyspace(namespace("alpha", "m"), n, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	var out []client.BlockKey
	for _, c := range ks.chains[:n] {
		out = append(out, c.keys...)
	}
	return out
}

// TestOracle: a payload is a pure function of its key, its size stays in
// range, and Check accepts exactly that payload.
func TestOracle(t *testing.T) {
	o := Oracle{Min: 4 << 10, Max: 16 << 10}
	keys := testKeys(t, 64)
	sizes := map[int]bool{}
	for _, k := range keys {
		p := o.Payload(k)
		if len(p) < o.Min || len(p) > o.Max {
			t.Fatalf("payload of %d bytes outside [%d, %d]", len(p), o.Min, o.Max)
		}
		sizes[len(p)] = true
		if !bytes.Equal(p, o.Payload(k)) {
			t.Fatal("payload is not deterministic")
		}
		if !o.Check(k, p) {
			t.Fatal("Check refuses the oracle's own payload")
		}
		bad := bytes.Clone(p)
		bad[len(bad)-1] ^= 1
		if o.Check(k, bad) || o.Check(k, p[:len(p)-1]) || o.Check(k, append(bytes.Clone(p), 0)) {
			t.Fatal("Check accepts a flipped, truncated or extended payload")
		}
	}
	if len(sizes) < 32 {
		t.Fatalf("only %d distinct sizes over 64 keys", len(sizes))
	}
	if o.Check(keys[1], o.Payload(keys[0])) && o.Size(keys[0]) == o.Size(keys[1]) {
		t.Fatal("another key's payload passes")
	}
}

// TestKeyspaceChainsAreDisjoint: no two chains, and no two tenants, share
// a block key.
func TestKeyspaceChainsAreDisjoint(t *testing.T) {
	seen := map[client.BlockKey]string{}
	for _, tenant := range []string{"alpha", "beta"} {
		ks, err := newKeyspace(namespace(tenant, "soak-"+tenant), 8, 8, 4)
		if err != nil {
			t.Fatal(err)
		}
		if len(ks.chains) != 16 || ks.hot != 8 {
			t.Fatalf("%d chains, %d hot", len(ks.chains), ks.hot)
		}
		for i, c := range ks.chains {
			if len(c.keys) != 4 || len(c.tokens) != 4*blockTokens {
				t.Fatalf("chain %d: %d keys, %d tokens", i, len(c.keys), len(c.tokens))
			}
			for _, k := range c.keys {
				if prev, ok := seen[k]; ok {
					t.Fatalf("%s chain %d shares a key with %s", tenant, i, prev)
				}
				seen[k] = tenant
			}
		}
	}
}

// TestHistoryChecksEveryBlock: a hit is verified or wrong, a miss needs a
// reason, a hit with a reason is unexplained.
func TestHistoryChecksEveryBlock(t *testing.T) {
	o := Oracle{Min: 100, Max: 200}
	h := newHistory(o, time.Second, 50*time.Millisecond)
	k := testKeys(t, 1)[0]
	good := o.Payload(k)
	bad := bytes.Clone(good)
	bad[0] ^= 0xff
	h.block(callGet, "alpha", k, client.GetResult{Hit: true, Data: good})
	h.block(callGet, "alpha", k, client.GetResult{Hit: true, Data: bad})
	h.block(callGet, "alpha", k, client.GetResult{Reason: client.ErrNotCached})
	h.block(callGet, "alpha", k, client.GetResult{Reason: &wire.Error{Code: wire.CodeWrongEpoch}})
	h.block(callGet, "alpha", k, client.GetResult{})
	h.block(callGet, "alpha", k, client.GetResult{Hit: true, Data: good, Reason: client.ErrTimeout})
	if h.verified.Load() != 1 || h.wrong.Load() != 1 || h.missReason.Load() != 2 || h.unexplained.Load() != 2 {
		t.Fatalf("verified %d wrong %d missed %d unexplained %d", h.verified.Load(), h.wrong.Load(), h.missReason.Load(), h.unexplained.Load())
	}
	if h.blocksChecked() != 6 {
		t.Fatalf("blocks checked %d, want 6", h.blocksChecked())
	}
	reasons := strings.Join(h.reasonList(), " ")
	if !strings.Contains(reasons, "alpha miss:not_cached=1") || !strings.Contains(reasons, "alpha miss:server:WRONG_EPOCH=1") {
		t.Fatalf("reasons %q", reasons)
	}
	if ex := strings.Join(h.exampleList(), "\n"); !strings.Contains(ex, "WRONG PAYLOAD") || !strings.Contains(ex, "without a reason") {
		t.Fatalf("violations not recorded:\n%s", ex)
	}
}

// TestHistoryOverruns: a call past its deadline by more than the slack is
// an overrun; within the slack it is not.
func TestHistoryOverruns(t *testing.T) {
	h := newHistory(Oracle{Min: 1, Max: 1}, time.Second, 50*time.Millisecond)
	h.call(callGet, 10*time.Millisecond)
	h.call(callGet, time.Second+50*time.Millisecond)
	h.call(callPut, time.Second+51*time.Millisecond)
	h.call(callLookup, 3*time.Second)
	if h.overruns() != 2 || h.totalCalls() != 4 {
		t.Fatalf("overruns %d of %d calls, want 2 of 4", h.overruns(), h.totalCalls())
	}
	for _, c := range h.summaries() {
		if c.Kind == callLookup && (c.WorstOverMs != 2000 || c.Overruns != 1) {
			t.Fatalf("lookup summary %+v", c)
		}
	}
}

func TestReasonClass(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{client.ErrNotCached, "not_cached"},
		{client.ErrTimeout, "timeout"},
		{context.DeadlineExceeded, "timeout"},
		{client.ErrUnavailable, "unavailable"},
		{client.ErrProtocol, "protocol"},
		{errors.Join(client.ErrServer, &wire.Error{Code: wire.CodeShuttingDown}), "server:SHUTTING_DOWN"},
		{errors.New("x"), "other"},
	} {
		if got := reasonClass(c.err); got != c.want {
			t.Errorf("reasonClass(%v) = %q, want %q", c.err, got, c.want)
		}
	}
}

func TestParseMetrics(t *testing.T) {
	m, err := parseMetrics(strings.NewReader(`# HELP go_goroutines x
# TYPE go_goroutines gauge
go_goroutines 41
go_gc_duration_seconds{quantile="0"} 0.001
gpucache_blocks_hit_total 1.5e+06
gpucache_control_mode_total 2
process_resident_memory_bytes 5.24288e+07 1700000000
`))
	if err != nil {
		t.Fatal(err)
	}
	if m.get("go_goroutines") != 41 || m.get("gpucache_blocks_hit") != 1.5e6 || m.get("gpucache_control_mode") != 2 ||
		m.get("process_resident_memory_bytes") != 52428800 {
		t.Fatalf("parsed %v", m)
	}
	if _, ok := m["go_gc_duration_seconds"]; ok {
		t.Fatal("kept a labelled series")
	}
}

func validConfig() Config {
	c := Default()
	c.Gpucached, c.Helper, c.Versitygw, c.Dir = "/bin/true", []string{"/bin/true"}, "/bin/true", "/tmp"
	return c
}

// TestConfigBounds: a soak is bounded; every out-of-range field is refused
// with a message that names it.
func TestConfigBounds(t *testing.T) {
	if err := validConfig().Validate(); err != nil {
		t.Fatal(err)
	}
	for name, mut := range map[string]func(*Config){
		"duration":   func(c *Config) { c.Duration = MaxDuration + time.Second },
		"ops":        func(c *Config) { c.Ops = MaxOps + 1 },
		"workers":    func(c *Config) { c.Workers = MaxWorkers + 1 },
		"op timeout": func(c *Config) { c.OpTimeout = time.Millisecond },
		"payload":    func(c *Config) { c.MinPayload, c.MaxPayload = 10, 5 },
		"chains":     func(c *Config) { c.ScanChains = MaxChains + 1 },
		"schedule":   func(c *Config) { c.Schedule.Hold = 0 },
		"cycles":     func(c *Config) { c.Schedule.Cycles = -1 },
		"netns":      func(c *Config) { c.Netns = "on" },
		"tmpfs size": func(c *Config) { c.TmpfsSize = 1 << 40 },
		"unknown":    func(c *Config) { c.Schedule.Faults = []string{"meteor"} },
		"twice":      func(c *Config) { c.Schedule.Faults = []string{FaultKill9, FaultKill9} },
		"required":   func(c *Config) { c.Versitygw = "" },
	} {
		c := validConfig()
		mut(&c)
		err := c.Validate()
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: Validate() = %v, want ErrInvalid", name, err)
		}
	}
	if f, err := ParseFaults("kill9, etcd"); err != nil || strings.Join(f, ",") != "kill9,etcd" {
		t.Fatalf("ParseFaults = %v, %v", f, err)
	}
	if f, _ := ParseFaults("all"); len(f) != len(AllFaults()) {
		t.Fatal("all is not every fault")
	}
	if f, err := ParseFaults("none"); err != nil || len(f) != 0 {
		t.Fatal("none is not no fault")
	}
	if _, err := ParseFaults("kill9,meteor"); !errors.Is(err, ErrInvalid) {
		t.Fatal("an unknown fault parses")
	}
}

// TestFailpointCommands: the node's stdin commands arm and disarm the
// daemon's failpoints; bad commands are answered with an error.
func TestFailpointCommands(t *testing.T) {
	reg := &degrade.Registry{}
	fp := &failpoints{reg: reg, disarm: map[degrade.Fault]func(){}}
	probe := func() error {
		_, err := degrade.Do(context.Background(), reg, degrade.S3Unavailable, time.Second, func(context.Context) (int, error) { return 1, nil })
		return err
	}
	if r := fp.do([]string{"arm", "s3_unavailable", "fail"}); r != "ok armed s3_unavailable fail" {
		t.Fatalf("arm: %q", r)
	}
	if err := probe(); !errors.Is(err, degrade.ErrMiss) {
		t.Fatalf("armed failpoint did not fire: %v", err)
	}
	if r := fp.do([]string{"hits", "s3_unavailable"}); r != "ok hits=1" {
		t.Fatalf("hits: %q", r)
	}
	if r := fp.do([]string{"disarm", "s3_unavailable"}); r != "ok disarmed s3_unavailable hits=1" {
		t.Fatalf("disarm: %q", r)
	}
	if err := probe(); err != nil {
		t.Fatalf("disarmed failpoint fired: %v", err)
	}
	for _, bad := range [][]string{{}, {"arm", "meteor", "fail"}, {"arm", "s3_slow", "sometimes"}, {"explode", "s3_slow"}} {
		if r := fp.do(bad); !strings.HasPrefix(r, "error") {
			t.Errorf("%q answered %q", bad, r)
		}
	}
	var out bytes.Buffer
	fp.serve(strings.NewReader("arm nvme_timeout hang\ndisarm nvme_timeout\n"), &out)
	if out.String() != "ok armed nvme_timeout hang\nok disarmed nvme_timeout hits=0\n" {
		t.Fatalf("serve answered %q", out.String())
	}
}

// TestPhaseGrowth: a node that grows past the thresholds within a phase,
// or across cycles, is flagged; a restarted node is not compared.
func TestPhaseGrowth(t *testing.T) {
	th := Default().Thresholds
	s := &soak{cfg: Config{Thresholds: th}, nodes: []*node{{spec: nodeSpec{name: "a"}}, {spec: nodeSpec{name: "b"}}, {spec: nodeSpec{name: "c"}}}}
	start := map[string]Sample{
		"a": {PID: 1, Goroutines: 40, RSS: 100 << 20, Mapped: 60 << 20},
		"b": {PID: 2, Goroutines: 40, RSS: 100 << 20, Mapped: 60 << 20},
		"c": {PID: 3, Goroutines: 40, RSS: 100 << 20},
	}
	end := map[string]Sample{
		"a": {PID: 1, Goroutines: 60, RSS: 140 << 20, Mapped: 60 << 20}, // rest 40 -> 80 MiB: within ×1.10+16 and ×1.25+32MiB
		"b": {PID: 2, Goroutines: 61, RSS: 100 << 20, Mapped: 60 << 20}, // one goroutine too many
		"c": {PID: 4, Goroutines: 400, RSS: 900 << 20},                  // restarted
	}
	pn := s.compare(start, end)
	if pn[0].Grew || !pn[0].Compared || !pn[1].Grew || pn[2].Compared || pn[2].Grew {
		t.Fatalf("phase nodes %+v", pn)
	}
	phases := []PhaseRecord{
		{Fault: "x", Cycle: 1, Nodes: []PhaseNode{{Node: "a", PIDStart: 1, PIDEnd: 1, Compared: true, GoroutinesStart: 10, GoroutinesEnd: 10, RestStart: 1 << 20, RestEnd: 1 << 20}}},
		{Fault: "y", Cycle: 2, Nodes: []PhaseNode{{Node: "a", PIDStart: 1, PIDEnd: 1, Compared: true, GoroutinesStart: 40, GoroutinesEnd: 40, RestStart: 40 << 20, RestEnd: 60 << 20}}},
		{Fault: "z", Cycle: 3, Nodes: []PhaseNode{{Node: "a", PIDStart: 1, PIDEnd: 1, Compared: true, GoroutinesStart: 40, GoroutinesEnd: 40, RestStart: 60 << 20, RestEnd: 90 << 20},
			// b was restarted in cycle 2: from its cold start it "grows", which is warm-up, not drift.
			{Node: "b", PIDStart: 7, PIDEnd: 7, Compared: true, GoroutinesStart: 10, GoroutinesEnd: 40, RestStart: 1 << 20, RestEnd: 90 << 20}}},
	}
	d := drifts(phases, th, time.Time{}, 0)
	if len(d) != 1 || !d[0].Grew || d[0].From != "y" || d[0].FromCycle != 2 || d[0].To != "z" || d[0].RestFrom != 40<<20 || d[0].RestTo != 90<<20 {
		t.Fatalf("drifts %+v", d)
	}
	// With a drift-after of 30 minutes the baseline is the first phase of
	// cycle 2 or later that starts 30 minutes into the load: the growth
	// before it (the cycle-2 phase, at minute 20) is warm-up.
	t0 := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	phases[0].Start, phases[1].Start, phases[2].Start = t0.Add(time.Minute), t0.Add(20*time.Minute), t0.Add(35*time.Minute)
	d = drifts(phases, th, t0, 30*time.Minute)
	if len(d) != 2 || d[0].Node != "a" || d[0].Grew || d[0].From != "z" || d[0].FromCycle != 3 || d[0].FromMinute != 35 || d[0].RestFrom != 60<<20 ||
		d[1].Node != "b" || !d[1].Grew {
		t.Fatalf("drifts after 30m %+v", d)
	}
}

// TestReportOutputs: the text report states the verdict, every fault
// (NOT_RUN with its reason) and RSS per node; the files hold the JSON
// report and one CSV row per sample.
func TestReportOutputs(t *testing.T) {
	at := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	r := &Report{Calls: 10, Blocks: Blocks{Checked: 40, Verified: 30, Missed: 10},
		Faults:  []FaultRecord{{Fault: FaultKill9, Cycle: 1, Recovered: true, RecoverySec: 1.5, HealedAt: at}, {Fault: FaultPartition, Cycle: 1, NotRun: "NOT_RUN: not root"}},
		Summary: []FaultCount{{Fault: FaultKill9, Injected: 1, Recovered: 1, WorstSec: 1.5}, {Fault: FaultPartition, NotRun: "NOT_RUN: not root"}},
		Phases:  []PhaseRecord{{Fault: FaultKill9, Cycle: 1, End: at, Nodes: []PhaseNode{{Node: "n1", RSSEnd: 80 << 20, RestEnd: 40 << 20}}}},
		RSS:     []NodeRSS{{Node: "n1", Samples: 2, First: 50 << 20, Min: 50 << 20, Max: 90 << 20, Last: 80 << 20}},
		Samples: []Sample{{At: at, Node: "n1", PID: 7, RSS: 50 << 20}, {At: at.Add(time.Second), Node: "n1", PID: 7, RSS: 80 << 20}}}
	var b strings.Builder
	r.WriteText(&b)
	out := b.String()
	for _, want := range []string{"SOAK PASS", "10 client calls checked", "NOT_RUN: not root", "kill9 #1", "n1    2", "12:00:00  kill9 #1  80 (40)"} {
		if !strings.Contains(out, want) {
			t.Errorf("text report lacks %q:\n%s", want, out)
		}
	}
	r.Failures = []string{"1 wrong payloads"}
	b.Reset()
	r.WriteText(&b)
	if !strings.Contains(b.String(), "SOAK FAIL") || !strings.Contains(b.String(), "FAILED: 1 wrong payloads") {
		t.Errorf("a failed report does not say so:\n%s", b.String())
	}
	dir := t.TempDir()
	if err := r.WriteFiles(dir); err != nil {
		t.Fatal(err)
	}
	csv, err := os.ReadFile(filepath.Join(dir, "rss.csv"))
	if err != nil || strings.Count(string(csv), "\n") != 3 || !strings.Contains(string(csv), ",n1,7,83886080,") {
		t.Fatalf("rss.csv: %v\n%s", err, csv)
	}
	js, err := os.ReadFile(filepath.Join(dir, "report.json"))
	if err != nil || !strings.Contains(string(js), `"client_calls": 10`) || !strings.Contains(string(js), `"not_run": "NOT_RUN: not root"`) {
		t.Fatalf("report.json: %v\n%s", err, js)
	}
}
