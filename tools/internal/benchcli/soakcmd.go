package benchcli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/gpucache/gpucache/internal/cli"
	"github.com/gpucache/gpucache/tools/internal/bench"
	"github.com/gpucache/gpucache/tools/internal/soak"
)

// soakFlags are the flags of `gpucache-bench soak`.
type soakFlags struct {
	duration, opTimeout, slack     time.Duration
	warmup, hold, recover          time.Duration
	settle, sampleEvery, heapEvery time.Duration
	driftAfter                     time.Duration
	reclaimGrace, reclaimInterval  time.Duration
	ops                            int64
	workers, cycles                int
	rate, scanShare                float64
	minPayload, maxPayload         string
	chainBlocks                    int
	hotChains, scanChains          int
	faults                         string
	gpucached, versitygw, dir      string
	keepData                       bool
	netns, tmpfs                   string
	tmpfsSize, hotCapacity         string
	seed                           uint64
	quiet                          bool
}

func (f *soakFlags) register(fs *flag.FlagSet) {
	d := soak.Default()
	fs.DurationVar(&f.duration, "duration", d.Duration, "how long the load runs (at most 72h); the fault in progress then finishes")
	fs.Int64Var(&f.ops, "ops", 0, "also stop once this many client calls have been checked (0: --duration only)")
	fs.IntVar(&f.cycles, "cycles", 0, "also stop after this many cycles of --faults (0: --duration only)")
	fs.IntVar(&f.workers, "workers", d.Workers, "load goroutines")
	fs.Float64Var(&f.rate, "rate", 0, "cap on operations per second across workers (0: unpaced)")
	fs.DurationVar(&f.opTimeout, "op-timeout", d.OpTimeout, "deadline of each client call")
	fs.DurationVar(&f.slack, "overrun-slack", d.OverrunSlack, "how far past its deadline a call may return")
	fs.StringVar(&f.minPayload, "min-payload", "4KiB", "smallest block `size`")
	fs.StringVar(&f.maxPayload, "max-payload", "16KiB", "largest block `size`")
	fs.IntVar(&f.chainBlocks, "chain-blocks", d.ChainBlocks, "blocks per chain")
	fs.IntVar(&f.hotChains, "hot-chains", d.HotChains, "hot chains per tenant (read often; fit in DRAM)")
	fs.IntVar(&f.scanChains, "scan-chains", d.ScanChains, "scan chains per tenant (overflow DRAM: write-behind and refill)")
	fs.Float64Var(&f.scanShare, "scan-share", d.ScanShare, "share of operations on scan chains")
	fs.StringVar(&f.faults, "faults", "all", "comma-separated faults of one cycle, in order (all, none, or of: kill9, etcd, s3, full_disk, partition, fp_s3_unavailable, fp_s3_slow, fp_control_plane_loss, fp_storage_loss, fp_nvme_timeout)")
	fs.DurationVar(&f.warmup, "warmup", d.Schedule.Warmup, "load before the first fault")
	fs.DurationVar(&f.hold, "hold", d.Schedule.Hold, "how long each fault lasts")
	fs.DurationVar(&f.recover, "recover", d.Schedule.Recover, "bound on each fault's recovery after its heal")
	fs.DurationVar(&f.settle, "settle", d.Schedule.Settle, "load after each recovery, before the next fault")
	fs.DurationVar(&f.sampleEvery, "sample-every", d.SampleEvery, "period of the RSS samples")
	fs.DurationVar(&f.heapEvery, "heap-every", 0, "save every node's heap profile into <dir>/heap/ at this period (0: never)")
	fs.DurationVar(&f.driftAfter, "drift-after", 0, "start the drift check at the first phase of cycle 2 or later that begins this long after the load started (0: cycle 2)")
	fs.DurationVar(&f.reclaimGrace, "reclaim-grace", 0, "every node's cold_reclaim_grace (0: the node's default, 24h; else at least 10m)")
	fs.DurationVar(&f.reclaimInterval, "reclaim-interval", 0, "every node's cold_reclaim_interval (0: the node's default, 1h)")
	fs.StringVar(&f.gpucached, "gpucached", "", "the gpucached `binary` (default: gpucached beside this binary, then in PATH)")
	fs.StringVar(&f.versitygw, "versitygw", "", "the versitygw `binary` (default: $GPUCACHE_VERSITYGW, .cache/bin/versitygw of the module, then PATH)")
	fs.StringVar(&f.dir, "dir", "", "work `directory` for configs, logs, data and the report (default ./gpucache-soak-<time>)")
	fs.BoolVar(&f.keepData, "keep-data", false, "keep the S3, etcd and cold-disk data and the run's secrets after the run (logs and the report are always kept)")
	fs.StringVar(&f.netns, "netns", d.Netns, "run n2 in a network namespace for the partition: auto (when root) or off")
	fs.StringVar(&f.tmpfs, "tmpfs", d.Tmpfs, "mount a tmpfs for the open node's cold tier (full disk): auto (when root) or off")
	fs.StringVar(&f.tmpfsSize, "tmpfs-size", "64MiB", "the tmpfs's `size`")
	fs.StringVar(&f.hotCapacity, "hot-capacity", "32MiB", "each node's hot_capacity")
	fs.Uint64Var(&f.seed, "seed", d.Seed, "seed of the workers' random streams")
	fs.BoolVar(&f.quiet, "quiet", false, "no progress lines on stderr")
}

