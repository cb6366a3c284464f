package main

// Writing the Markdown report.

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// Write renders the markdown report.
func (r *Run) Write(w io.Writer) {
	p := func(format string, a ...any) { fmt.Fprintf(w, format, a...) }
	title := "gpucache vs Redis vs iperf3 (loopback)"
	if d := r.Machine.get("date_utc"); d != "" {
		title += " — " + d
	}
	p("# %s\n\n", title)
	r.writeSetup(w)
	r.writeTables(w)
	r.writeGC(w)
	r.writeTargets(w)
	if len(r.Notes) > 0 {
		p("\n## Notes\n\n")
		for _, n := range r.Notes {
			p("- %s\n", mdEscape(n))
		}
	}
}

// writeSetup writes the machine, the plan and the iperf3 baseline.
func (r *Run) writeSetup(w io.Writer) {
	p := func(format string, a ...any) { fmt.Fprintf(w, format, a...) }
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
	if len(r.Plan.LargeSizes) > 0 {
		p("- large blocks: sizes %s; conns/clients %s; working set `large_keys` %s blocks, each system on a fresh server\n", joinSizes(r.Plan.LargeSizes), joinInts(r.Plan.LargeConns), r.Plan.LargeKeys)
	}
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

}

// writeTables writes one table per op, a row per case and system.
func (r *Run) writeTables(w io.Writer) {
	p := func(format string, a ...any) { fmt.Fprintf(w, format, a...) }
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

}

// writeGC writes the GC and memory figures of the hold runs, one row per
// gpucached GOMAXPROCS setting.
func (r *Run) writeGC(w io.Writer) {
	p := func(format string, a ...any) { fmt.Fprintf(w, format, a...) }
	p("## GC and memory (gpucache, hold run)\n\n")
	if !r.GC.Ran && len(r.GCMore) == 0 {
		p("%s: %s\n\n", NotRun, ifStr(r.GC.Reason != "", r.GC.Reason, "no data"))
		return
	}
	p("| server GOMAXPROCS | held / requested | go_heap_inuse | hot_bytes_cached | heap / cached | GC cycles (forced under GET) | pauses | stopping p99 | gc pause p99 | pause max | GET 1 MiB GB/s during hold | p99 |\n")
	p("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, g := range append([]GCResult{r.GC}, r.GCMore...) {
		writeGCRow(w, g)
	}
	p("\nA GC stop-the-world pause is *stopping* (until every P has stopped: goroutines reaching a safe point, and the OS running the threads that must see the request) plus the work done while stopped. The GET path allocates nothing, so the script forces GC cycles during the GET load (`/debug/pprof/heap?gc=1` on the admin port) to sample pauses there; the histogram also holds the start-up and hold cycles. Quantiles are upper bounds of the runtime's histogram buckets (`/sched/pauses/total/gc:seconds`, `/sched/pauses/stopping/gc:seconds`).\n\n")
}

// writeGCRow writes one GC run's row.
func writeGCRow(w io.Writer, g GCResult) {
	if !g.Ran {
		fmt.Fprintf(w, "| %s | %s: %s |  |  |  |  |  |  |  |  |  |  |\n", g.Procs, NotRun, mdEscape(ifStr(g.Reason != "", g.Reason, "no data")))
		return
	}
	hold := NotRun
	if g.HoldReq > 0 {
		hold = fmtBytes(uint64(g.HoldHeld)) + " / " + fmtBytes(uint64(g.HoldReq))
	}
	heap, cached, frac := NotRun, NotRun, NotRun
	if g.HasHeap {
		heap, cached = fmtBytes(g.HeapInUse), fmtBytes(g.HotCached)
		frac = fmt.Sprintf("%.3f%%", 100*float64(g.HeapInUse)/float64(g.HotCached))
	}
	pause := NotRun
	if g.HasPause {
		pause = fmtLat(float64(g.GCPauseP99Ns))
	}
	cycles, pauses, stop, pmax := NotRun, NotRun, NotRun, NotRun
	if g.HasSplit {
		forced := "?"
		if g.Forced >= 0 {
			forced = strconv.Itoa(g.Forced)
		}
		cycles = fmt.Sprintf("%d (%s)", g.Cycles, forced)
		pauses, stop, pmax = strconv.FormatUint(g.Pauses, 10), fmtLat(float64(g.StopP99Ns)), fmtLat(float64(g.PauseMaxNs))
	}
	gb, p99 := NotRun, NotRun
	if c := g.Case; c != nil {
		gb, p99 = fmtGB(c.GBPerSec), fmtLat(c.P99Ns)
		if c.Errors+c.Misses+c.Corrupt > 0 {
			gb += fmt.Sprintf(" (errors=%d misses=%d corrupt=%d)", c.Errors, c.Misses, c.Corrupt)
		}
	}
	fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", g.Procs, hold, heap, cached, frac, cycles, pauses, stop, pause, pmax, gb, p99)
}

// writeTargets writes the targets table and the verdict counts.
func (r *Run) writeTargets(w io.Writer) {
	p := func(format string, a ...any) { fmt.Fprintf(w, format, a...) }
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
