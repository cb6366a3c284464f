package benchcli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/gpucache/gpucache/internal/cli"
	"github.com/gpucache/gpucache/tools/internal/replay"
	"github.com/gpucache/gpucache/tools/internal/workload"
)

const genTraceSynopsis = `gen-trace --shape SHAPE --requests N --seed S --out FILE [flags]

Writes a synthetic Mooncake-format trace (JSONL: timestamp, input_length,
output_length, hash_ids of 512-token blocks) that 'gpucache-bench replay
--trace FILE' reads. Shapes: chat (multi-turn, think times, abandonment),
system (popular shared system prompts), agent (tool loops on a long
prefix), rag (Zipf-popular documents after a system prompt, order
matters), oneshot (no reuse), mix (--mix weights). The same flags and
seed write the same bytes. --print-config prints the full scenario as
JSON; edit it and pass it back with --config. Prints the trace's
statistics (requests, unique blocks, accesses, the infinite cache's
prefix-hit ratio and compute saved) on stdout, or stderr with --out -.`

// runGenTrace is `gpucache-bench gen-trace`.
func runGenTrace(_ context.Context, args []string, std cli.Stdio) error {
	fs := newFlagSet("gen-trace", genTraceSynopsis, std.Out)
	shape := fs.String("shape", "chat", "`shape`: "+shapeNames())
	requests := fs.Int("requests", 10000, "requests to write")
	seed := fs.Uint64("seed", 1, "random seed")
	out := fs.String("out", "", "output `file` (- for stdout; required unless --print-config)")
	arrival := fs.String("arrival", "poisson", "session arrivals: poisson, diurnal or bursty")
	rate := fs.Float64("rate", 0, "mean sessions per second (default: the shape's)")
	mix := fs.String("mix", "", "mix weights, e.g. chat=4,system=2,agent=2,rag=1,oneshot=1")
	config := fs.String("config", "", "JSON scenario `file` (see --print-config); flags given override it")
	printConfig := fs.Bool("print-config", false, "print the scenario as JSON and exit")
	if err := cli.ParseNoArgs(fs, args); err != nil {
		return err
	}
	set := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })

	cfg, err := genTraceConfig(set, *config, workload.Shape(*shape))
	if err != nil {
		return err
	}
	if set["requests"] {
		cfg.Requests = *requests
	}
	if set["seed"] {
		cfg.Seed = *seed
	}
	if set["arrival"] {
		cfg.Arrival.Pattern = *arrival
	}
	if set["rate"] {
		cfg.Arrival.Rate = *rate
	}
	if set["mix"] {
		if cfg.Mix, err = parseMix(*mix); err != nil {
			return err
		}
	}
	if err := cfg.Validate(); err != nil {
		return cli.UsageErr("%v", err)
	}
	if *printConfig {
		b, err := json.MarshalIndent(cfg, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(std.Out, "%s\n", b)
		return err
	}
	if *out == "" {
		return cli.UsageErr("--out is required")
	}
	return emitTrace(std, *out, cfg)
}

// emitTrace writes cfg's trace to out (a file, or stdout for "-") and its
// statistics to stdout, or to stderr when the trace goes to stdout.
func emitTrace(std cli.Stdio, out string, cfg workload.Config) error {
	w, statsTo := std.Out, std.Err
	var f *os.File
	var err error
	if out != "-" {
		if f, err = os.Create(out); err != nil {
			return err
		}
		defer f.Close()
		w, statsTo = f, std.Out
	}
	st, err := writeTrace(w, cfg)
	if err != nil {
		return err
	}
	if f != nil {
		if err := f.Close(); err != nil {
			return err
		}
	}
	fmt.Fprintf(statsTo, "shape=%s seed=%d requests=%d unique_blocks=%d accesses=%d prompt_tokens=%d duration_s=%.0f max_hit_ratio=%.4f max_compute_saved=%.4f\n",
		cfg.Shape, cfg.Seed, st.Requests, st.UniqueBlocks, st.Accesses, st.PromptTokens,
		float64(st.DurationMs)/1000, st.MaxHitRatio, st.MaxComputeSaved)
	return nil
}

// genTraceConfig is the scenario before the flag overrides: --config's
// file, or the default of --shape.
func genTraceConfig(set map[string]bool, path string, shape workload.Shape) (workload.Config, error) {
	if path == "" {
		if !slices.Contains(workload.Shapes(), shape) {
			return workload.Config{}, cli.UsageErr("--shape %q is not one of %s", shape, shapeNames())
		}
		return workload.Default(shape), nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return workload.Config{}, err
	}
	cfg, err := workload.ParseConfig(b)
	if err != nil {
		return workload.Config{}, cli.UsageErr("--config %s: %v", path, err)
	}
	if set["shape"] && shape != cfg.Shape {
		return workload.Config{}, cli.UsageErr("--shape %s contradicts --config's shape %s", shape, cfg.Shape)
	}
	return cfg, nil
}

// writeTrace writes cfg's trace to w as JSONL and returns its statistics.
func writeTrace(w io.Writer, cfg workload.Config) (workload.Stats, error) {
	bw := bufio.NewWriterSize(w, 1<<20)
	cnt := workload.NewCounter()
	var line []byte
	err := workload.Run(cfg, func(r *replay.Request) error {
		cnt.Add(r)
		line = workload.AppendJSONL(line[:0], r)
		_, err := bw.Write(line)
		return err
	})
	if err == nil {
		err = bw.Flush()
	}
	return cnt.Stats(), err
}

// parseMix parses "chat=4,agent=2".
func parseMix(s string) ([]workload.Weight, error) {
	var ws []workload.Weight
	for part := range strings.SplitSeq(s, ",") {
		name, val, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return nil, cli.UsageErr("--mix: %q is not shape=weight", part)
		}
		x, err := strconv.ParseFloat(val, 64)
		if err != nil {
			return nil, cli.UsageErr("--mix: weight of %s: %v", name, errors.Unwrap(err))
		}
		ws = append(ws, workload.Weight{Shape: workload.Shape(name), Weight: x})
	}
	return ws, nil
}

func shapeNames() string {
	var s []string
	for _, sh := range workload.Shapes() {
		s = append(s, string(sh))
	}
	return strings.Join(s, ", ")
}
