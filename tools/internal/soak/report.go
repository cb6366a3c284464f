package soak

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// Report is the result of a soak.
type Report struct {
	Started time.Time `json:"started"`
	Ended   time.Time `json:"ended"`
	Seconds float64   `json:"seconds"`
	Setup   Setup     `json:"setup"`

	// Calls counts client calls, each checked: every block it returned
	// (hit bytes against the oracle, or a miss and its reason) and its
	// latency against the deadline it was given.
	Calls       int64         `json:"client_calls"`
	CallsPerSec float64       `json:"client_calls_per_s"`
	ByCall      []CallSummary `json:"by_call"`
	Blocks      Blocks        `json:"blocks"`
	// Overruns counts calls that returned more than OverrunSlack past
	// their deadline; WorstOverMs is the largest time past a deadline.
	Overruns    int64    `json:"overruns"`
	WorstOverMs float64  `json:"worst_over_deadline_ms"`
	Reasons     []string `json:"miss_reasons"`

	Faults  []FaultRecord `json:"faults"`
	Summary []FaultCount  `json:"fault_summary"`
	Phases  []PhaseRecord `json:"phases"`
	Drifts  []Drift       `json:"drifts,omitempty"`
	// Counters are each node's gpucache_* counters at the end (non-zero
	// ones; a restarted node's count from its restart).
	Counters map[string]map[string]float64 `json:"node_counters"`
	Crashes  []string                      `json:"crashes,omitempty"`
	RSS      []NodeRSS                     `json:"rss"`
	Samples  []Sample                      `json:"-"` // written to rss.csv

	Violations []string `json:"violations,omitempty"` // the first few, with times
	Failures   []string `json:"failures,omitempty"`   // the checks that failed; empty: the soak passed
}

// Setup describes what ran.
type Setup struct {
	Workers      int        `json:"workers"`
	Rate         float64    `json:"rate_ops_per_s"`
	OpTimeoutMs  float64    `json:"op_timeout_ms"`
	SlackMs      float64    `json:"overrun_slack_ms"`
	Payload      string     `json:"payload"`
	Chains       string     `json:"chains"`
	Schedule     string     `json:"schedule"`
	Nodes        []string   `json:"nodes"`
	Netns        string     `json:"netns"`
	Tmpfs        string     `json:"tmpfs"`
	Thresholds   Thresholds `json:"thresholds"`
	TmpfsGrowths int        `json:"tmpfs_growths"`
}

// Blocks counts the blocks the calls returned, each checked.
type Blocks struct {
	Checked     int64 `json:"checked"`            // all of the below but the PUT counts
	Verified    int64 `json:"verified_hits"`      // served by a node, bytes equal to the oracle's
	Wrong       int64 `json:"wrong_payloads"`     // served by a node, bytes differ
	Missed      int64 `json:"misses_with_reason"` // a miss and why
	Unexplained int64 `json:"unexplained"`        // a miss without a reason, a hit with one, a missing block
	Computed    int64 `json:"computed"`           // GetOrFill blocks this process computed (checked, not served)
	LeasedMiss  int64 `json:"leased_missed"`      // blocks a Lookup covered that the GET after it missed
	Stored      int64 `json:"put_stored"`         // PUT blocks stored or already cached
	NotStored   int64 `json:"put_not_stored"`     // PUT blocks refused without error (no space, read-only node, unreachable)
}

// FaultCount sums up one fault over the run.
type FaultCount struct {
	Fault     string  `json:"fault"`
	Injected  int     `json:"injected"`
	Recovered int     `json:"recovered"`
	WorstSec  float64 `json:"worst_recovery_s"`
	NotRun    string  `json:"not_run,omitempty"`
}

// PhaseRecord is one fault's phase: from just before the injection to
// the end of the settle after its recovery.
type PhaseRecord struct {
	Fault string      `json:"fault"`
	Cycle int         `json:"cycle"`
	Start time.Time   `json:"start"`
	End   time.Time   `json:"end"`
	Nodes []PhaseNode `json:"nodes"`
}

