package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/gpucache/gpucache/api/wire"
)

// Stdio is the command's standard streams.
type Stdio struct {
	In  io.Reader
	Out io.Writer
	Err io.Writer
}

// Exit codes.
const (
	exitOK    = 0
	exitFail  = 1 // the operation failed, or a GET missed
	exitUsage = 2 // bad flags or arguments
)

// Usage is the top-level help text.
const Usage = `gpucache: client for the gpucache KV-cache store

Usage:
  gpucache <command> [flags] [args]

Commands:
  put      store a file as one block:     gpucache put --key-text demo ./file.bin
  get      read one block into a file:    gpucache get --key-text demo -o out.bin
  lookup   count the cached leading blocks of a token chain
  delete   remove one block
  stat     print the server's counters (--json for JSON)
  ping     measure the round trip to the server
  members  print the node's view of the cluster: epoch, members, owner shares
  bench    run a load benchmark against a running server
  noisy    noisy neighbour: tenant B's steady GET load alone and while tenant A
           floods at 10x its quota; prints B's p99 rise (gpucache noisy --quota OPS
           --victim-secret-file F --noisy-secret-file F; takes no --tenant)
  shard-demo  run two shards on loopback: single-flight fills and the transport fallback
  cold-demo   publish a pack to a local cold tier and refill it, checking the cold contracts
  replay   replay a Mooncake trace: simulate the hot tier's policies (table, --json,
           --plot), or --live against a running gpucached (hit ratio, throughput,
           latency): gpucache replay --trace FILE [--live --addr HOST:PORT]
  soak     robustness soak: 3 cluster nodes + an open node, etcd and S3 (versitygw),
           faults on a schedule, every payload checked (gpucache soak --duration 5m)
  admin    cold-tier lifecycle on a node: inventory, purge --tenant, expire, backfill
           (gpucache admin --help)
  version  print the client and protocol versions

Common flags (every command but version):
  --addr host:port   server address (env GPUCACHE_ADDR; default 127.0.0.1:9400)
  --tenant name      session tenant (env GPUCACHE_TENANT; default "default")
  --timeout d        per-request timeout (default 5s)

A block is addressed by its identity: the namespace flags (--model, --revision,
--tokenizer, --trust-domain, --adapter, --rope, --dtype, --quant, --layout,
--tp-rank, --tp-size, --pp-rank, --pp-size, --layer-start, --layers,
--kv-heads, --head-dim, --block-tokens; all have defaults, so put and get work
without them) plus its tokens: --key-text TEXT (one token per byte of TEXT) or
--tokens 1,2,3.

Run 'gpucache <command> -h' for a command's flags.
`

// Main runs the command line args (without the program name) and returns
// the process exit code.
func Main(ctx context.Context, args []string, std Stdio) int {
	if len(args) == 0 {
		fmt.Fprint(std.Err, Usage)
		return exitUsage
	}
	cmd, rest := args[0], args[1:]
	var err error
	switch cmd {
	case "put":
		err = runPut(ctx, rest, std)
	case "get":
		err = runGet(ctx, rest, std)
	case "lookup":
		err = runLookup(ctx, rest, std)
	case "delete":
		err = runDelete(ctx, rest, std)
	case "stat":
		err = runStat(ctx, rest, std)
	case "ping":
		err = runPing(ctx, rest, std)
	case "members":
		err = runMembers(ctx, rest, std)
	case "bench":
		err = runBench(ctx, rest, std)
	case "noisy":
		err = runNoisy(ctx, rest, std)
	case "shard-demo":
		err = runShardDemo(ctx, rest, std)
	case "cold-demo":
		err = runColdDemo(ctx, rest, std)
	case "replay":
		err = runReplay(ctx, rest, std)
	case "soak":
		err = runSoak(ctx, rest, std)
	case "admin":
		err = runAdmin(ctx, rest, std)
	case "version", "--version":
		fmt.Fprintln(std.Out, versionLine())
		return exitOK
	case "help", "-h", "-help", "--help":
		fmt.Fprint(std.Out, Usage)
		return exitOK
	default:
		fmt.Fprintf(std.Err, "gpucache: unknown command %q (run 'gpucache help')\n", cmd)
		return exitUsage
	}
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, flag.ErrHelp):
		return exitOK
	case errors.Is(err, errUsage):
		fmt.Fprintf(std.Err, "gpucache %s: %s\n", cmd, oneLine(err))
		return exitUsage
	case errors.Is(err, errReported):
		return exitFail
	}
	fmt.Fprintf(std.Err, "gpucache %s: %s\n", cmd, oneLine(err))
	return exitFail
}

var (
	// errUsage marks a usage error (exit 2).
	errUsage = errors.New("usage")
	// errReported marks a failure whose message has been printed.
	errReported = errors.New("reported")
)

func usageErr(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errUsage, fmt.Sprintf(format, args...))
}

// oneLine strips the usage marker and newlines from an error message.
func oneLine(err error) string {
	s := strings.TrimPrefix(err.Error(), errUsage.Error()+": ")
	return strings.ReplaceAll(strings.TrimSpace(s), "\n", "; ")
}

// parse parses flags interspersed with positional arguments (flag stops at
// the first positional, so "put ./f --key-text x" would otherwise fail)
// and returns the positionals.
func parse(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, fmt.Errorf("%w: %v", errUsage, err)
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		if args[0] == "--" {
			return append(pos, args[1:]...), nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

// newFlagSet returns a flag set that prints its errors and help to w.
func newFlagSet(name, synopsis string, w io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(w)
	fs.Usage = func() {
		fmt.Fprintf(w, "Usage: gpucache %s\n\nFlags:\n", synopsis)
		fs.PrintDefaults()
	}
	return fs
}

func versionLine() string {
	v := "dev"
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		v = bi.Main.Version
	}
	return fmt.Sprintf("gpucache %s (wire protocol v%d..v%d, %s %s/%s)", v, wire.Version1, wire.VersionMax, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
