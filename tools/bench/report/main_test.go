package main

import (
	"bytes"
	"flag"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/gpucache/gpucache/tools/internal/bench"
)

var update = flag.Bool("update", false, "rewrite the golden reports in testdata")

func load(t *testing.T, name string) *Run {
	t.Helper()
	r, err := Load(filepath.Join("testdata", name))
	if err != nil {
		t.Fatalf("Load(%s): %v", name, err)
	}
	return r
}

func render(r *Run) string {
	var sb strings.Builder
	r.Write(&sb)
	return sb.String()
}

func TestMedian(t *testing.T) {
	for _, c := range []struct {
		in   []float64
		want float64
	}{
		{[]float64{3}, 3},
		{[]float64{3, 1, 2}, 2},
		{[]float64{4, 1, 3, 2}, 2.5},
		{[]float64{5, 5}, 5},
	} {
		if got := Median(c.in); got != c.want {
			t.Errorf("Median(%v) = %v, want %v", c.in, got, c.want)
		}
	}
	if !math.IsNaN(Median(nil)) {
		t.Errorf("Median(nil) is not NaN")
	}
	in := []float64{3, 1, 2}
	Median(in)
	if in[0] != 3 {
		t.Errorf("Median sorted its input in place")
	}
}

func TestParseRedisCSV(t *testing.T) {
	const h = `"test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms"` + "\n"
	s, err := ParseRedisCSV([]byte(h+`"GET","14104.37","0.305","0.040","0.191","0.751","3.127","37.471"`+"\n"), "GET")
	if err != nil {
		t.Fatal(err)
	}
	if s.OpsPerSec != 14104.37 || math.Abs(s.P50Ns-191e3) > 1e-6 || math.Abs(s.P99Ns-3127e3) > 1e-6 {
		t.Errorf("got %+v", s)
	}
	for name, in := range map[string]string{
		"empty":     "",
		"no row":    h,
		"wrong row": h + `"SET","1","1","1","1","1","1","1"` + "\n",
		"no header": `"GET","1","1","1","1","1","1","1"` + "\n",
		"bad rps":   h + `"GET","x","1","1","1","1","1","1"` + "\n",
		"zero rps":  h + `"GET","0","1","1","1","1","1","1"` + "\n",
		"short row": h + `"GET","10"` + "\n",
	} {
		if _, err := ParseRedisCSV([]byte(in), "GET"); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestParseIperf(t *testing.T) {
	g, err := ParseIperf([]byte(`{"end":{"sum_received":{"bits_per_second":43840221790.34}}}`))
	if err != nil || math.Abs(g-5.48002772379) > 1e-9 {
		t.Errorf("got %v, %v", g, err)
	}
	for _, in := range []string{`{"error":"refused","end":{}}`, `{"end":{}}`, `not json`} {
		if _, err := ParseIperf([]byte(in)); err == nil {
			t.Errorf("%s: no error", in)
		}
	}
}

func TestLoadFull(t *testing.T) {
	r := load(t, "full")
	if ip, ok := r.IperfGBps(); !ok || ip != 5.5 {
		t.Errorf("iperf3 median = %v %v, want 5.5 (rep3 is an error)", ip, ok)
	}
	st, ok := r.Stat(Key{sysGpucache, "get", 1 << 20, 8, 1, 1})
	if !ok || st.N != 2 || math.Abs(st.GBPerSec-5.767168) > 1e-9 || st.P99Ns != 3e6 {
		t.Errorf("gpucache 1MiB c8 = %+v", st)
	}
	st, ok = r.Stat(Key{sysRedis, "get", 64 << 10, 1, 1, 1})
	if !ok || st.N != 3 || st.OpsPerSec != 25000 || math.Abs(st.GBPerSec-25000*65536/1e9) > 1e-9 || math.Abs(st.P99Ns-45e3) > 1e-6 {
		t.Errorf("redis 64KiB c1 = %+v", st)
	}
	if st, ok := r.Stat(Key{sysRedis, "get", 64 << 10, 8, 1, 1}); !ok || st.N != 1 {
		t.Errorf("redis 64KiB c8 = %+v %v, want one sample (r2 is empty)", st, ok)
	}
	notes := strings.Join(r.Notes, "\n")
	for _, want := range []string{"probe failed", "rep3.json skipped", "get_65536_c8_P1_r2.csv skipped"} {
		if !strings.Contains(notes, want) {
			t.Errorf("notes lack %q:\n%s", want, notes)
		}
	}
}

func TestTargetsFull(t *testing.T) {
	want := map[string]struct{ ratio, verdict string }{
		"1 MiB GET, 8 conns: gpucache vs Redis GB/s":                {"2.29×", Pass},
		"1 MiB GET, 8 conns: gpucache vs iperf3 single stream GB/s": {"1.05×", Pass},
		"64 KiB GET, 8 conns: gpucache batch 16 vs Redis -P 8 GB/s": {"2.03×", Pass},
		"p99 GET 64KiB, 1 conns: gpucache ≤ Redis":                  {"1.56×", Miss},
		"p99 GET 64KiB, 8 conns: gpucache ≤ Redis":                  {"0.72×", Pass},
		"p99 GET 1MiB, 1 conns: gpucache ≤ Redis":                   {NotRun, NotRun},
		"p99 GET 1MiB, 8 conns: gpucache ≤ Redis":                   {"1.00×", Pass},
		"p99 PUT 64KiB, 1 conns: gpucache ≤ Redis":                  {"0.85×", Invalid},
		"p99 PUT 64KiB, 8 conns: gpucache ≤ Redis":                  {NotRun, NotRun},
		"p99 PUT 1MiB, 1 conns: gpucache ≤ Redis":                   {NotRun, NotRun},
		"p99 PUT 1MiB, 8 conns: gpucache ≤ Redis":                   {NotRun, NotRun},
		"GC run: Go heap in use ≤ 2% of cached bytes":               {"1.221%", Pass},
		"GC run: GC pause p99 ≤ 100 µs":                             {"1.50× of limit", Miss},
	}
	got := load(t, "full").Targets()
	if len(got) != len(want) {
		t.Errorf("%d targets, want %d", len(got), len(want))
	}
	for _, tg := range got {
		w, ok := want[tg.Name]
		if !ok {
			t.Errorf("unexpected target %q", tg.Name)
			continue
		}
		if tg.Ratio != w.ratio || tg.Verdict != w.verdict {
			t.Errorf("%s: ratio %q verdict %q, want %q %q (measured %q)", tg.Name, tg.Ratio, tg.Verdict, w.ratio, w.verdict, tg.Measured)
		}
	}
}

// TestNothingRan checks that a run with a plan and no data prints NOT_RUN
// everywhere and no measured figure.
func TestNothingRan(t *testing.T) {
	r := load(t, "empty")
	for _, tg := range r.Targets() {
		if tg.Verdict != NotRun || tg.Ratio != NotRun || !strings.HasPrefix(tg.Measured, NotRun) {
			t.Errorf("%s: %+v, want NOT_RUN", tg.Name, tg)
		}
	}
	out := render(r)
	rows := 0
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "| 64KiB |") || strings.HasPrefix(l, "| 1MiB |") {
			rows++
			if strings.Count(l, NotRun) != 6 {
				t.Errorf("row without NOT_RUN in every figure: %s", l)
			}
		}
	}
	// get+put × 2 sizes × 2 conns × 2 systems, plus the batched pair.
	if rows != 18 {
		t.Errorf("%d case rows, want 18", rows)
	}
	if strings.Contains(out, "GB/s vs") || strings.Contains(out, "PASS |") || strings.Contains(out, "MISS |") {
		t.Errorf("report shows a comparison nothing measured:\n%s", out)
	}
}