// PhaseNode compares one node between a phase's start and end.
type PhaseNode struct {
	Node            string `json:"node"`
	PIDStart        int    `json:"pid_start"`
	PIDEnd          int    `json:"pid_end"`
	Compared        bool   `json:"compared"` // false: restarted within the phase, or not measured
	Note            string `json:"note,omitempty"`
	GoroutinesStart int    `json:"goroutines_start"`
	GoroutinesEnd   int    `json:"goroutines_end"`
	GoroutinesMax   int    `json:"goroutines_limit"`
	RSSStart        int64  `json:"rss_start"`
	RSSEnd          int64  `json:"rss_end"`
	RestStart       int64  `json:"rest_start"` // RSS − hot_bytes_mapped
	RestEnd         int64  `json:"rest_end"`
	RestMax         int64  `json:"rest_limit"`
	LiveStart       int64  `json:"live_heap_start"`
	LiveEnd         int64  `json:"live_heap_end"`
	Grew            bool   `json:"grew"`
}

// Drift compares one node process from the start of the baseline phase
// (the first of the second cycle, or of a later one with
// Config.DriftAfter) to the end of the run: growth too slow for one phase
// to show adds up over the cycles of a long run. What comes before the
// baseline is left out: caches (refill manifests, pointers) fill during it.
type Drift struct {
	Node           string `json:"node"`
	PID            int    `json:"pid"`
	From           string `json:"from_phase"`
	FromCycle      int    `json:"from_cycle"`
	FromMinute     int    `json:"from_minute"` // minutes after the load started
	To             string `json:"to_phase"`
	GoroutinesFrom int    `json:"goroutines_from"`
	GoroutinesTo   int    `json:"goroutines_to"`
	GoroutinesMax  int    `json:"goroutines_limit"`
	RestFrom       int64  `json:"rest_from"`
	RestTo         int64  `json:"rest_to"`
	RestMax        int64  `json:"rest_limit"`
	Grew           bool   `json:"grew"`
}

// NodeRSS sums up one node's samples.
type NodeRSS struct {
	Node    string `json:"node"`
	Samples int    `json:"samples"`
	First   int64  `json:"first"`
	Min     int64  `json:"min"`
	Max     int64  `json:"max"`
	Last    int64  `json:"last"`
	MaxRest int64  `json:"max_rest"`      // largest RSS − hot_bytes_mapped
	MaxLive int64  `json:"max_live_heap"` // largest live heap
	PIDs    int    `json:"processes"`
}

// compare checks each node's growth between two samples.
func (s *soak) compare(start, end map[string]Sample) []PhaseNode {
	th := s.cfg.Thresholds
	var out []PhaseNode
	for _, n := range s.nodes {
		a, b := start[n.spec.name], end[n.spec.name]
		pn := PhaseNode{Node: n.spec.name, PIDStart: a.PID, PIDEnd: b.PID, GoroutinesStart: a.Goroutines, GoroutinesEnd: b.Goroutines,
			RSSStart: a.RSS, RSSEnd: b.RSS, RestStart: a.Rest(), RestEnd: b.Rest(), LiveStart: a.LiveHeap, LiveEnd: b.LiveHeap}
		switch {
		case a.Err != "" || b.Err != "" || a.PID == 0 || b.PID == 0:
			pn.Note = strings.TrimSpace("not measured: " + a.Err + " " + b.Err)
		case a.PID != b.PID:
			pn.Note = fmt.Sprintf("restarted (pid %d -> %d)", a.PID, b.PID)
		default:
			pn.Compared = true
			pn.GoroutinesMax, pn.RestMax = th.limits(a.Goroutines, a.Rest())
			pn.Grew = b.Goroutines > pn.GoroutinesMax || b.Rest() > pn.RestMax
		}
		out = append(out, pn)
	}
	return out
}

// limits returns the most goroutines and RSS outside the hot tier that a
// phase starting at g and rest may end with.
func (t Thresholds) limits(g int, rest int64) (int, int64) {
	return int(float64(g)*(1+t.GoroutinesRel)) + t.GoroutinesAbs, int64(float64(rest)*(1+t.RSSRel)) + t.RSSAbs
}

