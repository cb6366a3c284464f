package main

// Loading the raw results of each tool: iperf3, redis-benchmark, the
// gpucache bench JSON and the Go GC figures.

import (
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/gpucache/gpucache/tools/internal/bench"
)

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
// writes (tools/internal/bench), read with its own types. Summary is a pointer so
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

// loadGC reads the GC and memory runs: gc/gc.json (gpucached at the
// runtime's default GOMAXPROCS) into r.GC and each gc/gc-procs<N>.json into
// r.GCMore. gc/<name>.forced holds the number of GC cycles the script forced
// during the GET load of run <name>.
func (r *Run) loadGC(dir string) {
	if b, err := os.ReadFile(filepath.Join(dir, "NOT_RUN.txt")); err == nil {
		r.GC.Reason = strings.TrimSpace(string(b))
		return
	}
	r.GC = r.loadGCRun(dir, "gc", "default")
	for _, f := range sortedFiles(dir, ".json") {
		name := strings.TrimSuffix(filepath.Base(f), ".json")
		procs, ok := strings.CutPrefix(name, "gc-procs")
		if !ok {
			continue
		}
		r.GCMore = append(r.GCMore, r.loadGCRun(dir, name, procs))
	}
}

// loadGCRun reads dir/name.json and dir/name.forced.
func (r *Run) loadGCRun(dir, name, procs string) GCResult {
	g := GCResult{Procs: procs, Forced: -1}
	b, err := os.ReadFile(filepath.Join(dir, name+".json"))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			g.Reason = "no gc/" + name + ".json"
		} else {
			g.Reason = err.Error()
		}
		return g
	}
	j, err := parseBench(b)
	if err != nil {
		g.Reason = "gc/" + name + ".json: " + err.Error()
		return g
	}
	g.Ran = true
	for _, n := range j.Notes {
		r.notef("%s.json: %s", name, n)
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
	g.HeapInUse, okHeap = pick("go_heap_inuse_bytes", func() uint64 { return j.Summary.GoHeapInUseBytes })
	g.HotCached, okCached = pick("hot_bytes_cached", func() uint64 { return j.Summary.HotBytesCached })
	g.GCPauseP99Ns, g.HasPause = pick("go_gc_pause_p99_ns", func() uint64 { return j.Summary.GoGCPauseP99Ns })
	g.HasHeap = okHeap && okCached && g.HotCached > 0
	st := j.ServerStat
	var okStop, okPauses bool
	g.StopP99Ns, okStop = st["go_gc_stop_p99_ns"]
	g.Pauses, okPauses = st["go_gc_pauses"]
	g.Cycles, g.PauseMaxNs = st["go_gc_cycles"], st["go_gc_pause_max_ns"]
	g.HasSplit = okStop && okPauses
	if b, err := os.ReadFile(filepath.Join(dir, name+".forced")); err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && n >= 0 {
			g.Forced = n
		}
	}
	if j.Hold != nil {
		g.HoldReq, g.HoldHeld = j.Hold.Requested, j.Hold.Held
	}
	if len(j.Cases) > 0 {
		c := j.Cases[0]
		g.Case = &Sample{OpsPerSec: c.OpsPerSec, GBPerSec: c.GBPerSec, P50Ns: float64(c.P50Ns), P99Ns: float64(c.P99Ns),
			Errors: c.Errors, Misses: c.Misses, Corrupt: c.Corrupt}
	}
	return g
}
