package main

import (
	"encoding/csv"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/gpucache/gpucache/internal/bench"
)

// NotRun is printed wherever a figure was not measured.
const NotRun = "NOT_RUN"

// Systems, in the order they are listed.
const (
	sysGpucache = "gpucache"
	sysRedis    = "redis"
)

// Target thresholds.
const (
	targetVsRedis1MiB   = 1.3
	targetVsIperf       = 0.85
	targetBatchVsPipe   = 2.0
	targetHeapFraction  = 0.02
	targetGCPauseP99Ns  = 100e3
	batchCaseSize       = 64 << 10
	batchCaseConns      = 8
	batchCaseBatch      = 16
	redisPipelineDepth  = 8
	headlineSize        = 1 << 20
	headlineConns       = 8
	defaultBatch        = 1
	defaultPipeline     = 1
	defaultRedisClients = 1
)

func main() {
	dir := flag.String("dir", "", "raw results directory written by bench/compare.sh")
	out := flag.String("out", "", "write the markdown here as well as to stdout")
	quiet := flag.Bool("q", false, "do not print the report to stdout")
	flag.Parse()
	if *dir == "" {
		fmt.Fprintln(os.Stderr, "report: -dir is required")
		flag.Usage()
		os.Exit(2)
	}
	run, err := Load(*dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "report:", err)
		os.Exit(1)
	}
	var sb strings.Builder
	run.Write(&sb)
	if *out != "" {
		if err := os.WriteFile(*out, []byte(sb.String()), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "report:", err)
			os.Exit(1)
		}
	}
	if !*quiet {
		fmt.Print(sb.String())
	}
}

// KV is an ordered list of key/value pairs read from a "key<TAB>value" file.
type KV struct {
	Keys []string
	Vals map[string]string
}

func (kv KV) get(k string) string { return kv.Vals[k] }

// Plan is what the script meant to measure.
type Plan struct {
	Duration string
	Reps     int
	Quick    bool
	GC       bool
	Sizes    []int
	Conns    []int
}

// Key identifies one measured case.
type Key struct {
	System   string
	Op       string // get or put
	Size     int
	Conns    int
	Batch    int // gpucache keys per request; 1 for Redis
	Pipeline int // gpucache requests in flight per conn, Redis -P
}

// Sample is one repetition of one case. Latencies are in nanoseconds.
type Sample struct {
	OpsPerSec float64
	GBPerSec  float64
	P50Ns     float64
	P99Ns     float64
	Errors    uint64
	Misses    uint64
	Corrupt   uint64
}

// Stat is the median over repetitions of one case.
type Stat struct {
	N                        int
	OpsPerSec, GBPerSec      float64
	P50Ns, P99Ns             float64
	MinGBPerSec, MaxGBPerSec float64
	Errors, Misses, Corrupt  uint64
}

// Bad reports whether any repetition saw errors, misses or corrupt blocks.
func (s Stat) Bad() bool { return s.Errors+s.Misses+s.Corrupt > 0 }

// GCResult is the GC and memory run.
type GCResult struct {
	Ran          bool
	Reason       string // why it did not run, or why its figures are missing
	HeapInUse    uint64
	HotCached    uint64
	GCPauseP99Ns uint64
	HasHeap      bool
	HasPause     bool
	HoldReq      int64
	HoldHeld     int64
	Case         *Sample
}

// Run is everything loaded from one results directory.
type Run struct {
	Dir     string
	Machine KV
	Plan    Plan
	Notes   []string
	Iperf   []float64 // GB/s per repetition
	Cases   map[Key][]Sample
	GC      GCResult
}

// Load reads a results directory. Files that cannot be parsed are skipped
// and recorded in Notes; a missing directory is an error.
func Load(dir string) (*Run, error) {
	if st, err := os.Stat(dir); err != nil {
		return nil, err
	} else if !st.IsDir() {
		return nil, fmt.Errorf("%s is not a directory", dir)
	}
	r := &Run{Dir: dir, Cases: map[Key][]Sample{}}
	var err error
	if r.Machine, err = readKV(filepath.Join(dir, "machine.txt")); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	planKV, err := readKV(filepath.Join(dir, "plan.txt"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	r.Plan, err = parsePlan(planKV)
	if err != nil {
		return nil, fmt.Errorf("plan.txt: %w", err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "notes.txt")); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if l = strings.TrimSpace(l); l != "" {
				r.Notes = append(r.Notes, l)
			}
		}
	}
	r.loadIperf(filepath.Join(dir, "iperf3"))
	r.loadRedis(filepath.Join(dir, "redis"))
	r.loadGpucache(filepath.Join(dir, "gpucache"))
	r.loadGC(filepath.Join(dir, "gc"))
	return r, nil
}

