package benchcli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/gpucache/gpucache/client"
	"github.com/gpucache/gpucache/internal/cli"
	"github.com/gpucache/gpucache/internal/policy"
	"github.com/gpucache/gpucache/tools/internal/replay"
	"github.com/gpucache/gpucache/tools/internal/replay/live"
	"github.com/gpucache/gpucache/tools/internal/replay/plot"
)

// replayFlags are the flags of `gpucache-bench replay`.
type replayFlags struct {
	trace    string
	limit    int
	jsonOut  string
	progress string

	// simulate
	policies   string
	capacities string
	plotOut    string
	workers    int
	costModel  string

	// simulate, two tiers
	flashCaps    string
	flashSegment int
	flashReclaim string

	// live
	live         bool
	common       cli.ConnFlags
	scale        int
	speedup      float64
	capacityFrac float64
	simPolicy    string
	policyName   string
	conns        int
	leaseTTL     time.Duration

	printCapacity bool
}

// defaultLiveLimit is --limit in live mode when it is not given.
const defaultLiveLimit = 2000

const replaySynopsis = `replay --trace FILE [flags]

Replays a Mooncake-format trace (JSONL: timestamp, input_length,
output_length, hash_ids) in one of three modes:

  simulate (default)  every --policies × --capacities on the trace's block
                      metadata: a table of prefix-hit ratio, prefill tokens
                      saved and compute saved; --json, --plot; with
                      --flash-capacities also DRAM (--capacities) above a
                      log-structured flash tier above cold: hits and compute
                      saved by tier, flash writes and reclaims, cold writes
                      under write-through and write-on-reclaim
  --live              drives a running gpucached through the client with
                      real payloads (64 MiB per 512-token block / --scale), at
                      the trace's arrival times / --speedup; reports hit
                      ratio, throughput, latency and the simulator's hit
                      ratio at --capacity-frac
  --print-capacity    prints the gpucached hot-tier settings (capacity, size
                      class, slab) under which the live replay's cache holds
                      exactly --capacity-frac of the unique blocks`

// simOnly and liveOnly name the flags of one mode, to refuse them in the
// other.
var (
	simOnly  = []string{"policies", "capacities", "plot", "workers", "cost-model", "flash-capacities", "flash-segment", "flash-reclaim"}
	liveOnly = []string{"addr", "tenant", "timeout", "secret-file", "tls-ca", "tls-cert", "tls-key", "tls-server-name",
		"speedup", "sim-policy", "policy-name", "conns", "lease-ttl"}
)

func (f *replayFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.trace, "trace", "", "Mooncake trace `file` (JSONL; required)")
	fs.IntVar(&f.limit, "limit", 0, fmt.Sprintf("replay the first `N` requests (default: all; %d with --live)", defaultLiveLimit))
	fs.StringVar(&f.jsonOut, "json", "", "write the results as JSON to `file`")
	fs.StringVar(&f.progress, "progress", "auto", "progress bar on stderr: auto (when stderr is a terminal), on or off")

	fs.StringVar(&f.policies, "policies", "", "simulate: comma-separated `policies` (default: all, "+strings.Join(replay.Policies(), ",")+")")
	fs.StringVar(&f.capacities, "capacities", "1,2,5,10,20,50", "simulate: cache capacities in `percent` of the trace's unique blocks")
	fs.StringVar(&f.plotOut, "plot", "", "simulate: draw hit ratio against capacity, one line per policy, to `file` (.svg, .png or .pdf)")
	fs.IntVar(&f.workers, "workers", runtime.GOMAXPROCS(0), "simulate: runs in parallel")
	fs.StringVar(&f.costModel, "cost-model", policy.DefaultCostModel.Name, "simulate: the `model` ("+strings.Join(policy.CostModels(), ", ")+") that prices prefill FLOPs in the realistic compute-saved table and that the cost policy weighs blocks by (gpucached's hot_cost_model)")
	fs.StringVar(&f.flashCaps, "flash-capacities", "", "simulate: also run each --capacities as DRAM above a flash tier of each of these capacities, in `percent` of the unique blocks (default: none)")
	fs.IntVar(&f.flashSegment, "flash-segment", replay.DefaultFlashSegment, "simulate, flash: `blocks` per flash segment (the unit of reclaim)")
	fs.StringVar(&f.flashReclaim, "flash-reclaim", strings.Join(replay.ReclaimOrders(), ","), "simulate, flash: comma-separated reclaim `orders`: oldest (the oldest segment first), fewest-live (the segment with the fewest records whose block is not in DRAM first)")

	fs.BoolVar(&f.live, "live", false, "drive a running gpucached (--addr) instead of simulating")
	f.common.Register(fs)
	fs.IntVar(&f.scale, "scale", live.DefaultScale, "live, print-capacity: block payload = 64 MiB (Llama-3-8B fp16, 512 tokens) / `factor`")
	fs.Float64Var(&f.speedup, "speedup", 0, "live: divide the trace's inter-arrival times by `X` (0: as fast as --conns allow)")
	fs.Float64Var(&f.capacityFrac, "capacity-frac", 0.10, "live, print-capacity: the daemon's capacity as a `fraction` of the replayed requests' unique blocks")
	fs.StringVar(&f.simPolicy, "sim-policy", policy.AdaptiveName, "live: simulator `policy` to compare with (the daemon's --hot-policy, default adaptive)")
	fs.StringVar(&f.policyName, "policy-name", "", "live: the daemon's policy, for the report")
	fs.IntVar(&f.conns, "conns", 4, "live: requests in flight (and client connections)")
	fs.DurationVar(&f.leaseTTL, "lease-ttl", 0, "live: lease each looked-up run until its GET (0: no lease)")

	fs.BoolVar(&f.printCapacity, "print-capacity", false, "print the gpucached hot-tier flags for a live replay at --capacity-frac and --scale, as shell assignments")
}