func TestGCSkipped(t *testing.T) {
	r := load(t, "gcskipped")
	out := render(r)
	if !strings.Contains(out, "NOT_RUN: skipped: 3 GiB available, need 8 GiB") {
		t.Errorf("GC section does not say why it was skipped:\n%s", out)
	}
	n := 0
	for _, tg := range r.Targets() {
		if strings.HasPrefix(tg.Name, "GC run") {
			n++
			if tg.Verdict != NotRun || !strings.Contains(tg.Measured, "3 GiB available") {
				t.Errorf("%+v", tg)
			}
		}
	}
	if n != 2 {
		t.Errorf("%d GC targets, want 2", n)
	}
}

func TestLoadMissingDir(t *testing.T) {
	if _, err := Load(filepath.Join("testdata", "no-such-dir")); err == nil {
		t.Error("no error for a missing directory")
	}
}

// TestGolden pins the whole rendered report of each fixture.
func TestGolden(t *testing.T) {
	for _, name := range []string{"full", "empty", "gcskipped"} {
		t.Run(name, func(t *testing.T) {
			got := render(load(t, name))
			path := filepath.Join("testdata", name+".golden.md")
			if *update {
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test ./tools/bench/report -update)", err)
			}
			if got != string(want) {
				t.Errorf("report differs from %s (rerun with -update and review the diff):\n%s", path, got)
			}
		})
	}
}

// TestParseBenchReadsBenchReport: the bench's own JSON (bench.Report's
// WriteJSON) parses with every field the report reads, and a file without a
// summary is told apart from a summary of zeros.
func TestParseBenchReadsBenchReport(t *testing.T) {
	rep := bench.Report{
		Cases: []bench.CaseResult{{Op: "get", Size: 65536, Conns: 8, Batch: 4, Pipeline: 2, OpsPerSec: 1234.5,
			GBPerSec: 0.5, P50Ns: 100, P99Ns: 900, Errors: 1, Misses: 2, Corrupt: 3}},
		Hold:       &bench.HoldResult{Requested: 4 << 30, Held: 3 << 30},
		ServerStat: map[string]uint64{"hot_bytes_cached": 7},
		Summary:    bench.ServerSummary{GoHeapInUseBytes: 11, GoGCPauseP99Ns: 12, HotBytesCached: 13},
		Notes:      []string{"a note"},
	}
	var buf bytes.Buffer
	if err := rep.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	j, err := parseBench(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if len(j.Cases) != 1 || !reflect.DeepEqual(j.Cases, rep.Cases) || *j.Hold != *rep.Hold || j.ServerStat["hot_bytes_cached"] != 7 ||
		j.Summary == nil || *j.Summary != rep.Summary || len(j.Notes) != 1 {
		t.Fatalf("parsed %+v (summary %+v), want %+v", j.Report, j.Summary, rep)
	}
	j, err = parseBench([]byte(`{"cases":[]}`))
	if err != nil || j.Summary != nil || j.Hold != nil {
		t.Fatalf("no summary: %+v, %v", j, err)
	}
}
