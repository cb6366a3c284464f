package benchcli

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/gpucache/gpucache/internal/cli"
	"github.com/gpucache/gpucache/internal/version"
)

// prog is this command's name, in usage lines and error messages.
const prog = cli.BenchProgram

// Usage is the top-level help text.
const Usage = `gpucache-bench: demos and load tools for the gpucache KV-cache store
(the data, admin and doctor commands are gpucache's: see 'gpucache --help')

Usage:
  gpucache-bench <command> [flags] [args]

Commands:
  bench    run a load benchmark against a running server
  noisy    noisy neighbour: tenant B's steady GET load alone and while tenant A
           floods at 10x its quota; prints B's p99 rise (gpucache-bench noisy
           --quota OPS --victim-secret-file F --noisy-secret-file F; takes no --tenant)
  replay   replay a Mooncake trace: simulate the hot tier's policies (table, --json,
           --plot), or --live against a running gpucached (hit ratio, throughput,
           latency): gpucache-bench replay --trace FILE [--live --addr HOST:PORT]
  gen-trace  write a synthetic Mooncake trace: chat, system, agent, rag, oneshot or mix
           (gpucache-bench gen-trace --shape chat --requests N --seed S --out FILE)
  soak     robustness soak: 3 cluster nodes + an open node, etcd and S3 (versitygw),
           faults on a schedule, every payload checked (gpucache-bench soak --duration 5m)
  report   paired-baseline | v3-paired: what a paired hardware run needs and lacks (NOT_RUN_HARDWARE)
  shard-demo  run two shards on loopback: single-flight fills and the transport fallback
  cold-demo   publish a pack to a local cold tier and refill it, checking the cold contracts
  dpu-demo    the DPU path: every open refuses, offload_active=false, a simulated queue round trip
  memcpy   the co-located limit: memcpy of blocks out of a working set, 1 and 2 threads
  cma      cross-memory attach: process_vm_readv of blocks out of a child's working set
  torture  the flash tier's kill -9 loops: restart, check every acknowledged block,
           write, kill (gpucache-bench torture --daemon bin/gpucached --loops 100)
  version  print the client and protocol versions

The networked commands (bench, noisy, replay --live) take gpucache's
connection flags (--addr, --cluster, --tenant, --secret-file, --tls-ca,
--timeout, and their GPUCACHE_* environment variables) and exit with its
codes: 0 done, 2 usage error, 3 refused, 4 unavailable, 5 any other failure.

Run 'gpucache-bench <command> --help' for a command's flags.
`

// commands are the command names, for suggesting the nearest to a typo.
var commands = []string{"bench", "memcpy", "cma", "noisy", "replay", "gen-trace", "soak", "report", "shard-demo", "cold-demo", "dpu-demo", "torture", "version", "help"}

// Main runs the command line args (without the program name) and returns
// the process exit code.
func Main(ctx context.Context, args []string, std cli.Stdio) int {
	if len(args) == 0 {
		fmt.Fprint(std.Err, Usage)
		return 2
	}
	cmd, rest := args[0], args[1:]
	var err error
	switch cmd {
	case "bench":
		err = runBench(ctx, rest, std)
	case "memcpy":
		err = runMemcpy(ctx, rest, std)
	case "cma":
		err = runCMA(ctx, rest, std)
	case "cma-peer": // runCMA's child
		err = runCMAPeer(rest, std)
	case "noisy":
		err = runNoisy(ctx, rest, std)
	case "replay":
		err = runReplay(ctx, rest, std)
	case "gen-trace":
		err = runGenTrace(ctx, rest, std)
	case "soak":
		err = runSoak(ctx, rest, std)
	case "report":
		err = runReport(ctx, rest, std)
	case "shard-demo":
		err = runShardDemo(ctx, rest, std)
	case "cold-demo":
		err = runColdDemo(ctx, rest, std)
	case "dpu-demo":
		err = runDPUDemo(ctx, rest, std)
	case "torture":
		err = runTorture(ctx, rest, std)
	case "version", "--version":
		fmt.Fprintln(std.Out, version.Line(prog))
		return 0
	case "help", "-h", "-help", "--help":
		fmt.Fprint(std.Out, Usage)
		return 0
	default:
		hint := ""
		if near, ok := cli.Nearest(cmd, commands); ok {
			hint = fmt.Sprintf(" (did you mean %q?)", near)
		}
		fmt.Fprintf(std.Err, "%s: unknown command %q%s; see '%s --help' (data, admin and doctor commands are gpucache's)\n", prog, cmd, hint, prog)
		return 2
	}
	return cli.Exit(std, prog, cmd, err)
}

// newFlagSet returns the flag set of a gpucache-bench command.
func newFlagSet(name, synopsis string, w io.Writer) *flag.FlagSet {
	return cli.NewFlagSet(prog, name, synopsis, w)
}