func runReplay(ctx context.Context, args []string, std cli.Stdio) error {
	var f replayFlags
	fs := newFlagSet("replay", replaySynopsis, std.Out)
	f.register(fs)
	if err := cli.ParseNoArgs(fs, args); err != nil {
		return err
	}
	set := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	if err := f.check(set); err != nil {
		return err
	}
	showProgress := f.progress == "on" || (f.progress == "auto" && cli.IsTerminal(std.Err))
	if f.live && !set["limit"] {
		f.limit = defaultLiveLimit
	}
	reqs, err := readTraceFile(f.trace, f.limit)
	if err != nil {
		return err
	}
	meta := traceMeta{File: f.trace, Limit: f.limit, Requests: len(reqs), UniqueBlocks: replay.UniqueBlocks(reqs)}
	for _, q := range reqs {
		meta.Blocks += int64(len(q.HashIDs))
	}
	switch {
	case f.printCapacity:
		return f.runPrintCapacity(reqs, meta, std)
	case f.live:
		return f.runLive(ctx, reqs, meta, showProgress, std)
	}
	return f.runSimulate(reqs, meta, showProgress, std)
}

// check validates the flags that do not need the trace.
func (f *replayFlags) check(set map[string]bool) error {
	if f.trace == "" {
		return cli.UsageErr("--trace FILE is required (a Mooncake JSONL trace)")
	}
	if f.limit < 0 {
		return cli.UsageErr("--limit must not be negative")
	}
	switch f.progress {
	case "auto", "on", "off":
	default:
		return cli.UsageErr("--progress must be auto, on or off, not %q", f.progress)
	}
	if f.live && f.printCapacity {
		return cli.UsageErr("give --live or --print-capacity, not both")
	}
	var err error
	if f.live || f.printCapacity {
		err = f.checkScaled(set)
	} else {
		err = f.checkSimulate(set)
	}
	if err != nil {
		return err
	}
	if f.printCapacity {
		for _, n := range liveOnly {
			if set[n] {
				return cli.UsageErr("--%s is a --live flag; --print-capacity takes --trace, --limit, --capacity-frac and --scale", n)
			}
		}
	}
	if f.live {
		return f.checkLive()
	}
	return nil
}