// drifts compares each node process that was already running at the start
// of the baseline phase (the first of cycle 2, or the first of cycle 2 or
// later that starts at least DriftAfter past the load's start: its bounded
// caches warmed before it) from there to the end of the last phase it
// lived through. A process started later (n1,
// restarted every cycle) would be measured from a cold start, which is
// warm-up, not drift: its phases are still checked one by one.
func drifts(phases []PhaseRecord, th Thresholds, loadStart time.Time, after time.Duration) []Drift {
	type mark struct {
		phase string
		cycle int
		at    time.Time
		pn    PhaseNode
	}
	first, last := map[string]mark{}, map[string]mark{}
	base := -1 // index of the first phase of cycle 2
	for i, p := range phases {
		if p.Cycle < 2 || (base < 0 && after > 0 && p.Start.Before(loadStart.Add(after))) {
			continue
		}
		if base < 0 {
			base = i
		}
		for _, n := range p.Nodes {
			if !n.Compared {
				continue
			}
			key := fmt.Sprintf("%s/%d", n.Node, n.PIDStart)
			if _, ok := first[key]; !ok {
				if i != base {
					continue // started after the baseline
				}
				first[key] = mark{p.Fault, p.Cycle, p.Start, n}
			}
			last[key] = mark{p.Fault, p.Cycle, p.Start, n}
		}
	}
	var out []Drift
	for key, f := range first {
		l := last[key]
		d := Drift{Node: f.pn.Node, PID: f.pn.PIDStart, From: f.phase, FromCycle: f.cycle, To: l.phase,
			GoroutinesFrom: f.pn.GoroutinesStart, GoroutinesTo: l.pn.GoroutinesEnd, RestFrom: f.pn.RestStart, RestTo: l.pn.RestEnd}
		if !f.at.IsZero() && !loadStart.IsZero() {
			d.FromMinute = int(f.at.Sub(loadStart) / time.Minute)
		}
		d.GoroutinesMax, d.RestMax = th.limits(d.GoroutinesFrom, d.RestFrom)
		d.Grew = d.GoroutinesTo > d.GoroutinesMax || d.RestTo > d.RestMax
		out = append(out, d)
	}
	sort.Slice(out, func(i, j int) bool {
		return out[i].Node < out[j].Node || (out[i].Node == out[j].Node && out[i].PID < out[j].PID)
	})
	return out
}

// fill completes the report from the history and the samples.
func (s *soak) fill(r *Report) {
	h := s.h
	r.Started, r.Ended = s.start.UTC(), time.Now().UTC()
	r.Seconds = r.Ended.Sub(r.Started).Seconds()
	r.Calls = h.totalCalls()
	if r.Seconds > 0 {
		r.CallsPerSec = float64(r.Calls) / r.Seconds
	}
	r.ByCall = h.summaries()
	for _, c := range r.ByCall {
		r.WorstOverMs = max(r.WorstOverMs, c.WorstOverMs)
	}
	r.Overruns = h.overruns()
	r.Blocks = Blocks{Checked: h.blocksChecked(), Verified: h.verified.Load(), Wrong: h.wrong.Load(), Missed: h.missReason.Load(),
		Unexplained: h.unexplained.Load(), Computed: h.computed.Load(), LeasedMiss: h.leasedMiss.Load(),
		Stored: h.stored.Load(), NotStored: h.notStored.Load()}
	r.Reasons = h.reasonList()
	r.Violations = h.exampleList()
	s.fillSetup(r)
	s.fillRSS(r)
	r.Summary = faultSummary(r.Faults)
	s.judge(r)
}

// fillSetup describes the run's settings and environment.
func (s *soak) fillSetup(r *Report) {
	cfg := s.cfg
	size, mounted, grown := s.disk.state()
	var names []string
	for _, n := range s.nodes {
		names = append(names, s.describe(n))
	}
	r.Setup = Setup{Workers: cfg.Workers, Rate: cfg.Rate, OpTimeoutMs: ms(cfg.OpTimeout), SlackMs: ms(cfg.OverrunSlack),
		Payload:  fmt.Sprintf("%d..%d bytes, derived from the key", cfg.MinPayload, cfg.MaxPayload),
		Chains:   fmt.Sprintf("%d hot + %d scan chains of %d blocks per tenant (alpha, beta, open); scan share %.2f", cfg.HotChains, cfg.ScanChains, cfg.ChainBlocks, cfg.ScanShare),
		Schedule: fmt.Sprintf("warm-up %v; each fault: hold %v, recover within %v, settle %v; cycle %s", cfg.Schedule.Warmup, cfg.Schedule.Hold, cfg.Schedule.Recover, cfg.Schedule.Settle, strings.Join(cfg.Schedule.Faults, ",")),
		Nodes:    names, Thresholds: cfg.Thresholds, TmpfsGrowths: grown,
		Netns: "off: " + s.nsWhy, Tmpfs: "off: " + s.diskWhy}
	if s.ns != nil {
		r.Setup.Netns = fmt.Sprintf("%s (node %s, etcd at %s)", s.ns.name, s.ns.nodeIP, s.ns.etcdIP)
	}
	if mounted {
		r.Setup.Tmpfs = fmt.Sprintf("%s, %d bytes at the end", s.disk.mount, size)
	}
}