func (f *soakFlags) config() (soak.Config, error) {
	cfg := soak.Config{Duration: f.duration, Ops: f.ops, Workers: f.workers, Rate: f.rate, OpTimeout: f.opTimeout,
		OverrunSlack: f.slack, ChainBlocks: f.chainBlocks, HotChains: f.hotChains, ScanChains: f.scanChains, ScanShare: f.scanShare,
		Schedule:    soak.Schedule{Warmup: f.warmup, Hold: f.hold, Recover: f.recover, Settle: f.settle, Cycles: f.cycles},
		SampleEvery: f.sampleEvery, HeapEvery: f.heapEvery, Netns: f.netns, Tmpfs: f.tmpfs, Seed: f.seed,
		DriftAfter: f.driftAfter, ReclaimGrace: f.reclaimGrace, ReclaimInterval: f.reclaimInterval}
	sizes := []struct {
		name string
		s    string
		dst  *int64
	}{{"min-payload", f.minPayload, nil}, {"max-payload", f.maxPayload, nil}, {"tmpfs-size", f.tmpfsSize, &cfg.TmpfsSize}, {"hot-capacity", f.hotCapacity, &cfg.HotCapacity}}
	for i, sz := range sizes {
		n, err := bench.ParseSize(sz.s)
		if err != nil || n <= 0 {
			return cfg, cli.UsageErr("--%s: bad size %q", sz.name, sz.s)
		}
		switch i {
		case 0:
			cfg.MinPayload = int(min(n, 1<<30))
		case 1:
			cfg.MaxPayload = int(min(n, 1<<30))
		default:
			*sz.dst = n
		}
	}
	var err error
	if cfg.Schedule.Faults, err = soak.ParseFaults(f.faults); err != nil {
		return cfg, cli.UsageErr("--faults: %v", err)
	}
	if cfg.Gpucached, err = findBinary(f.gpucached, "gpucached", ""); err != nil {
		return cfg, cli.UsageErr("--gpucached: %v", err)
	}
	if cfg.Versitygw, err = findBinary(f.versitygw, "versitygw", os.Getenv("GPUCACHE_VERSITYGW")); err != nil {
		return cfg, cli.UsageErr("--versitygw: %v (build it with scripts/s3-server install)", err)
	}
	self, err := os.Executable()
	if err != nil {
		return cfg, err
	}
	cfg.Helper = []string{self, "soak"}
	return cfg, nil
}

// findBinary returns flagVal if set, else env, else name beside this
// executable, in the module's .cache/bin, or in PATH.
func findBinary(flagVal, name, env string) (string, error) {
	for _, p := range []string{flagVal, env} {
		if p == "" {
			continue
		}
		if _, err := os.Stat(p); err != nil {
			return "", err
		}
		return filepath.Abs(p)
	}
	var candidates []string
	if self, err := os.Executable(); err == nil {
		candidates = append(candidates, filepath.Join(filepath.Dir(self), name))
	}
	if wd, err := os.Getwd(); err == nil {
		for dir := wd; ; dir = filepath.Dir(dir) {
			// Every module root above: the tools' module (tools/) sits
			// inside the repository's, whose .cache/bin holds the build.
			if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
				candidates = append(candidates, filepath.Join(dir, ".cache", "bin", name))
			}
			if filepath.Dir(dir) == dir {
				break
			}
		}
	}
	for _, c := range candidates {
		if st, err := os.Stat(c); err == nil && !st.IsDir() {
			return c, nil
		}
	}
	p, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("%s not found", name)
	}
	return filepath.Abs(p)
}

func runSoak(ctx context.Context, args []string, std cli.Stdio) error {
	if len(args) > 0 && (args[0] == "node" || args[0] == "etcd") {
		return runSoakHelper(ctx, args, std)
	}
	var f soakFlags
	fs := newFlagSet("soak", "soak [flags]", std.Out)
	f.register(fs)
	if err := cli.ParseNoArgs(fs, args); err != nil {
		return err
	}
	cfg, err := f.config()
	if err != nil {
		return err
	}
	if cfg.Dir, err = f.workDir(); err != nil {
		return err
	}
	if !f.quiet {
		cfg.Progress = std.Err
	}
	logf, err := os.Create(filepath.Join(cfg.Dir, "soak.log"))
	if err != nil {
		return err
	}
	defer logf.Close()
	cfg.Log = slog.New(slog.NewTextHandler(logf, nil))
	fmt.Fprintf(std.Err, "gpucache-bench soak: work directory %s\n", cfg.Dir)
	rep, runErr := soak.Run(ctx, cfg)
	if !f.keepData {
		for _, d := range []string{"s3", "etcd", "open-disk", "secrets"} {
			os.RemoveAll(filepath.Join(cfg.Dir, d))
		}
	}
	if rep == nil {
		return runErr
	}
	if err := rep.WriteFiles(cfg.Dir); err != nil {
		return err
	}
	rep.WriteText(std.Out)
	fmt.Fprintf(std.Out, "report: %s, samples: %s, logs: %s\n", filepath.Join(cfg.Dir, "report.json"),
		filepath.Join(cfg.Dir, "rss.csv"), cfg.Dir)
	if errors.Is(runErr, soak.ErrFailed) {
		return cli.ErrReported
	}
	return runErr
}

// runSoakHelper runs one of the soak's helper processes (internal:
// soak.NodeMain, soak.EtcdMain), named by args[0].
func runSoakHelper(ctx context.Context, args []string, std cli.Stdio) error {
	helper := soak.NodeMain
	if args[0] == "etcd" {
		helper = soak.EtcdMain
	}
	if code := helper(ctx, args[1:], std.In, std.Out, std.Err); code != 0 {
		return fmt.Errorf("%w: soak %s exited %d", cli.ErrReported, args[0], code)
	}
	return nil
}

// workDir makes the work directory (--dir, or one named for the time) and
// returns its absolute path.
func (f *soakFlags) workDir() (string, error) {
	dir := f.dir
	if dir == "" {
		dir = "gpucache-soak-" + time.Now().UTC().Format("20060102T150405Z")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	return filepath.Abs(dir)
}