// checkScaled checks the flags of --live and --print-capacity, which
// scale the trace to a real store.
func (f *replayFlags) checkScaled(set map[string]bool) error {
	for _, n := range simOnly {
		if set[n] {
			return cli.UsageErr("--%s is a simulate flag; it does not go with --live or --print-capacity", n)
		}
	}
	if !(f.capacityFrac > 0 && f.capacityFrac <= 1) {
		return cli.UsageErr("--capacity-frac %v out of range: want a fraction in (0, 1], e.g. 0.1", f.capacityFrac)
	}
	if f.scale < 1 || f.scale > live.ModelBlockBytes {
		return cli.UsageErr("--scale %d out of range 1..%d", f.scale, live.ModelBlockBytes)
	}
	return nil
}

// checkSimulate checks the flags of a simulation.
func (f *replayFlags) checkSimulate(set map[string]bool) error {
	for _, n := range append(slices.Clone(liveOnly), "scale", "capacity-frac") {
		if set[n] {
			return cli.UsageErr("--%s needs --live (or --print-capacity)", n)
		}
	}
	if f.workers < 1 {
		return cli.UsageErr("--workers must be at least 1")
	}
	if f.plotOut != "" {
		if _, err := plot.Format(f.plotOut); err != nil {
			return cli.UsageErr("--plot: want a .svg, .png or .pdf file name, got %q", f.plotOut)
		}
	}
	if _, err := f.policyList(); err != nil {
		return err
	}
	if _, err := parseCapacities(f.capacities); err != nil {
		return err
	}
	if _, err := policy.CostModelByName(f.costModel); err != nil {
		return cli.UsageErr("--cost-model: unknown model %q (known: %s)", f.costModel, strings.Join(policy.CostModels(), ", "))
	}
	return f.checkFlash(set)
}

// checkFlash checks the flags of the two-tier simulation.
func (f *replayFlags) checkFlash(set map[string]bool) error {
	if f.flashCaps == "" {
		for _, n := range []string{"flash-segment", "flash-reclaim"} {
			if set[n] {
				return cli.UsageErr("--%s needs --flash-capacities", n)
			}
		}
		return nil
	}
	if _, err := parsePercents("flash-capacities", f.flashCaps); err != nil {
		return err
	}
	if f.flashSegment < 1 {
		return cli.UsageErr("--flash-segment must be at least 1 block")
	}
	_, err := f.reclaimList()
	return err
}

// reclaimList returns --flash-reclaim's orders, in ReclaimOrders' order.
func (f *replayFlags) reclaimList() ([]string, error) {
	known := replay.ReclaimOrders()
	want := map[string]bool{}
	for _, o := range strings.Split(f.flashReclaim, ",") {
		o = strings.TrimSpace(o)
		if o == "" {
			continue
		}
		if !slices.Contains(known, o) {
			return nil, cli.UsageErr("--flash-reclaim: unknown order %q (known: %s)", o, strings.Join(known, ", "))
		}
		want[o] = true
	}
	var out []string
	for _, o := range known {
		if want[o] {
			out = append(out, o)
		}
	}
	if len(out) == 0 {
		return nil, cli.UsageErr("--flash-reclaim names no order")
	}
	return out, nil
}

// checkLive checks the flags of --live.
func (f *replayFlags) checkLive() error {
	if f.speedup < 0 || math.IsNaN(f.speedup) || math.IsInf(f.speedup, 0) {
		return cli.UsageErr("--speedup must be a number >= 0 (0: as fast as possible)")
	}
	if f.conns < 1 || f.conns > 1024 {
		return cli.UsageErr("--conns %d out of range 1..1024", f.conns)
	}
	if f.leaseTTL < 0 {
		return cli.UsageErr("--lease-ttl must not be negative")
	}
	if !slices.Contains(replay.Policies(), f.simPolicy) {
		return cli.UsageErr("--sim-policy: unknown policy %q (known: %s)", f.simPolicy, strings.Join(replay.Policies(), ", "))
	}
	return nil
}

