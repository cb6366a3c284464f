package main

import (
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
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
	// LargeSizes, LargeConns and LargeKeys (the working set, in blocks)
	// describe the large-block cases (large.go).
	LargeSizes []int
	LargeConns []int
	LargeKeys  string
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

// GCResult is one GC and memory run.
type GCResult struct {
	Ran          bool
	Reason       string // why it did not run, or why its figures are missing
	Procs        string // gpucached's GOMAXPROCS: "default" (the runtime's choice) or a number
	HeapInUse    uint64
	HotCached    uint64
	GCPauseP99Ns uint64
	HasHeap      bool
	HasPause     bool
	HoldReq      int64
	HoldHeld     int64
	Case         *Sample
	// The pause split (STAT go_gc_*; absent from older servers): cycles,
	// pauses recorded, p99 of the stopping part, the largest pause, and
	// the GC cycles the script forced during the GET load (-1: unknown).
	HasSplit   bool
	Cycles     uint64
	Pauses     uint64
	StopP99Ns  uint64
	PauseMaxNs uint64
	Forced     int
}

// Run is everything loaded from one results directory.
type Run struct {
	Dir     string
	Machine KV
	Plan    Plan
	Notes   []string
	Iperf   []float64 // GB/s per repetition
	Cases   map[Key][]Sample
	GC      GCResult   // the run at the runtime's default GOMAXPROCS (gc/gc.json); the targets use it
	GCMore  []GCResult // runs at other GOMAXPROCS settings (gc/gc-procs<N>.json)
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
	if err := parseLargePlan(kv, &p); err != nil {
		return p, err
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
	ks := pairKeys(r.Plan.Sizes, r.Plan.Conns)
	if len(r.Plan.Sizes) > 0 || len(r.Plan.Conns) > 0 {
		ks = append(ks, batchKeys()...)
	}
	return append(ks, r.largeKeys()...)
}

// pairKeys lists GET and PUT of every size at every connection count, for
// gpucache and for Redis, in report order.
func pairKeys(sizes, conns []int) []Key {
	var ks []Key
	for _, op := range []string{"get", "put"} {
		for _, size := range sizes {
			for _, c := range conns {
				ks = append(ks,
					Key{sysGpucache, op, size, c, defaultBatch, defaultPipeline},
					Key{sysRedis, op, size, c, defaultBatch, defaultPipeline})
			}
		}
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
