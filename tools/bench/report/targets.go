package main

// The targets table: each target's measured figure, ratio and verdict.

import (
	"fmt"
	"strings"
)

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
	ts = append(ts, r.largeTargets()...)

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
		switch short := r.GC.HoldReq > 0 && r.GC.HoldHeld < r.GC.HoldReq; {
		case r.GC.HasSplit && r.GC.Pauses == 0:
			ts = append(ts, notRunTarget(pauseName, pauseNeed, "no GC pause recorded: 0 cycles"))
		case r.GC.HasPause && short:
			ts = append(ts, notRunTarget(pauseName, pauseNeed, fmt.Sprintf("the hold reached %s of %s; gc pause p99 %s",
				fmtBytes(uint64(r.GC.HoldHeld)), fmtBytes(uint64(r.GC.HoldReq)), fmtLat(float64(r.GC.GCPauseP99Ns)))))
		case r.GC.HasPause:
			p := float64(r.GC.GCPauseP99Ns)
			measured := "gc pause p99 " + fmtLat(p)
			if r.GC.HasSplit {
				measured += fmt.Sprintf(" (stopping p99 %s; %d pauses)", fmtLat(float64(r.GC.StopP99Ns)), r.GC.Pauses)
			}
			ts = append(ts, Target{Name: pauseName, Need: pauseNeed,
				Measured: measured,
				Ratio:    fmt.Sprintf("%.2f× of limit", p/targetGCPauseP99Ns), Verdict: verdict(p <= targetGCPauseP99Ns)})
		default:
			ts = append(ts, notRunTarget(pauseName, pauseNeed, "server_stat lacks go_gc_pause_p99_ns"))
		}
	}
	return ts
}