// policyList returns --policies, or every policy when it is empty.
func (f *replayFlags) policyList() ([]string, error) {
	known := replay.Policies()
	if strings.TrimSpace(f.policies) == "" || f.policies == "all" {
		return known, nil
	}
	var out []string
	for _, p := range strings.Split(f.policies, ",") {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		if !slices.Contains(known, p) {
			return nil, cli.UsageErr("--policies: unknown policy %q (known: %s)", p, strings.Join(known, ", "))
		}
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	if len(out) == 0 {
		return nil, cli.UsageErr("--policies names no policy")
	}
	return out, nil
}

// parseCapacities parses --capacities.
func parseCapacities(s string) ([]float64, error) { return parsePercents("capacities", s) }

// parsePercents parses the percentages in (0, 100] of flag --name, sorted,
// without repeats.
func parsePercents(name, s string) ([]float64, error) {
	var out []float64
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSuffix(strings.TrimSpace(f), "%")
		if f == "" {
			continue
		}
		v, err := strconv.ParseFloat(f, 64)
		if err != nil {
			return nil, cli.UsageErr("--%s: %q is not a percentage", name, f)
		}
		if !(v > 0 && v <= 100) {
			return nil, cli.UsageErr("--%s: capacity %v%% out of range (0, 100]", name, v)
		}
		if !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	if len(out) == 0 {
		return nil, cli.UsageErr("--%s names no capacity", name)
	}
	slices.Sort(out)
	return out, nil
}

func readTraceFile(path string, limit int) ([]replay.Request, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, cli.UsageErr("--trace: %v", err)
	}
	defer f.Close()
	reqs, err := replay.ReadTrace(f, limit)
	if err != nil {
		return nil, fmt.Errorf("trace %s: %w", path, err)
	}
	if len(reqs) == 0 {
		return nil, fmt.Errorf("trace %s holds no requests", path)
	}
	return reqs, nil
}

// traceMeta describes the replayed trace in the JSON output.
type traceMeta struct {
	File         string `json:"file"`
	Limit        int    `json:"limit,omitempty"`
	Requests     int    `json:"requests"`
	UniqueBlocks int    `json:"unique_blocks"`
	Blocks       int64  `json:"blocks"` // block accesses
}

func (m traceMeta) String() string {
	return fmt.Sprintf("%s: %d requests, %d unique blocks, %d block accesses", filepath.Base(m.File), m.Requests, m.UniqueBlocks, m.Blocks)
}

// simJSON is the simulate mode's JSON output.
type simJSON struct {
	Trace   traceMeta            `json:"trace"`
	Results []replay.Result      `json:"results"`
	Flash   []replay.FlashResult `json:"flash,omitempty"` // with --flash-capacities
}