func (r *Run) notef(format string, a ...any) { r.Notes = append(r.Notes, fmt.Sprintf(format, a...)) }

func readKV(path string) (KV, error) {
	kv := KV{Vals: map[string]string{}}
	b, err := os.ReadFile(path)
	if err != nil {
		return kv, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		l = strings.TrimRight(l, "\r")
		if strings.TrimSpace(l) == "" || strings.HasPrefix(l, "#") {
			continue
		}
		k, v, ok := strings.Cut(l, "\t")
		if !ok {
			continue
		}
		k = strings.TrimSpace(k)
		if _, dup := kv.Vals[k]; !dup {
			kv.Keys = append(kv.Keys, k)
		}
		kv.Vals[k] = strings.TrimSpace(v)
	}
	return kv, nil
}

func parsePlan(kv KV) (Plan, error) {
	p := Plan{Duration: kv.get("duration"), Reps: 0}
	var err error
	if s := kv.get("reps"); s != "" {
		if p.Reps, err = strconv.Atoi(s); err != nil {
			return p, fmt.Errorf("reps: %w", err)
		}
	}
	p.Quick = kv.get("quick") == "1"
	p.GC = kv.get("gc") == "1"
	if p.Sizes, err = parseInts(kv.get("sizes")); err != nil {
		return p, fmt.Errorf("sizes: %w", err)
	}
	if p.Conns, err = parseInts(kv.get("conns")); err != nil {
		return p, fmt.Errorf("conns: %w", err)
	}
	return p, nil
}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return out, nil
}

// sortedFiles lists the files in dir whose names end in ext, sorted; a
// missing directory gives none.
func sortedFiles(dir, ext string) []string {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range ents {
		if !e.IsDir() && strings.HasSuffix(e.Name(), ext) {
			out = append(out, filepath.Join(dir, e.Name()))
		}
	}
	sort.Strings(out)
	return out
}

// iperfJSON is the part of iperf3 -J output used here.
type iperfJSON struct {
	Error string `json:"error"`
	End   struct {
		SumReceived *struct {
			BitsPerSecond float64 `json:"bits_per_second"`
		} `json:"sum_received"`
	} `json:"end"`
}

// ParseIperf returns the received throughput of one iperf3 -J run in GB/s
// (1e9 bytes per second).
func ParseIperf(b []byte) (float64, error) {
	var j iperfJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return 0, err
	}
	if j.Error != "" {
		return 0, fmt.Errorf("iperf3: %s", j.Error)
	}
	if j.End.SumReceived == nil || j.End.SumReceived.BitsPerSecond <= 0 {
		return 0, errors.New("no end.sum_received.bits_per_second")
	}
	return j.End.SumReceived.BitsPerSecond / 8 / 1e9, nil
}

func (r *Run) loadIperf(dir string) {
	for _, f := range sortedFiles(dir, ".json") {
		b, err := os.ReadFile(f)
		if err == nil {
			var g float64
			if g, err = ParseIperf(b); err == nil {
				r.Iperf = append(r.Iperf, g)
				continue
			}
		}
		r.notef("iperf3 %s skipped: %v", filepath.Base(f), err)
	}
}

var redisName = regexp.MustCompile(`^(get|put)_(\d+)_c(\d+)_P(\d+)_r(\d+)\.csv$`)

