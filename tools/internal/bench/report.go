package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/gpucache/gpucache/client"
)

// Report is the outcome of a run, in the shape of the --json output.
type Report struct {
	Started time.Time     `json:"started"`
	Addr    string        `json:"addr"`
	Server  string        `json:"server"`
	Limits  client.Limits `json:"limits"`
	Params  Params        `json:"params"`
	Hold    *HoldResult   `json:"hold,omitempty"`
	// Cluster is the view of a --cluster run and every member's STAT.
	Cluster *ClusterInfo `json:"cluster,omitempty"`
	Cases   []CaseResult `json:"cases"`
	// ServerStat is the server's STAT snapshot taken after the last case.
	ServerStat map[string]uint64 `json:"server_stat"`
	// Summary picks the headline server figures out of ServerStat.
	Summary ServerSummary `json:"summary"`
	// Notes are warnings raised during the run (a working set that did not
	// fit, a hold that stopped short).
	Notes []string `json:"notes,omitempty"`
}

// Params records the run's parameters.
type Params struct {
	Ops          []string `json:"ops"`
	Sizes        []int    `json:"sizes"`
	Conns        []int    `json:"conns"`
	Batch        int      `json:"batch"`
	Pipeline     int      `json:"pipeline"`
	DurationNs   int64    `json:"duration_ns"`
	Requests     int      `json:"requests"`
	Keys         int      `json:"keys"`
	WarmupNs     int64    `json:"warmup_ns"`
	HoldBytes    int64    `json:"hold_bytes"`
	GoMaxProcs   int      `json:"gomaxprocs"`
	ClientNumCPU int      `json:"client_num_cpu"`
}

// ServerSummary holds the server figures a run is judged by.
type ServerSummary struct {
	GoHeapInUseBytes uint64 `json:"go_heap_inuse_bytes"`
	GoGCPauseP99Ns   uint64 `json:"go_gc_pause_p99_ns"`
	HotBytesCached   uint64 `json:"hot_bytes_cached"`
}

// HoldResult describes the --hold-bytes fill.
type HoldResult struct {
	Requested int64   `json:"requested_bytes"`
	Held      int64   `json:"held_bytes"` // bytes of blocks the server stored or already held
	Blocks    int     `json:"blocks"`
	BlockSize int     `json:"block_size"`
	Seconds   float64 `json:"seconds"`
}

// CaseResult is one (op, size, conns) case.
//
// Blocks counts every block of every measured request, whatever its
// outcome; OpsPerSec is Blocks per second. Bytes counts payload bytes that
// made it: GET hits that verified, PUT blocks stored or already present;
// GBPerSec is Bytes per second over 1e9. Latencies are per request.
type CaseResult struct {
	Op        string  `json:"op"`
	Size      int     `json:"size"`
	SizeLabel string  `json:"size_label"`
	Conns     int     `json:"conns"`
	Batch     int     `json:"batch"`
	Pipeline  int     `json:"pipeline"`
	Requests  uint64  `json:"requests"`
	Blocks    uint64  `json:"blocks"`
	Bytes     uint64  `json:"bytes"`
	Seconds   float64 `json:"seconds"`
	OpsPerSec float64 `json:"ops_per_sec"`
	GBPerSec  float64 `json:"gb_per_sec"`
	MeanNs    int64   `json:"mean_ns"`
	P50Ns     int64   `json:"p50_ns"`
	P90Ns     int64   `json:"p90_ns"`
	P99Ns     int64   `json:"p99_ns"`
	P999Ns    int64   `json:"p999_ns"`
	MaxNs     int64   `json:"max_ns"`
	// Errors counts blocks that failed: transport errors, server errors,
	// and PUTs refused for space or size.
	Errors uint64 `json:"errors"`
	// Misses counts GET blocks the server did not hold.
	Misses uint64 `json:"misses"`
	// Corrupt counts GET hits whose bytes did not verify; it must be 0.
	Corrupt uint64 `json:"corrupt"`
	// ReadOnly counts PUT blocks answered READ_ONLY (the node lost its
	// control plane and takes no writes); they are not in Errors.
	ReadOnly uint64 `json:"read_only,omitempty"`
	// FirstError is the first error seen, for diagnosis.
	FirstError string `json:"first_error,omitempty"`
	// Nodes is each cluster member's share of the case (cluster runs): the
	// blocks whose keys it owns, with the same counters.
	Nodes []NodeResult `json:"nodes,omitempty"`
}