func (f *replayFlags) runSimulate(reqs []replay.Request, meta traceMeta, showProgress bool, std cli.Stdio) error {
	policies, _ := f.policyList()
	caps, _ := parseCapacities(f.capacities)
	model, _ := policy.CostModelByName(f.costModel)
	type job struct {
		policy string
		frac   float64
	}
	var jobs []job
	for _, c := range caps {
		for _, p := range policies {
			jobs = append(jobs, job{p, c / 100})
		}
	}
	fjobs, fcaps, reclaims, err := f.flashJobs(policies, caps, meta.UniqueBlocks)
	if err != nil {
		return err
	}
	runs := len(jobs) + len(fjobs)
	results := make([]replay.Result, len(jobs))
	flash := make([]replay.FlashResult, len(fjobs))
	errs := make([]error, runs)
	bar := startProgress(std.Err, showProgress, fmt.Sprintf("simulating %d runs", runs), int64(runs)*int64(len(reqs)))
	start := time.Now()
	next := atomic.Int64{}
	var wg sync.WaitGroup
	for range min(f.workers, runs) {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= runs {
					return
				}
				last := 0
				progress := func(done int) {
					bar.Add(int64(done - last))
					last = done
				}
				if i < len(jobs) {
					results[i], errs[i] = replay.SimulateModel(reqs, jobs[i].policy, jobs[i].frac, model, progress)
				} else {
					k := i - len(jobs)
					flash[k], errs[i] = replay.SimulateFlash(reqs, fjobs[k].policy, fjobs[k].cfg, progress)
				}
				bar.Add(int64(len(reqs) - last))
			}
		})
	}
	wg.Wait()
	bar.Stop()
	elapsed := time.Since(start)
	if err := errors.Join(errs...); err != nil {
		return err
	}

	w := std.Out
	fmt.Fprintf(w, "trace %s\n", meta)
	if len(fjobs) == 0 {
		fmt.Fprintf(w, "simulated %d policies × %d capacities in %.1fs (%d workers)\n\n", len(policies), len(caps), elapsed.Seconds(), min(f.workers, runs))
	} else {
		fmt.Fprintf(w, "simulated %d policies × %d capacities, and each × %d flash capacities × %d reclaim orders, in %.1fs (%d workers)\n\n",
			len(policies), len(caps), len(fcaps), len(reclaims), elapsed.Seconds(), min(f.workers, runs))
	}
	at := func(ci, pi int) replay.Result { return results[ci*len(policies)+pi] }
	table := func(title string, cell func(r replay.Result) string) {
		fmt.Fprintln(w, title)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprint(tw, "capacity\tblocks\t")
		for _, p := range policies {
			fmt.Fprintf(tw, "%s\t", p)
		}
		fmt.Fprintln(tw)
		for ci, c := range caps {
			fmt.Fprintf(tw, "%s%%\t%d\t", strconv.FormatFloat(c, 'g', -1, 64), at(ci, 0).Capacity)
			for pi := range policies {
				fmt.Fprintf(tw, "%s\t", cell(at(ci, pi)))
			}
			fmt.Fprintln(tw)
		}
		tw.Flush()
		fmt.Fprintln(w)
	}
	table("prefix-hit ratio (leading-run hits / block accesses)", func(r replay.Result) string { return fmt.Sprintf("%.4f", r.HitRatio) })
	prompt := results[0].PromptTokens
	table(fmt.Sprintf("prefill tokens saved, %% of %d prompt tokens", prompt), func(r replay.Result) string {
		if r.PromptTokens == 0 {
			return "-"
		}
		return fmt.Sprintf("%.2f%%", 100*float64(r.SavedTokens)/float64(r.PromptTokens))
	})
	table("compute saved, % of prefill attention work (a block at position p costs ∝ its attention span)", func(r replay.Result) string {
		return fmt.Sprintf("%.2f%%", 100*r.ComputeSaved)
	})
	table(fmt.Sprintf("compute saved, %% of prefill FLOPs under %s (2 × parameters per token, plus attention over its context)", model.Name), func(r replay.Result) string {
		return fmt.Sprintf("%.2f%%", 100*r.ModelComputeSaved)
	})
	if len(flash) > 0 {
		printFlash(w, f.flashSegment, flash)
	}

	if f.jsonOut != "" {
		if err := writeJSON(f.jsonOut, simJSON{Trace: meta, Results: results, Flash: flash}); err != nil {
			return err
		}
		fmt.Fprintf(std.Err, "wrote %s\n", f.jsonOut)
	}
	if f.plotOut != "" {
		opt := plot.Options{Subtitle: fmt.Sprintf("%s (%d requests, %d unique blocks)", filepath.Base(meta.File), meta.Requests, meta.UniqueBlocks)}
		if err := plot.WriteFile(f.plotOut, results, opt); err != nil {
			return err
		}
		fmt.Fprintf(std.Err, "wrote %s\n", f.plotOut)
	}
	return nil
}

// flashJob is one two-tier simulation.
type flashJob struct {
	policy string
	cfg    replay.FlashConfig
}

// flashJobs returns the two-tier runs of --flash-capacities (none without
// it), by policy, DRAM capacity, flash capacity and reclaim order, and the
// flash capacities and reclaim orders. A flash capacity must hold a whole
// segment of the trace's unique blocks.
func (f *replayFlags) flashJobs(policies []string, caps []float64, unique int) ([]flashJob, []float64, []string, error) {
	if f.flashCaps == "" {
		return nil, nil, nil, nil
	}
	fcaps, err := parsePercents("flash-capacities", f.flashCaps)
	if err != nil {
		return nil, nil, nil, err
	}
	reclaims, err := f.reclaimList()
	if err != nil {
		return nil, nil, nil, err
	}
	for _, fc := range fcaps {
		if n := int(fc / 100 * float64(unique)); n < f.flashSegment {
			return nil, nil, nil, cli.UsageErr("--flash-capacities: %g%% of %d unique blocks is %d blocks, less than one segment (--flash-segment %d)",
				fc, unique, n, f.flashSegment)
		}
	}
	var jobs []flashJob
	for _, p := range policies {
		for _, c := range caps {
			for _, fc := range fcaps {
				for _, o := range reclaims {
					jobs = append(jobs, flashJob{p, replay.FlashConfig{DRAMFrac: c / 100, FlashFrac: fc / 100, SegmentBlocks: f.flashSegment, Reclaim: o}})
				}
			}
		}
	}
	return jobs, fcaps, reclaims, nil
}