// ParseRedisCSV reads redis-benchmark --csv output and returns the row for
// test (GET or SET). Latencies come in milliseconds and are returned in ns.
func ParseRedisCSV(b []byte, test string) (Sample, error) {
	rd := csv.NewReader(strings.NewReader(string(b)))
	rd.FieldsPerRecord = -1
	rows, err := rd.ReadAll()
	if err != nil {
		return Sample{}, err
	}
	col := map[string]int{}
	for _, row := range rows {
		if len(row) > 0 && row[0] == "test" {
			for i, h := range row {
				col[h] = i
			}
			continue
		}
		if len(row) == 0 || !strings.EqualFold(row[0], test) {
			continue
		}
		if len(col) == 0 {
			return Sample{}, errors.New("no header row")
		}
		field := func(name string) (float64, error) {
			i, ok := col[name]
			if !ok || i >= len(row) {
				return 0, fmt.Errorf("no %s column", name)
			}
			return strconv.ParseFloat(strings.TrimSpace(row[i]), 64)
		}
		var s Sample
		if s.OpsPerSec, err = field("rps"); err != nil {
			return s, err
		}
		p50, err := field("p50_latency_ms")
		if err != nil {
			return s, err
		}
		p99, err := field("p99_latency_ms")
		if err != nil {
			return s, err
		}
		if s.OpsPerSec <= 0 {
			return s, errors.New("rps is not positive")
		}
		s.P50Ns, s.P99Ns = p50*1e6, p99*1e6
		return s, nil
	}
	return Sample{}, fmt.Errorf("no %s row", test)
}

func (r *Run) loadRedis(dir string) {
	for _, f := range sortedFiles(dir, ".csv") {
		m := redisName.FindStringSubmatch(filepath.Base(f))
		if m == nil {
			r.notef("redis %s skipped: unexpected name", filepath.Base(f))
			continue
		}
		size, _ := strconv.Atoi(m[2])
		conns, _ := strconv.Atoi(m[3])
		pipe, _ := strconv.Atoi(m[4])
		test := "GET"
		if m[1] == "put" {
			test = "SET"
		}
		b, err := os.ReadFile(f)
		var s Sample
		if err == nil {
			s, err = ParseRedisCSV(b, test)
		}
		if err != nil {
			r.notef("redis %s skipped: %v", filepath.Base(f), err)
			continue
		}
		s.GBPerSec = s.OpsPerSec * float64(size) / 1e9
		k := Key{System: sysRedis, Op: m[1], Size: size, Conns: conns, Batch: defaultBatch, Pipeline: pipe}
		r.Cases[k] = append(r.Cases[k], s)
	}
}

// benchJSON is gpucache-bench bench --json output: the report the bench
// writes (internal/bench), read with its own types. Summary is a pointer so
// that a file without one (older bench output) is told apart from zeros:
// the outer field shadows the embedded Report's.
type benchJSON struct {
	bench.Report
	Summary *bench.ServerSummary `json:"summary"`
}

func parseBench(b []byte) (*benchJSON, error) {
	var j benchJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return nil, err
	}
	return &j, nil
}

func (r *Run) loadGpucache(dir string) {
	for _, f := range sortedFiles(dir, ".json") {
		b, err := os.ReadFile(f)
		var j *benchJSON
		if err == nil {
			j, err = parseBench(b)
		}
		if err != nil {
			r.notef("gpucache %s skipped: %v", filepath.Base(f), err)
			continue
		}
		if len(j.Cases) == 0 {
			r.notef("gpucache %s has no cases", filepath.Base(f))
		}
		for _, n := range j.Notes {
			r.notef("gpucache %s: %s", filepath.Base(f), n)
		}
		for _, c := range j.Cases {
			k := Key{System: sysGpucache, Op: c.Op, Size: c.Size, Conns: c.Conns, Batch: max(c.Batch, 1), Pipeline: max(c.Pipeline, 1)}
			r.Cases[k] = append(r.Cases[k], Sample{
				OpsPerSec: c.OpsPerSec, GBPerSec: c.GBPerSec,
				P50Ns: float64(c.P50Ns), P99Ns: float64(c.P99Ns),
				Errors: c.Errors, Misses: c.Misses, Corrupt: c.Corrupt,
			})
		}
	}
}