// describe says what node n is and runs.
func (s *soak) describe(n *node) string {
	desc := n.spec.name
	switch {
	case n.spec.name == "open":
		desc += ": open mode (no tenants), Dial, fs cold tier"
	case n.spec.control:
		desc += ": cluster, failpoints over stdin (gpucache-bench soak node)"
	default:
		desc += ": cluster, gpucached"
	}
	if n.spec.name == "n2" && s.ns != nil {
		desc += ", in network namespace " + s.ns.name
	}
	return desc
}

// fillRSS copies the samples and sums each node's memory over them.
func (s *soak) fillRSS(r *Report) {
	s.mu.Lock()
	r.Samples = append([]Sample(nil), s.samples...)
	s.mu.Unlock()
	byNode := map[string]*NodeRSS{}
	pids := map[string]map[int]bool{}
	for _, sm := range r.Samples {
		if sm.Err != "" || sm.RSS == 0 {
			continue
		}
		nr := byNode[sm.Node]
		if nr == nil {
			nr = &NodeRSS{Node: sm.Node, First: sm.RSS, Min: sm.RSS}
			byNode[sm.Node] = nr
			pids[sm.Node] = map[int]bool{}
		}
		nr.Samples++
		nr.Min, nr.Max, nr.Last = min(nr.Min, sm.RSS), max(nr.Max, sm.RSS), sm.RSS
		nr.MaxRest = max(nr.MaxRest, sm.Rest())
		nr.MaxLive = max(nr.MaxLive, sm.LiveHeap)
		pids[sm.Node][sm.PID] = true
	}
	for _, n := range s.nodes {
		if nr := byNode[n.spec.name]; nr != nil {
			nr.PIDs = len(pids[n.spec.name])
			r.RSS = append(r.RSS, *nr)
		}
	}
}

// faultSummary counts the injections and recoveries per fault, in the
// order the faults first ran.
func faultSummary(faults []FaultRecord) []FaultCount {
	counts := map[string]*FaultCount{}
	var order []string
	for _, f := range faults {
		c := counts[f.Fault]
		if c == nil {
			c = &FaultCount{Fault: f.Fault}
			counts[f.Fault] = c
			order = append(order, f.Fault)
		}
		if f.NotRun != "" {
			c.NotRun = f.NotRun
			continue
		}
		c.Injected++
		if f.Recovered {
			c.Recovered++
			c.WorstSec = max(c.WorstSec, f.RecoverySec)
		}
	}
	var out []FaultCount
	for _, k := range order {
		out = append(out, *counts[k])
	}
	return out
}

// judge lists the run's failures: wrong or unexplained blocks, overruns,
// bad answers, faults not recovered, growth, crashes, no calls at all.
func (s *soak) judge(r *Report) {
	h, cfg := s.h, s.cfg
	fail := func(format string, args ...any) { r.Failures = append(r.Failures, fmt.Sprintf(format, args...)) }
	if r.Blocks.Wrong > 0 {
		fail("%d wrong payloads", r.Blocks.Wrong)
	}
	if r.Blocks.Unexplained > 0 {
		fail("%d blocks neither exact bytes nor a miss with a reason", r.Blocks.Unexplained)
	}
	if r.Overruns > 0 {
		fail("%d calls returned more than %v past their deadline (worst %.1f ms past)", r.Overruns, cfg.OverrunSlack, r.WorstOverMs)
	}
	if n := h.lookupBad.Load(); n > 0 {
		fail("%d LOOKUP answers with more hits than keys", n)
	}
	if n := h.putRefused.Load(); n > 0 {
		fail("%d valid PUT blocks refused as KEY_MISMATCH or TOO_LARGE", n)
	}
	if n := h.fillErrors.Load(); n > 0 {
		fail("%d GetOrFill calls failed with their context alive", n)
	}
	s.judgeFaults(r)
	for _, c := range r.Crashes {
		fail("%s", c)
	}
	if r.Calls == 0 {
		fail("no client call completed")
	}
}