// printFlash prints the two-tier runs' tables, a row per run.
func printFlash(w io.Writer, segment int, rs []replay.FlashResult) {
	fmt.Fprintf(w, "two tiers: DRAM (the policy, at --capacities) above flash (log-structured, %d-block segments reclaimed whole)\n", segment)
	fmt.Fprintf(w, "above cold (every block DRAM evicted); a flash record is live while its block is not in DRAM\n\n")
	table := func(title, cols string, cells func(r replay.FlashResult) string) {
		fmt.Fprintln(w, title)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintf(tw, "policy\tDRAM\tflash\tsegments\treclaim\t%s\t\n", cols)
		for _, r := range rs {
			fmt.Fprintf(tw, "%s\t%.6g%%\t%.6g%%\t%d\t%s\t%s\t\n", r.Policy, 100*r.DRAMFrac, 100*r.FlashFrac, r.Segments, r.Reclaim, cells(r))
		}
		tw.Flush()
		fmt.Fprintln(w)
	}
	tiers := func(cell func(h replay.TierHits) string) func(r replay.FlashResult) string {
		return func(r replay.FlashResult) string {
			return strings.Join([]string{cell(r.DRAM), cell(r.Flash), cell(r.Cold), cell(r.Local), cell(r.Total)}, "\t")
		}
	}
	const tierCols = "dram\tflash\tcold\tdram+flash\ttotal"
	table("hit ratio by tier (leading-run hits in any tier / block accesses)", tierCols,
		tiers(func(h replay.TierHits) string { return fmt.Sprintf("%.4f", h.HitRatio) }))
	table("compute saved by tier, % of prefill attention work", tierCols,
		tiers(func(h replay.TierHits) string { return fmt.Sprintf("%.2f%%", 100*h.ComputeSaved) }))
	table("flash and cold writes, blocks (cold: each block at most once; flash-only: under on-reclaim, at the end, on flash alone)",
		"flash writes\treclaims\tdropped live\tcold write-through\tcold on-reclaim\ton-reclaim/through\tflash-only",
		func(r replay.FlashResult) string {
			ratio := "-"
			if r.ColdWritesThrough > 0 {
				ratio = fmt.Sprintf("%.3f", float64(r.ColdWritesReclaim)/float64(r.ColdWritesThrough))
			}
			return fmt.Sprintf("%d\t%d\t%d\t%d\t%d\t%s\t%d", r.FlashWrites, r.FlashReclaims, r.FlashDroppedLive,
				r.ColdWritesThrough, r.ColdWritesReclaim, ratio, r.FlashOnly)
		})
}

func (f *replayFlags) runPrintCapacity(reqs []replay.Request, meta traceMeta, std cli.Stdio) error {
	sz, err := live.Size(reqs, f.capacityFrac, live.PayloadBytes(f.scale))
	if err != nil {
		return cli.UsageErr("%v", err)
	}
	w := std.Out
	fmt.Fprintf(w, "# live replay sizing: %s; capacity %v = %d blocks of %d bytes (scale %d)\n",
		meta, f.capacityFrac, sz.CapacityBlocks, sz.PayloadBytes, f.scale)
	fmt.Fprintf(w, "capacity_blocks=%d\n", sz.CapacityBlocks)
	fmt.Fprintf(w, "unique_blocks=%d\n", sz.UniqueBlocks)
	fmt.Fprintf(w, "payload_bytes=%d\n", sz.PayloadBytes)
	fmt.Fprintf(w, "hot_capacity=%d\n", sz.CapacityBytes)
	fmt.Fprintf(w, "hot_min_class=%d\n", sz.SlotBytes)
	fmt.Fprintf(w, "hot_max_class=%d\n", sz.SlotBytes)
	fmt.Fprintf(w, "hot_slab=%d\n", sz.SlabBytes)
	fmt.Fprintf(w, "gpucached_flags='--hot-capacity %d --hot-min-class %d --hot-max-class %d --hot-slab %d'\n",
		sz.CapacityBytes, sz.SlotBytes, sz.SlotBytes, sz.SlabBytes)
	return nil
}