func (r *Run) loadGC(dir string) {
	if b, err := os.ReadFile(filepath.Join(dir, "NOT_RUN.txt")); err == nil {
		r.GC.Reason = strings.TrimSpace(string(b))
		return
	}
	b, err := os.ReadFile(filepath.Join(dir, "gc.json"))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			r.GC.Reason = "no gc/gc.json"
		} else {
			r.GC.Reason = err.Error()
		}
		return
	}
	j, err := parseBench(b)
	if err != nil {
		r.GC.Reason = "gc/gc.json: " + err.Error()
		return
	}
	r.GC.Ran = true
	for _, n := range j.Notes {
		r.notef("gc.json: %s", n)
	}
	pick := func(name string, fromSummary func() uint64) (uint64, bool) {
		if v, ok := j.ServerStat[name]; ok {
			return v, true
		}
		if j.Summary != nil {
			return fromSummary(), true
		}
		return 0, false
	}
	var okHeap, okCached bool
	r.GC.HeapInUse, okHeap = pick("go_heap_inuse_bytes", func() uint64 { return j.Summary.GoHeapInUseBytes })
	r.GC.HotCached, okCached = pick("hot_bytes_cached", func() uint64 { return j.Summary.HotBytesCached })
	r.GC.GCPauseP99Ns, r.GC.HasPause = pick("go_gc_pause_p99_ns", func() uint64 { return j.Summary.GoGCPauseP99Ns })
	r.GC.HasHeap = okHeap && okCached && r.GC.HotCached > 0
	if j.Hold != nil {
		r.GC.HoldReq, r.GC.HoldHeld = j.Hold.Requested, j.Hold.Held
	}
	if len(j.Cases) > 0 {
		c := j.Cases[0]
		r.GC.Case = &Sample{OpsPerSec: c.OpsPerSec, GBPerSec: c.GBPerSec, P50Ns: float64(c.P50Ns), P99Ns: float64(c.P99Ns),
			Errors: c.Errors, Misses: c.Misses, Corrupt: c.Corrupt}
	}
}

// Median of xs (mean of the middle two for an even count); NaN for none.
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// Stat returns the medians of one case, and false when it has no samples.
func (r *Run) Stat(k Key) (Stat, bool) {
	ss := r.Cases[k]
	if len(ss) == 0 {
		return Stat{}, false
	}
	var ops, gbs, p50, p99 []float64
	st := Stat{N: len(ss), MinGBPerSec: math.Inf(1), MaxGBPerSec: math.Inf(-1)}
	for _, s := range ss {
		ops = append(ops, s.OpsPerSec)
		gbs = append(gbs, s.GBPerSec)
		p50 = append(p50, s.P50Ns)
		p99 = append(p99, s.P99Ns)
		st.MinGBPerSec = math.Min(st.MinGBPerSec, s.GBPerSec)
		st.MaxGBPerSec = math.Max(st.MaxGBPerSec, s.GBPerSec)
		st.Errors += s.Errors
		st.Misses += s.Misses
		st.Corrupt += s.Corrupt
	}
	st.OpsPerSec, st.GBPerSec, st.P50Ns, st.P99Ns = Median(ops), Median(gbs), Median(p50), Median(p99)
	return st, true
}

// IperfGBps is the median iperf3 throughput, and false when none ran.
func (r *Run) IperfGBps() (float64, bool) {
	if len(r.Iperf) == 0 {
		return 0, false
	}
	return Median(r.Iperf), true
}

// plannedKeys lists the cases the plan asked for, in report order.
func (r *Run) plannedKeys() []Key {
	var ks []Key
	for _, op := range []string{"get", "put"} {
		for _, size := range r.Plan.Sizes {
			for _, c := range r.Plan.Conns {
				ks = append(ks,
					Key{sysGpucache, op, size, c, defaultBatch, defaultPipeline},
					Key{sysRedis, op, size, c, defaultBatch, defaultPipeline})
			}
		}
	}
	if len(r.Plan.Sizes) > 0 || len(r.Plan.Conns) > 0 {
		ks = append(ks, batchKeys()...)
	}
	return ks
}

// batchKeys are the gpucache batched GET and the Redis pipelined GET it is
// compared to.
func batchKeys() []Key {
	return []Key{
		{sysGpucache, "get", batchCaseSize, batchCaseConns, batchCaseBatch, defaultPipeline},
		{sysRedis, "get", batchCaseSize, batchCaseConns, defaultBatch, redisPipelineDepth},
	}
}

