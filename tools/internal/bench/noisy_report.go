package bench

// The noisy-neighbour report: its JSON shape, the notes and the table.

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"text/tabwriter"
	"time"
)

// NoisyReport is the outcome of RunNoisy, in the shape of the --json output.
type NoisyReport struct {
	Started time.Time   `json:"started"`
	Addr    string      `json:"addr"`
	Server  string      `json:"server"`
	Params  NoisyParams `json:"params"`
	Reps    []NoisyRep  `json:"reps"`
	// MedianP99Ratio is the median over reps of B's p99 under the flood
	// over B's p99 alone; MedianP99RisePct is (ratio - 1) × 100.
	MedianP99Ratio   float64 `json:"median_p99_ratio"`
	MedianP99RisePct float64 `json:"median_p99_rise_pct"`
	// Wrong counts B's hits whose bytes did not verify, over every phase;
	// it must be 0.
	Wrong uint64 `json:"wrong_payloads"`
	// Limited counts A's RATE_LIMITED answers over every flood.
	Limited uint64   `json:"noisy_limited"`
	Notes   []string `json:"notes,omitempty"`
}

// NoisyParams records the run's parameters.
type NoisyParams struct {
	Victim        string  `json:"victim_tenant"`
	Noisy         string  `json:"noisy_tenant"`
	Quota         float64 `json:"quota_ops_per_sec"`
	FloodFactor   float64 `json:"flood_factor"`
	FloodRate     float64 `json:"flood_rate_per_sec"`
	VictimRate    float64 `json:"victim_rate_per_sec"`
	Size          int     `json:"size"`
	FloodSize     int     `json:"flood_size"`
	Keys          int     `json:"keys"`
	VictimConns   int     `json:"victim_conns"`
	FloodConns    int     `json:"flood_conns"`
	VictimWorkers int     `json:"victim_workers"`
	FloodWorkers  int     `json:"flood_workers"`
	VictimPacer   Pacer   `json:"victim_pacer"`
	FloodPacer    Pacer   `json:"flood_pacer"`
	DurationNs    int64   `json:"duration_ns"`
	WarmupNs      int64   `json:"warmup_ns"`
	SliceNs       int64   `json:"slice_ns"`
	SettleNs      int64   `json:"settle_ns"`
	Reps          int     `json:"reps"`
	FloodInProc   bool    `json:"flood_in_process"`
	GoMaxProcs    int     `json:"gomaxprocs"`
	ClientNumCPU  int     `json:"client_num_cpu"`
}

// NoisyRep is one rep: B alone and B under the flood.
type NoisyRep struct {
	Rep int `json:"rep"`
	// FloodFirst is true when the flood phase ran first.
	FloodFirst bool       `json:"flood_first"`
	Alone      NoisyPhase `json:"alone"`
	Flood      NoisyPhase `json:"flood"`
	P99Ratio   float64    `json:"p99_ratio"`
	// WrongUnmeasured counts B's wrong payloads outside the measured
	// windows (warm-up, settling); they count in NoisyReport.Wrong too.
	WrongUnmeasured uint64 `json:"wrong_payloads_unmeasured"`
}

// NoisyPhase is one phase of a rep.
type NoisyPhase struct {
	Name string `json:"name"` // "alone" or "flood"
	// Slices is the number of windows the phase was measured in.
	Slices int         `json:"slices"`
	Victim VictimStats `json:"victim"`
	// MachineBusyPct and MachineStealPct are the share of the machine's
	// CPU time (all CPUs, every process) that was busy, and that the
	// hypervisor stole, over the phase's windows; 0 where unknown (not
	// Linux).
	MachineBusyPct  float64 `json:"machine_busy_pct"`
	MachineStealPct float64 `json:"machine_steal_pct"`
	// Noisy is the flood's record; nil in the alone phase.
	Noisy *FloodStats `json:"noisy,omitempty"`
}

// VictimStats is B's record of one phase. Latencies run from the moment a
// request was issued (handed to the workers) to its answer.
type VictimStats struct {
	Seconds    float64 `json:"seconds"`
	TargetRate float64 `json:"target_per_sec"`
	// Due counts the measured requests that fell due; Completed those
	// answered (Due - Completed were dropped: the queue was full).
	Due        uint64  `json:"due"`
	Completed  uint64  `json:"completed"`
	Dropped    uint64  `json:"dropped"`
	Hits       uint64  `json:"hits"`
	Misses     uint64  `json:"misses"`
	Errors     uint64  `json:"errors"`
	Wrong      uint64  `json:"wrong_payloads"`
	RatePerSec float64 `json:"rate_per_sec"`
	MeanNs     int64   `json:"mean_ns"`
	P50Ns      int64   `json:"p50_ns"`
	P99Ns      int64   `json:"p99_ns"`
	P999Ns     int64   `json:"p999_ns"`
	MaxNs      int64   `json:"max_ns"`
	// For diagnosis: the pacer lag runs from the moment a request fell due
	// to the moment it was issued (the pacer's timer waking late; not part
	// of the latency), the service time from the moment a worker sent it
	// to the answer (the latency less the wait for a free worker).
	LagP50Ns     int64  `json:"lag_p50_ns"`
	LagP99Ns     int64  `json:"lag_p99_ns"`
	ServiceP50Ns int64  `json:"service_p50_ns"`
	ServiceP99Ns int64  `json:"service_p99_ns"`
	FirstError   string `json:"first_error,omitempty"`
}

