package benchcli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/gpucache/gpucache/client"
	"github.com/gpucache/gpucache/internal/cli"
	"github.com/gpucache/gpucache/tools/internal/bench"
)

// noisyFlags are the flags of `gpucache-bench noisy`.
type noisyFlags struct {
	addr                     string
	victimTenant, victimFile string
	noisyTenant, noisyFile   string
	quota, factor, rate      float64
	size, noisySize          string
	keys                     int
	victimConns, noisyConns  int
	victimWorkers            int
	noisyWorkers             int
	duration, warmup         time.Duration
	slice, settle            time.Duration
	reps                     int
	timeout                  time.Duration
	jsonOut                  string
	floodProc                bool
	floodProcs               int
	victimPacer, floodPacer  string
	role                     string
}

func (f *noisyFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.addr, "addr", cli.EnvOr("GPUCACHE_ADDR", client.DefaultAddr), "`host:port` of the server (env GPUCACHE_ADDR)")
	fs.StringVar(&f.victimTenant, "victim-tenant", "victim", "tenant B, which runs the steady load")
	fs.StringVar(&f.victimFile, "victim-secret-file", "", "`file` holding tenant B's bearer secret")
	fs.StringVar(&f.noisyTenant, "noisy-tenant", "noisy", "tenant A, which floods")
	fs.StringVar(&f.noisyFile, "noisy-secret-file", "", "`file` holding tenant A's bearer secret")
	fs.Float64Var(&f.quota, "quota", 0, "tenant A's ops_per_sec on the server (required; the flood offers --flood-factor times this)")
	fs.Float64Var(&f.factor, "flood-factor", 10, "flood rate as a multiple of --quota")
	fs.Float64Var(&f.rate, "victim-rate", 1000, "tenant B's GETs per second")
	fs.StringVar(&f.size, "size", "64KiB", "tenant B's block `size`")
	fs.StringVar(&f.noisySize, "noisy-size", "", "tenant A's block `size` (default --size)")
	fs.IntVar(&f.keys, "keys", 256, "working set per tenant, written before the reps")
	fs.IntVar(&f.victimConns, "victim-conns", 4, "tenant B's connections")
	fs.IntVar(&f.noisyConns, "noisy-conns", 4, "tenant A's connections")
	fs.IntVar(&f.victimWorkers, "victim-workers", 32, "goroutines sending B's paced requests")
	fs.IntVar(&f.noisyWorkers, "noisy-workers", 64, "goroutines sending A's paced requests")
	fs.DurationVar(&f.duration, "duration", 10*time.Second, "measured time of each phase")
	fs.DurationVar(&f.warmup, "warmup", time.Second, "unmeasured load at the start of each rep")
	fs.DurationVar(&f.slice, "slice", 0, "measure each phase in windows of this length, interleaved ABBA with the other phase's (default: one window of --duration)")
	fs.DurationVar(&f.settle, "settle", 100*time.Millisecond, "unmeasured time after each flood start or stop")
	fs.IntVar(&f.reps, "reps", 5, "reps; each runs B alone and B under the flood, in alternating order")
	fs.DurationVar(&f.timeout, "timeout", client.DefaultRequestTimeout, "per-request timeout")
	fs.StringVar(&f.jsonOut, "json", "", "write machine-readable results to `file`")
	fs.BoolVar(&f.floodProc, "flood-proc", false, "run the flood in a child process of its own (this binary with --role flood)")
	fs.IntVar(&f.floodProcs, "flood-gomaxprocs", 0, "GOMAXPROCS of the --flood-proc child (0: inherit)")
	fs.StringVar(&f.victimPacer, "victim-pacer", "timer", "how B's load waits for its next request: timer (a Go timer) or fine (nanosleep; holds a P while it sleeps)")
	fs.StringVar(&f.floodPacer, "flood-pacer", "fine", "how the flood waits: fine (nanosleep, wakes within tens of µs) or timer (a Go timer: bursts each millisecond)")
	fs.StringVar(&f.role, "role", "", "internal: \"flood\" serves the flood on stdin/stdout for --flood-proc")
}

func readSecret(flagName, path string) ([]byte, error) {
	if path == "" {
		return nil, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, cli.UsageErr("--%s: %v", flagName, err)
	}
	s := []byte(strings.TrimSpace(string(b)))
	if len(s) == 0 {
		return nil, cli.UsageErr("--%s %s is empty", flagName, path)
	}
	return s, nil
}