// allKeys is the planned cases plus any others found, sorted by op, size,
// conns, then batched/pipelined after plain, gpucache before Redis.
func (r *Run) allKeys() []Key {
	seen := map[Key]bool{}
	var ks []Key
	add := func(k Key) {
		if !seen[k] {
			seen[k] = true
			ks = append(ks, k)
		}
	}
	for _, k := range r.plannedKeys() {
		add(k)
	}
	for k := range r.Cases {
		add(k)
	}
	opRank := func(op string) int {
		if op == "get" {
			return 0
		}
		return 1
	}
	sysRank := func(s string) int {
		if s == sysGpucache {
			return 0
		}
		return 1
	}
	plain := func(k Key) int {
		if k.Batch == 1 && k.Pipeline == 1 {
			return 0
		}
		return 1
	}
	sort.SliceStable(ks, func(i, j int) bool {
		a, b := ks[i], ks[j]
		switch {
		case opRank(a.Op) != opRank(b.Op):
			return opRank(a.Op) < opRank(b.Op)
		case a.Op != b.Op:
			return a.Op < b.Op
		case a.Size != b.Size:
			return a.Size < b.Size
		case a.Conns != b.Conns:
			return a.Conns < b.Conns
		case plain(a) != plain(b):
			return plain(a) < plain(b)
		case sysRank(a.System) != sysRank(b.System):
			return sysRank(a.System) < sysRank(b.System)
		case a.Batch != b.Batch:
			return a.Batch < b.Batch
		default:
			return a.Pipeline < b.Pipeline
		}
	})
	return ks
}

// Verdicts.
const (
	Pass    = "PASS"
	Miss    = "MISS"
	Invalid = "INVALID"
)

// Target is one row of the targets table.
type Target struct {
	Name     string
	Measured string
	Ratio    string
	Need     string
	Verdict  string
}

func notRunTarget(name, need, why string) Target {
	m := NotRun
	if why != "" {
		m = NotRun + " (" + why + ")"
	}
	return Target{Name: name, Measured: m, Ratio: NotRun, Need: need, Verdict: NotRun}
}

func verdict(ok bool) string {
	if ok {
		return Pass
	}
	return Miss
}

// badNote describes the failures of a gpucache case, or "".
func badNote(s Stat) string {
	if !s.Bad() {
		return ""
	}
	return fmt.Sprintf("errors=%d misses=%d corrupt=%d", s.Errors, s.Misses, s.Corrupt)
}

// ratioTarget compares a gpucache throughput against a reference: the
// target passes when got/ref ≥ need.
func ratioTarget(name string, got Stat, gotOK bool, refName string, ref float64, refOK bool, need float64) Target {
	needS := fmt.Sprintf("≥ %.2f×", need)
	switch {
	case !gotOK && !refOK:
		return notRunTarget(name, needS, "neither side ran")
	case !gotOK:
		return notRunTarget(name, needS, "gpucache case did not run")
	case !refOK:
		return notRunTarget(name, needS, refName+" did not run")
	}
	t := Target{Name: name, Need: needS}
	t.Measured = fmt.Sprintf("gpucache %s GB/s vs %s %s GB/s", fmtGB(got.GBPerSec), refName, fmtGB(ref))
	if ref <= 0 {
		t.Ratio, t.Verdict = NotRun, NotRun
		t.Measured += " (reference is zero)"
		return t
	}
	ratio := got.GBPerSec / ref
	t.Ratio = fmt.Sprintf("%.2f×", ratio)
	t.Verdict = verdict(ratio >= need)
	if n := badNote(got); n != "" {
		t.Verdict = Invalid
		t.Measured += " (" + n + ")"
	}
	return t
}