func (r *CaseResult) label() string {
	return fmt.Sprintf("%s %s conns=%d", r.Op, r.SizeLabel, r.Conns)
}

// line is the one-line summary printed per case.
func (r *CaseResult) line() string {
	s := fmt.Sprintf("%s: %s ops/s %.3f GB/s p50 %s p99 %s errors %d misses %d corrupt %d",
		r.label(), fmtRate(r.OpsPerSec), r.GBPerSec, fmtDur(r.P50Ns), fmtDur(r.P99Ns), r.Errors, r.Misses, r.Corrupt)
	if r.ReadOnly > 0 {
		s += fmt.Sprintf(" read-only %d (node read-only: control plane unreachable)", r.ReadOnly)
	}
	if r.FirstError != "" {
		s += " (first error: " + r.FirstError + ")"
	}
	return s
}

// WriteJSON writes the report as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteTable writes the cases as an aligned table, then the server summary.
func (r *Report) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "op\tsize\tconns\tbatch\tpipe\tops/s\tGB/s\tp50\tp90\tp99\tp999\terrors\tmisses\tcorrupt\t")
	for _, c := range r.Cases {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%s\t%.3f\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t\n",
			c.Op, c.SizeLabel, c.Conns, c.Batch, c.Pipeline, fmtRate(c.OpsPerSec), c.GBPerSec,
			fmtDur(c.P50Ns), fmtDur(c.P90Ns), fmtDur(c.P99Ns), fmtDur(c.P999Ns), c.Errors, c.Misses, c.Corrupt)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if err := r.writeNodes(w); err != nil {
		return err
	}
	for _, c := range r.Cases {
		if c.ReadOnly > 0 {
			fmt.Fprintf(w, "\n%s: read-only %d: PUT blocks answered READ_ONLY (the node lost its control plane and takes no writes; not counted as errors)\n", c.label(), c.ReadOnly)
		}
	}
	if r.Hold != nil {
		fmt.Fprintf(w, "\nhold: %s of %s requested in %d blocks of %s\n",
			FormatSize(r.Hold.Held), FormatSize(r.Hold.Requested), r.Hold.Blocks, FormatSize(int64(r.Hold.BlockSize)))
	}
	if r.ServerStat != nil {
		fmt.Fprintf(w, "\nserver %s: go_heap_inuse %s, gc pause p99 %s, hot bytes cached %s\n", r.Server,
			FormatSize(int64(r.Summary.GoHeapInUseBytes)), fmtDur(int64(r.Summary.GoGCPauseP99Ns)), FormatSize(int64(r.Summary.HotBytesCached)))
	}
	for _, n := range r.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	return nil
}

func fmtRate(v float64) string {
	switch {
	case v >= 1e6:
		return strconv.FormatFloat(v/1e6, 'f', 2, 64) + "M"
	case v >= 1e4:
		return strconv.FormatFloat(v/1e3, 'f', 1, 64) + "k"
	}
	return strconv.FormatFloat(v, 'f', 0, 64)
}

func fmtDur(ns int64) string {
	d := time.Duration(ns)
	switch {
	case d == 0:
		return "0"
	case d < time.Microsecond:
		return fmt.Sprintf("%dns", ns)
	case d < time.Millisecond:
		return fmt.Sprintf("%.1fµs", float64(ns)/1e3)
	case d < time.Second:
		return fmt.Sprintf("%.2fms", float64(ns)/1e6)
	}
	return fmt.Sprintf("%.2fs", d.Seconds())
}