func (f *noisyFlags) config() (bench.NoisyConfig, error) {
	var cfg bench.NoisyConfig
	var err error
	if f.quota <= 0 {
		return cfg, cli.UsageErr("--quota must be positive: tenant A's ops_per_sec on the server")
	}
	if f.duration <= 0 || f.timeout <= 0 || f.warmup < 0 || f.slice < 0 || f.settle < 0 {
		return cfg, cli.UsageErr("--duration and --timeout must be positive, --warmup, --slice and --settle not negative")
	}
	cfg = bench.NoisyConfig{Addr: f.addr, Victim: bench.NoisyTenant{Name: f.victimTenant}, Noisy: bench.NoisyTenant{Name: f.noisyTenant},
		Quota: f.quota, FloodFactor: f.factor, VictimRate: f.rate, Keys: f.keys, VictimConns: f.victimConns, FloodConns: f.noisyConns,
		VictimWorkers: f.victimWorkers, FloodWorkers: f.noisyWorkers, Duration: f.duration, Warmup: f.warmup, Slice: f.slice, Settle: f.settle, Reps: f.reps,
		RequestTimeout: f.timeout}
	if cfg.VictimPacer, err = bench.ParsePacer(f.victimPacer); err != nil {
		return cfg, cli.UsageErr("--victim-pacer: %v", err)
	}
	if cfg.FloodPacer, err = bench.ParsePacer(f.floodPacer); err != nil {
		return cfg, cli.UsageErr("--flood-pacer: %v", err)
	}
	if cfg.Victim.Secret, err = readSecret("victim-secret-file", f.victimFile); err != nil {
		return cfg, err
	}
	if cfg.Noisy.Secret, err = readSecret("noisy-secret-file", f.noisyFile); err != nil {
		return cfg, err
	}
	if cfg.Size, err = noisySize("size", f.size); err != nil {
		return cfg, err
	}
	cfg.FloodSize = cfg.Size
	if f.noisySize != "" {
		if cfg.FloodSize, err = noisySize("noisy-size", f.noisySize); err != nil {
			return cfg, err
		}
	}
	return cfg, nil
}

func runNoisy(ctx context.Context, args []string, std cli.Stdio) error {
	var f noisyFlags
	fs := newFlagSet("noisy", "noisy --quota OPS [flags]", std.Out)
	f.register(fs)
	if err := cli.ParseNoArgs(fs, args); err != nil {
		return err
	}
	cfg, err := f.config()
	if err != nil {
		return err
	}
	switch f.role {
	case "":
	case "flood":
		return serveFlood(ctx, cfg, std)
	default:
		return cli.UsageErr("--role %q (want flood, or none)", f.role)
	}
	if err := cfg.Validate(); err != nil {
		return cli.UsageErr("%v", err)
	}
	cfg.Progress = std.Err
	if f.floodProc {
		child, err := startFloodProc(ctx, args, f.floodProcs, std)
		if err != nil {
			return err
		}
		defer child.close()
		cfg.Flood = child.flood
	}
	rep, runErr := bench.RunNoisy(ctx, cfg)
	if errors.Is(runErr, bench.ErrConfig) {
		return cli.UsageErr("%v", runErr)
	}
	if rep == nil {
		return runErr
	}
	fmt.Fprintln(std.Out)
	if err := rep.WriteTable(std.Out); err != nil {
		return err
	}
	if f.jsonOut != "" {
		if err := writeJSONFile(f.jsonOut, rep.WriteJSON); err != nil {
			return err
		}
	}
	if runErr != nil {
		return runErr
	}
	if rep.Wrong > 0 {
		return fmt.Errorf("%d wrong payloads", rep.Wrong)
	}
	return nil
}

// noisySize parses the size flag name (16B..1GiB).
func noisySize(name, s string) (int, error) {
	n, err := bench.ParseSize(s)
	if err != nil || n < 16 || n > 1<<30 {
		return 0, cli.UsageErr("--%s: bad size %q (16B..1GiB)", name, s)
	}
	return int(n), nil
}

func writeJSONFile(path string, write func(w io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// serveFlood is the --role flood child: it writes the noisy tenant's
// working set and serves the flood protocol on stdin and stdout.
func serveFlood(ctx context.Context, cfg bench.NoisyConfig, std cli.Stdio) error {
	lf, err := bench.NewLocalFlood(ctx, bench.FloodConfig{Addr: cfg.Addr, Tenant: cfg.Noisy, Namespace: bench.NoisyNamespace(),
		Rate: cfg.Quota * cfg.FloodFactor, Size: cfg.FloodSize, Keys: cfg.Keys, Conns: cfg.FloodConns, Workers: cfg.FloodWorkers,
		Pacer: cfg.FloodPacer, RequestTimeout: cfg.RequestTimeout})
	if err != nil {
		fmt.Fprintf(std.Out, "error %s\n", cli.OneLine(err))
		return err
	}
	defer lf.Close()
	return bench.ServeFlood(ctx, std.In, std.Out, lf)
}

// floodChild is a --role flood child process.
type floodChild struct {
	cmd   *exec.Cmd
	stdin interface{ Close() error }
	flood *bench.RemoteFlood
}

// startFloodProc starts this binary as `noisy --role flood` with the
// parent's flags and waits until its flood is ready.
func startFloodProc(ctx context.Context, args []string, procs int, std cli.Stdio) (*floodChild, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("--flood-proc: %w", err)
	}
	cargs := append([]string{"noisy"}, args...)
	cargs = append(cargs, "--role", "flood", "--flood-proc=false")
	cmd := exec.CommandContext(ctx, exe, cargs...)
	cmd.Stderr = std.Err
	cmd.Env = os.Environ()
	if procs > 0 {
		cmd.Env = append(cmd.Env, "GOMAXPROCS="+strconv.Itoa(procs))
	}
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("--flood-proc: %w", err)
	}
	c := &floodChild{cmd: cmd, stdin: in}
	if c.flood, err = bench.NewRemoteFlood(in, out); err != nil {
		c.close()
		return nil, err
	}
	return c, nil
}

// close ends the child: closing its stdin makes it exit.
func (c *floodChild) close() {
	c.stdin.Close()
	c.cmd.Wait()
}