// Targets evaluates every target.
func (r *Run) Targets() []Target {
	var ts []Target
	g1, ok1 := r.Stat(Key{sysGpucache, "get", headlineSize, headlineConns, 1, 1})
	r1, okr1 := r.Stat(Key{sysRedis, "get", headlineSize, headlineConns, 1, 1})
	ts = append(ts, ratioTarget("1 MiB GET, 8 conns: gpucache vs Redis GB/s", g1, ok1, "Redis", r1.GBPerSec, okr1, targetVsRedis1MiB))
	ip, okip := r.IperfGBps()
	ts = append(ts, ratioTarget("1 MiB GET, 8 conns: gpucache vs iperf3 single stream GB/s", g1, ok1, "iperf3", ip, okip, targetVsIperf))
	bk := batchKeys()
	gb, okgb := r.Stat(bk[0])
	rb, okrb := r.Stat(bk[1])
	ts = append(ts, ratioTarget("64 KiB GET, 8 conns: gpucache batch 16 vs Redis -P 8 GB/s", gb, okgb, "Redis -P 8", rb.GBPerSec, okrb, targetBatchVsPipe))

	// p99 at every planned (and every measured) plain size and conns.
	type sc struct {
		op          string
		size, conns int
	}
	var rows []sc
	seen := map[sc]bool{}
	for _, k := range r.allKeys() {
		if k.Batch != 1 || k.Pipeline != 1 {
			continue
		}
		x := sc{k.Op, k.Size, k.Conns}
		if !seen[x] {
			seen[x] = true
			rows = append(rows, x)
		}
	}
	for _, x := range rows {
		name := fmt.Sprintf("p99 %s %s, %d conns: gpucache ≤ Redis", strings.ToUpper(x.op), fmtSize(x.size), x.conns)
		g, okg := r.Stat(Key{sysGpucache, x.op, x.size, x.conns, 1, 1})
		rr, okr := r.Stat(Key{sysRedis, x.op, x.size, x.conns, 1, 1})
		need := "≤ 1.00×"
		switch {
		case !okg && !okr:
			ts = append(ts, notRunTarget(name, need, "neither side ran"))
			continue
		case !okg:
			ts = append(ts, notRunTarget(name, need, "gpucache case did not run"))
			continue
		case !okr:
			ts = append(ts, notRunTarget(name, need, "Redis case did not run"))
			continue
		}
		t := Target{Name: name, Need: need,
			Measured: fmt.Sprintf("gpucache %s vs Redis %s", fmtLat(g.P99Ns), fmtLat(rr.P99Ns))}
		if rr.P99Ns > 0 {
			t.Ratio = fmt.Sprintf("%.2f×", g.P99Ns/rr.P99Ns)
		} else {
			t.Ratio = "n/a (Redis p99 is 0)"
		}
		t.Verdict = verdict(g.P99Ns <= rr.P99Ns)
		if n := badNote(g); n != "" {
			t.Verdict = Invalid
			t.Measured += " (" + n + ")"
		}
		ts = append(ts, t)
	}

	// GC and memory.
	heapName := "GC run: Go heap in use ≤ 2% of cached bytes"
	heapNeed := fmt.Sprintf("≤ %.0f%%", targetHeapFraction*100)
	pauseName := "GC run: GC pause p99 ≤ 100 µs"
	pauseNeed := "≤ 100 µs"
	switch {
	case !r.GC.Ran:
		ts = append(ts, notRunTarget(heapName, heapNeed, r.GC.Reason), notRunTarget(pauseName, pauseNeed, r.GC.Reason))
	default:
		if r.GC.HasHeap {
			frac := float64(r.GC.HeapInUse) / float64(r.GC.HotCached)
			ts = append(ts, Target{Name: heapName, Need: heapNeed,
				Measured: fmt.Sprintf("heap %s / cached %s", fmtBytes(r.GC.HeapInUse), fmtBytes(r.GC.HotCached)),
				Ratio:    fmt.Sprintf("%.3f%%", frac*100), Verdict: verdict(frac <= targetHeapFraction)})
		} else {
			ts = append(ts, notRunTarget(heapName, heapNeed, "server_stat lacks go_heap_inuse_bytes or hot_bytes_cached is 0"))
		}
		if r.GC.HasPause {
			p := float64(r.GC.GCPauseP99Ns)
			ts = append(ts, Target{Name: pauseName, Need: pauseNeed,
				Measured: "gc pause p99 " + fmtLat(p),
				Ratio:    fmt.Sprintf("%.2f× of limit", p/targetGCPauseP99Ns), Verdict: verdict(p <= targetGCPauseP99Ns)})
		} else {
			ts = append(ts, notRunTarget(pauseName, pauseNeed, "server_stat lacks go_gc_pause_p99_ns"))
		}
	}
	return ts
}