// judgeFaults lists the faults not recovered, the phases in which a node
// grew, and the drifts over the whole run.
func (s *soak) judgeFaults(r *Report) {
	fail := func(format string, args ...any) { r.Failures = append(r.Failures, fmt.Sprintf(format, args...)) }
	for _, f := range r.Faults {
		if f.NotRun == "" && !f.Recovered {
			fail("fault %s (cycle %d) not recovered: %s", f.Fault, f.Cycle, strings.TrimPrefix(f.status(), "NOT RECOVERED: "))
		}
	}
	for _, p := range r.Phases {
		for _, n := range p.Nodes {
			if n.Grew {
				fail("phase %s (cycle %d): %s grew: goroutines %d -> %d (limit %d), RSS outside the hot tier %d -> %d MiB (limit %d MiB)",
					p.Fault, p.Cycle, n.Node, n.GoroutinesStart, n.GoroutinesEnd, n.GoroutinesMax, n.RestStart>>20, n.RestEnd>>20, n.RestMax>>20)
			}
		}
	}
	r.Drifts = drifts(r.Phases, s.cfg.Thresholds, s.start, s.cfg.DriftAfter)
	for _, d := range r.Drifts {
		if d.Grew {
			fail("%s (pid %d) grew from phase %s of cycle %d (minute %d) to phase %s at the end: goroutines %d -> %d (limit %d), RSS outside the hot tier %d -> %d MiB (limit %d MiB)",
				d.Node, d.PID, d.From, d.FromCycle, d.FromMinute, d.To, d.GoroutinesFrom, d.GoroutinesTo, d.GoroutinesMax, d.RestFrom>>20, d.RestTo>>20, d.RestMax>>20)
		}
	}
}

// WriteText writes the human-readable report.
func (r *Report) WriteText(w io.Writer) {
	fmt.Fprintf(w, "SOAK %s: %.0f s, %d client calls checked (%.0f/s), %d blocks checked\n", r.verdict(), r.Seconds, r.Calls, r.CallsPerSec, r.Blocks.Checked)
	b := r.Blocks
	fmt.Fprintf(w, "blocks: %d verified hits (exact bytes), %d misses with a reason, %d computed by GetOrFill here, %d WRONG, %d unexplained; PUT blocks stored %d, not stored %d; leased then missed %d\n",
		b.Verified, b.Missed, b.Computed, b.Wrong, b.Unexplained, b.Stored, b.NotStored, b.LeasedMiss)
	fmt.Fprintf(w, "deadlines: %d calls more than %.0f ms past their %.0f ms deadline; worst %.1f ms past\n", r.Overruns, r.Setup.SlackMs, r.Setup.OpTimeoutMs, r.WorstOverMs)
	r.writeCalls(w)
	r.writeFaults(w)
	r.writeRSS(w)
	r.writePhases(w)
	r.writeCounters(w)
	for _, d := range r.Drifts {
		fmt.Fprintf(w, "drift %s (pid %d), phase %s of cycle %d (minute %d) to the end: goroutines %d -> %d (limit %d), RSS outside the hot tier %d -> %d MiB (limit %d MiB)\n",
			d.Node, d.PID, d.From, d.FromCycle, d.FromMinute, d.GoroutinesFrom, d.GoroutinesTo, d.GoroutinesMax, d.RestFrom>>20, d.RestTo>>20, d.RestMax>>20)
	}
	for _, c := range r.Crashes {
		fmt.Fprintln(w, "crash:", c)
	}
	for _, v := range r.Violations {
		fmt.Fprintln(w, "violation:", v)
	}
	for _, f := range r.Failures {
		fmt.Fprintln(w, "FAILED:", f)
	}
}

// writeCalls writes the latency table per call kind and the reasons.
func (r *Report) writeCalls(w io.Writer) {
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "call\tcalls\tp50 ≤ ms\tp99 ≤ ms\tp99.9 ≤ ms\tworst ms\toverruns")
	for _, c := range r.ByCall {
		fmt.Fprintf(tw, "%s\t%d\t%.3g\t%.3g\t%.3g\t%.1f\t%d\n", c.Kind, c.Calls, c.P50Ms, c.P99Ms, c.P999Ms, c.WorstMs, c.Overruns)
	}
	tw.Flush()
	fmt.Fprintf(w, "miss and error reasons: %s\n", strings.Join(r.Reasons, ", "))
}

// writeFaults writes the fault summary and each fault run.
func (r *Report) writeFaults(w io.Writer) {
	fmt.Fprintln(w, "faults:")
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "fault\tinjected\trecovered\tworst recovery s\tnote")
	for _, c := range r.Summary {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.1f\t%s\n", c.Fault, c.Injected, c.Recovered, c.WorstSec, c.NotRun)
	}
	tw.Flush()
	for _, f := range r.Faults {
		if f.NotRun != "" {
			continue
		}
		fmt.Fprintf(w, "  %s #%d on %s: injected %s, healed %s, %s\n", f.Fault, f.Cycle, f.Target,
			f.InjectedAt.Format("15:04:05"), f.HealedAt.Format("15:04:05"), f.status())
	}
}