// liveJSON is the live mode's JSON output.
type liveJSON struct {
	Trace      traceMeta   `json:"trace"`
	PolicyName string      `json:"policy_name,omitempty"`
	Scale      int         `json:"scale"`
	Live       live.Report `json:"live"`
}

func (f *replayFlags) runLive(ctx context.Context, reqs []replay.Request, meta traceMeta, showProgress bool, std cli.Stdio) error {
	if f.common.Timeout() <= 0 {
		return cli.UsageErr("--timeout must be positive")
	}
	secret, tc, err := f.common.Credentials()
	if err != nil {
		return err
	}
	tenant, err := f.common.SessionTenant(ctx)
	if err != nil {
		return err
	}
	bar := startProgress(std.Err, showProgress, fmt.Sprintf("replaying %d requests", len(reqs)), int64(len(reqs)))
	var last atomic.Int64
	rep, err := live.Run(ctx, live.Config{
		Client: client.Config{Addr: f.common.Addr(), Tenant: tenant, Secret: secret, TLS: tc, Conns: f.conns,
			DialTimeout: f.common.Timeout(), RequestTimeout: f.common.Timeout(), ClientName: "gpucache-replay"},
		Requests: reqs, PayloadBytes: live.PayloadBytes(f.scale), Speedup: f.speedup, Workers: f.conns,
		CapacityFrac: f.capacityFrac, SimPolicy: f.simPolicy, LeaseTTL: f.leaseTTL,
		Progress: func(done int) {
			// Calls come from several workers: add only what is new.
			for {
				l := last.Load()
				if int64(done) <= l {
					return
				}
				if last.CompareAndSwap(l, int64(done)) {
					bar.Add(int64(done) - l)
					return
				}
			}
		},
	})
	bar.Stop()
	if err != nil {
		return err
	}
	printLive(std.Out, f, meta, rep)
	if f.jsonOut != "" {
		if err := writeJSON(f.jsonOut, liveJSON{Trace: meta, PolicyName: f.policyName, Scale: f.scale, Live: rep}); err != nil {
			return err
		}
		fmt.Fprintf(std.Err, "wrote %s\n", f.jsonOut)
	}
	switch {
	case rep.WrongPayloads > 0:
		return fmt.Errorf("%d hits returned bytes other than those stored", rep.WrongPayloads)
	case rep.Failed > 0:
		return fmt.Errorf("%d of %d requests failed; first: %s", rep.Failed, rep.Requests, rep.FirstErr)
	}
	return nil
}