// Write renders the markdown report.
func (r *Run) Write(w io.Writer) {
	p := func(format string, a ...any) { fmt.Fprintf(w, format, a...) }
	title := "gpucache vs Redis vs iperf3 (loopback)"
	if d := r.Machine.get("date_utc"); d != "" {
		title += " — " + d
	}
	p("# %s\n\n", title)

	p("## Machine\n\n| item | value |\n|---|---|\n")
	if len(r.Machine.Keys) == 0 {
		p("| machine.txt | %s |\n", NotRun)
	}
	for _, k := range r.Machine.Keys {
		p("| %s | %s |\n", k, mdEscape(r.Machine.get(k)))
	}
	p("\n")

	p("## Plan\n\n")
	reps := NotRun
	if r.Plan.Reps > 0 {
		reps = strconv.Itoa(r.Plan.Reps)
	}
	dur := r.Plan.Duration
	if dur == "" {
		dur = NotRun
	}
	p("- duration per case: %s; repetitions: %s (figures are medians over repetitions)%s\n", dur, reps, ifStr(r.Plan.Quick, "; QUICK smoke mode", ""))
	p("- sizes: %s; conns/clients: %s\n", joinSizes(r.Plan.Sizes), joinInts(r.Plan.Conns))
	p("- client and server run on the same host over loopback and share its CPUs; GB/s is 1e9 bytes/s of payload; ops/s is blocks (values) per second; latencies are per request\n")
	p("- Redis: redis-benchmark (single-threaded client), persistence off, working set of `working_set_keys` keys of the given size (`-r`, prefilled; see Machine); PUT is SET; pipelined case is `-P %d` with %d clients\n", redisPipelineDepth, batchCaseConns)
	p("- gpucache: `gpucache-bench bench` (Go client with GOMAXPROCS `gpucache_client_gomaxprocs`, working set `--keys working_set_keys`; checks one stamp word per 4 KiB page of every GET); batched case is `--batch %d` (one request carries %d blocks; its latency is per request)\n\n", batchCaseBatch, batchCaseBatch)

	p("## iperf3 loopback, single stream (`-l 1M`)\n\n")
	if ip, ok := r.IperfGBps(); ok {
		lo, hi := math.Inf(1), math.Inf(-1)
		for _, g := range r.Iperf {
			lo, hi = math.Min(lo, g), math.Max(hi, g)
		}
		p("| reps | GB/s (median) | min | max |\n|---:|---:|---:|---:|\n| %d | %s | %s | %s |\n\n", len(r.Iperf), fmtGB(ip), fmtGB(lo), fmtGB(hi))
	} else {
		p("| reps | GB/s (median) | min | max |\n|---:|---:|---:|---:|\n| 0 | %s | %s | %s |\n\n", NotRun, NotRun, NotRun)
	}

	keys := r.allKeys()
	for _, op := range []string{"get", "put"} {
		p("## %s\n\n", strings.ToUpper(op))
		p("| size | conns | mode | system | ops/s | GB/s | GB/s min–max | p50 | p99 | reps | errors/misses/corrupt |\n")
		p("|---:|---:|---|---|---:|---:|---:|---:|---:|---:|---|\n")
		for _, k := range keys {
			if k.Op != op {
				continue
			}
			r.writeRow(w, k)
		}
		p("\n")
	}
	// Ops other than get and put, should any appear.
	for _, k := range keys {
		if k.Op != "get" && k.Op != "put" {
			p("## other\n\n| size | conns | mode | system | ops/s | GB/s | GB/s min–max | p50 | p99 | reps | errors/misses/corrupt |\n|---:|---:|---|---|---:|---:|---:|---:|---:|---:|---|\n")
			for _, k := range keys {
				if k.Op != "get" && k.Op != "put" {
					r.writeRow(w, k)
				}
			}
			p("\n")
			break
		}
	}

	p("## GC and memory (gpucache, hold run)\n\n")
	if !r.GC.Ran {
		p("%s: %s\n\n", NotRun, ifStr(r.GC.Reason != "", r.GC.Reason, "no data"))
	} else {
		p("| held / requested | go_heap_inuse | hot_bytes_cached | heap / cached | gc pause p99 | GET 1 MiB GB/s during hold | p99 |\n|---:|---:|---:|---:|---:|---:|---:|\n")
		hold := NotRun
		if r.GC.HoldReq > 0 {
			hold = fmtBytes(uint64(r.GC.HoldHeld)) + " / " + fmtBytes(uint64(r.GC.HoldReq))
		}
		heap, cached, frac := NotRun, NotRun, NotRun
		if r.GC.HasHeap {
			heap, cached = fmtBytes(r.GC.HeapInUse), fmtBytes(r.GC.HotCached)
			frac = fmt.Sprintf("%.3f%%", 100*float64(r.GC.HeapInUse)/float64(r.GC.HotCached))
		}
		pause := NotRun
		if r.GC.HasPause {
			pause = fmtLat(float64(r.GC.GCPauseP99Ns))
		}
		gb, p99 := NotRun, NotRun
		if c := r.GC.Case; c != nil {
			gb, p99 = fmtGB(c.GBPerSec), fmtLat(c.P99Ns)
			if c.Errors+c.Misses+c.Corrupt > 0 {
				gb += fmt.Sprintf(" (errors=%d misses=%d corrupt=%d)", c.Errors, c.Misses, c.Corrupt)
			}
		}
		p("| %s | %s | %s | %s | %s | %s | %s |\n\n", hold, heap, cached, frac, pause, gb, p99)
	}

	p("## Targets\n\n| target | measured | ratio | need | verdict |\n|---|---|---:|---:|---|\n")
	var pass, miss, inv, nr int
	for _, t := range r.Targets() {
		p("| %s | %s | %s | %s | **%s** |\n", t.Name, t.Measured, t.Ratio, t.Need, t.Verdict)
		switch t.Verdict {
		case Pass:
			pass++
		case Miss:
			miss++
		case Invalid:
			inv++
		default:
			nr++
		}
	}
	p("\n%d PASS, %d MISS, %d INVALID, %d NOT_RUN. INVALID: the gpucache case saw errors, misses or corrupt blocks.\n", pass, miss, inv, nr)

	if len(r.Notes) > 0 {
		p("\n## Notes\n\n")
		for _, n := range r.Notes {
			p("- %s\n", mdEscape(n))
		}
	}
}

