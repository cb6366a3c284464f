package benchcli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime/pprof"
	"time"

	"github.com/gpucache/gpucache/internal/cli"
	"github.com/gpucache/gpucache/tools/internal/bench"
)

func runBench(ctx context.Context, args []string, std cli.Stdio) error {
	var common cli.ConnFlags
	var nsf cli.NSFlags
	fs := newFlagSet("bench", "bench [flags]", std.Out)
	common.Register(fs)
	nsf.Register(fs, "bench")
	op := fs.String("op", "both", "operation: get, put or both")
	sizes := fs.String("sizes", "64KiB,256KiB,1MiB", "comma-separated payload `sizes`")
	conns := fs.String("conns", "1,8,32", "comma-separated worker counts; each worker has its own connection")
	batch := fs.Int("batch", 1, "keys per GET/PUT request")
	pipeline := fs.Int("pipeline", 1, "requests in flight per worker")
	duration := fs.Duration("duration", 5*time.Second, "measured time per case")
	requests := fs.Int("requests", 0, "end each case after this many requests instead of --duration")
	keys := fs.Int("keys", 256, "working set per size, written before the GET cases")
	jsonOut := fs.String("json", "", "write machine-readable results to `file`")
	warmup := fs.Duration("warmup", 0, "unmeasured warm-up per case")
	hold := fs.String("hold-bytes", "0", "fill the server with this many bytes of blocks first (e.g. 4GiB)")
	holdBlock := fs.String("hold-block", "1MiB", "block size for --hold-bytes")
	region := fs.Bool("region", false, "put GET buffers and PUT payloads in a registered region (with --addr unix:PATH: one copy, no payload on the socket)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the client's whole run (populating the working set included) to `file`")
	err := cli.ParseNoArgs(fs, args)
	if err != nil {
		return err
	}
	tenant, err := common.SessionTenant(ctx)
	if err != nil {
		return err
	}
	cfg := bench.Config{Addr: common.Addr(), Cluster: common.Seeds(), Tenant: tenant, Batch: *batch, Pipeline: *pipeline,
		Duration: *duration, Requests: *requests, Keys: *keys, Warmup: *warmup, RequestTimeout: common.Timeout(), Region: *region}
	if cfg.Secret, cfg.TLS, err = common.Credentials(); err != nil {
		return err
	}
	if cfg.Namespace, err = nsf.Namespace(tenant); err != nil {
		return err
	}
	if err := parseBenchLists(&cfg, *op, *sizes, *conns, *hold, *holdBlock); err != nil {
		return err
	}
	if *duration <= 0 && *requests == 0 {
		return cli.UsageErr("--duration must be positive (or give --requests)")
	}

	stopProfile, err := startCPUProfile(*cpuProfile)
	if err != nil {
		return err
	}
	rep, runErr := bench.Run(ctx, cfg, bench.Output{Progress: std.Err, TTY: cli.IsTerminal(std.Err)})
	if err := stopProfile(); err != nil {
		return err
	}
	if errors.Is(runErr, bench.ErrConfig) {
		return cli.UsageErr("%v", runErr)
	}
	if rep == nil {
		return runErr
	}
	if err := rep.WriteTable(std.Out); err != nil {
		return err
	}
	if *jsonOut != "" {
		if err := writeJSONFile(*jsonOut, rep.WriteJSON); err != nil {
			return err
		}
	}
	if runErr != nil {
		return runErr
	}
	return corruptReplies(rep)
}

// startCPUProfile starts a CPU profile into path ("" profiles nothing)
// and returns the function that stops it and closes the file.
func startCPUProfile(path string) (stop func() error, err error) {
	if path == "" {
		return func() error { return nil }, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	return func() error {
		pprof.StopCPUProfile()
		return f.Close()
	}, nil
}

// corruptReplies reports the corrupt replies of rep's cases, if any.
func corruptReplies(rep *bench.Report) error {
	var corrupt uint64
	for _, c := range rep.Cases {
		corrupt += c.Corrupt
	}
	if corrupt > 0 {
		return fmt.Errorf("%d corrupt replies", corrupt)
	}
	return nil
}

// parseBenchLists parses the --op, --sizes, --conns, --hold-bytes and
// --hold-block flags into cfg.
func parseBenchLists(cfg *bench.Config, op, sizes, conns, hold, holdBlock string) error {
	var err error
	if cfg.Ops, err = bench.ParseOps(op); err != nil {
		return cli.UsageErr("--op: %v", err)
	}
	if cfg.Sizes, err = bench.ParseSizes(sizes); err != nil {
		return cli.UsageErr("--sizes: %v", err)
	}
	if cfg.Conns, err = bench.ParseInts(conns); err != nil {
		return cli.UsageErr("--conns: %v", err)
	}
	if cfg.HoldBytes, err = bench.ParseSize(hold); err != nil {
		return cli.UsageErr("--hold-bytes: %v", err)
	}
	hb, err := bench.ParseSize(holdBlock)
	if err != nil || hb > 1<<31 {
		return cli.UsageErr("--hold-block: bad size %q", holdBlock)
	}
	cfg.HoldBlock = int(hb)
	return nil
}