func printLive(w io.Writer, f *replayFlags, meta traceMeta, rep live.Report) {
	pol := f.policyName
	if pol == "" {
		pol = "(not given)"
	}
	gib := func(n int64) float64 { return float64(n) / (1 << 30) }
	fmt.Fprintf(w, "live replay of %s against %s, daemon policy %s\n", meta, rep.Addr, pol)
	speed := "as fast as possible"
	if rep.Speedup > 0 {
		speed = fmt.Sprintf("arrival times / %g", rep.Speedup)
	}
	inFlight := "requests"
	if rep.Workers == 1 {
		inFlight = "request"
	}
	fmt.Fprintf(w, "  payload %d bytes per block (scale %d), %d %s in flight, %s\n", rep.PayloadBytes, f.scale, rep.Workers, inFlight, speed)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	if sz := rep.Sizing; sz != nil {
		fmt.Fprintf(tw, "  capacity\t%g%% of %d unique blocks = %d blocks = %d bytes (--hot-capacity)\n", 100*sz.CapacityFrac, sz.UniqueBlocks, sz.CapacityBlocks, sz.CapacityBytes)
	}
	fmt.Fprintf(tw, "  blocks\t%d accessed, %d hits read back (lookup hits %d, GET misses %d)\n", rep.Blocks, rep.HitBlocks, rep.LookupHits, rep.GetMisses)
	if rep.Sim != nil {
		fmt.Fprintf(tw, "  hit ratio\t%.4f   simulator (%s, %d blocks) %.4f   difference %+.4f\n", rep.HitRatio, rep.Sim.Policy, rep.Sim.Capacity, rep.Sim.HitRatio, rep.HitRatioDiff)
	} else {
		fmt.Fprintf(tw, "  hit ratio\t%.4f\n", rep.HitRatio)
	}
	if rep.PromptTokens > 0 {
		fmt.Fprintf(tw, "  prefill saved\t%d of %d prompt tokens (%.2f%%)\n", rep.SavedTokens, rep.PromptTokens, 100*float64(rep.SavedTokens)/float64(rep.PromptTokens))
	}
	fmt.Fprintf(tw, "  payloads\t%d wrong\n", rep.WrongPayloads)
	fmt.Fprintf(tw, "  puts\t%d stored, %d already cached (touched), %d refused\n", rep.PutStored, rep.PutExists, rep.PutRefused)
	fmt.Fprintf(tw, "  throughput\t%.1f requests/s, %.3f GiB/s (%.2f GiB read, %.2f GiB written) in %.2fs\n",
		rep.RequestsPerS, rep.GiBPerS, gib(rep.BytesRead), gib(rep.BytesWritten), rep.Seconds)
	l := rep.Latency
	fmt.Fprintf(tw, "  latency\tp50 %.2f ms  p90 %.2f ms  p99 %.2f ms  max %.2f ms (per request: lookup + get + put)\n", l.P50, l.P90, l.P99, l.Max)
	if rep.Speedup > 0 {
		fmt.Fprintf(tw, "  schedule\tthe latest request started %.1f ms after its arrival time\n", rep.MaxLagMS)
	}
	if rep.Failed > 0 {
		fmt.Fprintf(tw, "  failed\t%d requests; first: %s\n", rep.Failed, rep.FirstErr)
	}
	if s := rep.Server; s != nil {
		fmt.Fprintf(tw, "  server\t%d blocks cached, %d evictions, capacity %d bytes\n", s["hot_blocks"], s["hot_evictions"], s["hot_capacity_bytes"])
	}
	tw.Flush()
	if sz, s := rep.Sizing, rep.Server; sz != nil && s != nil {
		if c, ok := s["hot_capacity_bytes"]; ok && c != uint64(sz.CapacityBytes) {
			fmt.Fprintf(w, "warning: the daemon's hot capacity is %d bytes, not the %d this replay's capacity needs: the hit ratios are not comparable (see gpucache-bench replay --print-capacity)\n", c, sz.CapacityBytes)
		}
	}
	if rep.ServerBlocksBefore > 0 {
		fmt.Fprintf(w, "warning: the daemon held %d blocks before the replay: start it empty for comparable hit ratios\n", rep.ServerBlocksBefore)
	}
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// progressBar is a textual bar on stderr, redrawn in place with \r. A nil
// bar (progress off) ignores every call.
type progressBar struct {
	w     io.Writer
	label string
	total int64
	done  atomic.Int64
	start time.Time
	stop  chan struct{}
	ended chan struct{}
}

// progressTick is how often the bar is redrawn.
const progressTick = 200 * time.Millisecond

func startProgress(w io.Writer, on bool, label string, total int64) *progressBar {
	if !on || total <= 0 {
		return nil
	}
	p := &progressBar{w: w, label: label, total: total, start: time.Now(), stop: make(chan struct{}), ended: make(chan struct{})}
	go func() {
		defer close(p.ended)
		t := time.NewTicker(progressTick)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				p.draw(false)
			case <-p.stop:
				p.draw(true)
				return
			}
		}
	}()
	return p
}

// Add counts n more units done.
func (p *progressBar) Add(n int64) {
	if p != nil && n > 0 {
		p.done.Add(n)
	}
}

// Stop draws the final state, ends the line and stops the redraws.
func (p *progressBar) Stop() {
	if p == nil {
		return
	}
	close(p.stop)
	<-p.ended
}

const barWidth = 30

func (p *progressBar) draw(final bool) {
	done := min(p.done.Load(), p.total)
	frac := float64(done) / float64(p.total)
	n := int(frac * barWidth)
	bar := strings.Repeat("#", n) + strings.Repeat(".", barWidth-n)
	end := ""
	if final {
		end = "\n"
	}
	fmt.Fprintf(p.w, "\r%s [%s] %5.1f%% %.1fs%s", p.label, bar, 100*frac, time.Since(p.start).Seconds(), end)
}