func floodLine(s *FloodStats) string {
	if s == nil {
		return ""
	}
	return fmt.Sprintf("; A offered %d (%s/s) accepted %d limited %d errors %d",
		s.Offered, fmtRate(s.OfferedPerSec), s.Accepted, s.Limited, s.Errors)
}

func medianRatio(reps []NoisyRep) float64 {
	var rs []float64
	for _, r := range reps {
		if r.P99Ratio > 0 {
			rs = append(rs, r.P99Ratio)
		}
	}
	if len(rs) == 0 {
		return 0
	}
	slices.Sort(rs)
	n := len(rs)
	if n%2 == 1 {
		return rs[n/2]
	}
	return (rs[n/2-1] + rs[n/2]) / 2
}

func (r *NoisyReport) addNotes() {
	var errs, drops, misses, floodErrs, floodDrops uint64
	for _, rp := range r.Reps {
		for _, ph := range []NoisyPhase{rp.Alone, rp.Flood} {
			errs += ph.Victim.Errors
			drops += ph.Victim.Dropped
			misses += ph.Victim.Misses
			if ph.Noisy != nil {
				floodErrs += ph.Noisy.Errors
				floodDrops += ph.Noisy.Offered - ph.Noisy.Sent
			}
		}
	}
	if r.Limited == 0 && len(r.Reps) > 0 {
		r.Notes = append(r.Notes, "the noisy tenant got no RATE_LIMITED answer: is --quota the tenant's ops_per_sec on the server?")
	}
	if errs > 0 || misses > 0 || drops > 0 {
		r.Notes = append(r.Notes, fmt.Sprintf("victim: %d errors, %d misses, %d requests dropped (queue full)", errs, misses, drops))
	}
	if floodErrs > 0 || floodDrops > 0 {
		r.Notes = append(r.Notes, fmt.Sprintf("flood: %d errors, %d requests not sent (every worker busy)", floodErrs, floodDrops))
	}
}

// WriteJSON writes the report as indented JSON.
func (r *NoisyReport) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// Verdict is the one-line summary of the run.
func (r *NoisyReport) Verdict() string {
	return fmt.Sprintf("B p99 rise: median %.1f%% over %d reps (target < 20%%)", r.MedianP99RisePct, len(r.Reps))
}

// WriteTable writes one row per phase, the notes and the verdict line.
func (r *NoisyReport) WriteTable(w io.Writer) error {
	p := r.Params
	fmt.Fprintf(w, "victim %q: %s GET/s of %s (%s pacer); noisy %q: quota %s ops/s, flood %s req/s of %s GETs (%s pacer, %s); %s phases\n",
		p.Victim, fmtRate(p.VictimRate), FormatSize(int64(p.Size)), p.VictimPacer, p.Noisy, fmtRate(p.Quota), fmtRate(p.FloodRate),
		FormatSize(int64(p.FloodSize)), p.FloodPacer, map[bool]string{true: "in process", false: "separate process"}[p.FloodInProc],
		time.Duration(p.DurationNs))
	if p.SliceNs < p.DurationNs {
		fmt.Fprintf(w, "each phase measured in windows of %s interleaved ABBA with the other phase's, %s settling after each flood toggle\n",
			time.Duration(p.SliceNs), time.Duration(p.SettleNs))
	}
	fmt.Fprint(w, "busy, steal: share of the machine's CPU time busy, and stolen by the hypervisor, during the phase\n\n")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "rep\tphase\tB req/s\tB p50\tB p99\tB p999\tB max\tB wrong\tB err\tA offered\tA accepted\tA limited\tA err\tbusy\tsteal\tp99 ratio\t")
	for _, rp := range r.Reps {
		phases := []NoisyPhase{rp.Alone, rp.Flood}
		if rp.FloodFirst {
			phases[0], phases[1] = phases[1], phases[0]
		}
		for i, ph := range phases {
			v := ph.Victim
			a := []string{"-", "-", "-", "-"}
			if s := ph.Noisy; s != nil {
				a = []string{strconv.FormatUint(s.Offered, 10), strconv.FormatUint(s.Accepted, 10),
					strconv.FormatUint(s.Limited, 10), strconv.FormatUint(s.Errors, 10)}
			}
			ratio := ""
			if i == 1 {
				ratio = strconv.FormatFloat(rp.P99Ratio, 'f', 3, 64)
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\t%.0f%%\t%.1f%%\t%s\t\n", rp.Rep, ph.Name, fmtRate(v.RatePerSec),
				fmtDur(v.P50Ns), fmtDur(v.P99Ns), fmtDur(v.P999Ns), fmtDur(v.MaxNs), v.Wrong, v.Errors+v.Misses,
				a[0], a[1], a[2], a[3], ph.MachineBusyPct, ph.MachineStealPct, ratio)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "\nmedian p99 ratio (flood/alone): %.3f; B wrong payloads: %d; A RATE_LIMITED answers: %d\n",
		r.MedianP99Ratio, r.Wrong, r.Limited)
	for _, n := range r.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	_, err := fmt.Fprintln(w, r.Verdict())
	return err
}