func (r *Run) writeRow(w io.Writer, k Key) {
	mode := "plain"
	switch {
	case k.System == sysRedis && k.Pipeline > 1:
		mode = fmt.Sprintf("-P %d", k.Pipeline)
	case k.System == sysGpucache && (k.Batch > 1 || k.Pipeline > 1):
		mode = fmt.Sprintf("batch %d, pipeline %d", k.Batch, k.Pipeline)
	}
	st, ok := r.Stat(k)
	if !ok {
		fmt.Fprintf(w, "| %s | %d | %s | %s | %s | %s | %s | %s | %s | 0 | %s |\n",
			fmtSize(k.Size), k.Conns, mode, k.System, NotRun, NotRun, NotRun, NotRun, NotRun, NotRun)
		return
	}
	emc := "n/a"
	if k.System == sysGpucache {
		emc = fmt.Sprintf("%d/%d/%d", st.Errors, st.Misses, st.Corrupt)
		if st.Bad() {
			emc = "**" + emc + "**"
		}
	}
	fmt.Fprintf(w, "| %s | %d | %s | %s | %s | %s | %s–%s | %s | %s | %d | %s |\n",
		fmtSize(k.Size), k.Conns, mode, k.System, fmtRate(st.OpsPerSec), fmtGB(st.GBPerSec),
		fmtGB(st.MinGBPerSec), fmtGB(st.MaxGBPerSec), fmtLat(st.P50Ns), fmtLat(st.P99Ns), st.N, emc)
}

func ifStr(c bool, a, b string) string {
	if c {
		return a
	}
	return b
}

func mdEscape(s string) string { return strings.ReplaceAll(s, "|", `\|`) }

func joinInts(xs []int) string {
	if len(xs) == 0 {
		return NotRun
	}
	var s []string
	for _, x := range xs {
		s = append(s, strconv.Itoa(x))
	}
	return strings.Join(s, ",")
}

func joinSizes(xs []int) string {
	if len(xs) == 0 {
		return NotRun
	}
	var s []string
	for _, x := range xs {
		s = append(s, fmtSize(x))
	}
	return strings.Join(s, ",")
}

// fmtSize prints a byte count the way the bench flags spell it (64KiB).
func fmtSize(n int) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%dGiB", n>>30)
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return fmt.Sprintf("%dB", n)
}

func fmtBytes(n uint64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.2f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.2f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

func fmtRate(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.2fM", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%.1fk", v/1e3)
	}
	return fmt.Sprintf("%.0f", v)
}

func fmtGB(v float64) string { return fmt.Sprintf("%.3f", v) }

// fmtLat prints a latency given in ns.
func fmtLat(ns float64) string {
	switch {
	case ns >= 1e6:
		return fmt.Sprintf("%.2f ms", ns/1e6)
	case ns >= 1e3:
		return fmt.Sprintf("%.1f µs", ns/1e3)
	}
	return fmt.Sprintf("%.0f ns", ns)
}