// writeRSS writes the memory per node and, per phase, over time.
func (r *Report) writeRSS(w io.Writer) {
	fmt.Fprintln(w, "RSS per node (MiB):")
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "node\tsamples\tprocesses\tfirst\tmin\tmax\tlast\tmax outside hot tier\tmax live heap")
	for _, n := range r.RSS {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\n", n.Node, n.Samples, n.PIDs, n.First>>20, n.Min>>20, n.Max>>20, n.Last>>20, n.MaxRest>>20, n.MaxLive>>20)
	}
	tw.Flush()
	if len(r.Phases) > 0 {
		fmt.Fprintln(w, "RSS over time (MiB, at each phase's end; outside the hot tier in brackets):")
		tw = tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
		head := []string{"time", "phase"}
		for _, n := range r.Phases[0].Nodes {
			head = append(head, n.Node)
		}
		fmt.Fprintln(tw, strings.Join(head, "\t"))
		step := max(1, (len(r.Phases)+19)/20) // at most 20 rows, the last phase always
		for i, p := range r.Phases {
			if i%step != 0 && i != len(r.Phases)-1 {
				continue
			}
			row := []string{p.End.Format("15:04:05"), fmt.Sprintf("%s #%d", p.Fault, p.Cycle)}
			for _, n := range p.Nodes {
				row = append(row, fmt.Sprintf("%d (%d)", n.RSSEnd>>20, n.RestEnd>>20))
			}
			fmt.Fprintln(tw, strings.Join(row, "\t"))
		}
		tw.Flush()
	}
}

// writePhases writes the phase comparisons and their limits.
func (r *Report) writePhases(w io.Writer) {
	grew, compared := 0, 0
	for _, p := range r.Phases {
		for _, n := range p.Nodes {
			if n.Compared {
				compared++
			}
			if n.Grew {
				grew++
			}
		}
	}
	th := r.Setup.Thresholds
	fmt.Fprintf(w, "phases: %d, %d node comparisons, %d grew (limits: goroutines ×%.2f + %d; RSS outside the hot tier ×%.2f + %d MiB)\n",
		len(r.Phases), compared, grew, 1+th.GoroutinesRel, th.GoroutinesAbs, 1+th.RSSRel, th.RSSAbs>>20)
}

// writeCounters writes the nodes' counters at the end.
func (r *Report) writeCounters(w io.Writer) {
	if len(r.Counters) > 0 {
		fmt.Fprintln(w, "node counters at the end (since each node's last start):")
		tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
		names := []string{"blocks_hit", "blocks_miss", "cold_refill_hits", "cold_refill_misses", "hot_evictions", "hot_put_rejects", "readonly_refused", "wrong_epoch"}
		fmt.Fprintln(tw, "node\t"+strings.Join(names, "\t"))
		var nodes []string
		for n := range r.Counters {
			nodes = append(nodes, n)
		}
		sort.Strings(nodes)
		for _, n := range nodes {
			row := []string{n}
			for _, k := range names {
				row = append(row, strconv.FormatFloat(metrics(r.Counters[n]).get("gpucache_"+k), 'f', -1, 64))
			}
			fmt.Fprintln(tw, strings.Join(row, "\t"))
		}
		tw.Flush()
	}
}

func (r *Report) verdict() string {
	if len(r.Failures) == 0 {
		return "PASS"
	}
	return "FAIL"
}

// WriteFiles writes report.json and rss.csv (every sample) into dir.
func (r *Report) WriteFiles(dir string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "report.json"), append(b, '\n'), 0o644); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(dir, "rss.csv"))
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	w.Write([]string{"time", "node", "pid", "rss_bytes", "hot_mapped_bytes", "goroutines", "heap_inuse_bytes", "live_heap_bytes", "error"})
	samples := append([]Sample(nil), r.Samples...)
	sort.SliceStable(samples, func(i, j int) bool { return samples[i].At.Before(samples[j].At) })
	for _, s := range samples {
		w.Write([]string{s.At.Format(time.RFC3339Nano), s.Node, strconv.Itoa(s.PID), strconv.FormatInt(s.RSS, 10),
			strconv.FormatInt(s.Mapped, 10), strconv.Itoa(s.Goroutines), strconv.FormatInt(s.HeapInuse, 10), strconv.FormatInt(s.LiveHeap, 10), s.Err})
	}
	w.Flush()
	if err := w.Error(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
