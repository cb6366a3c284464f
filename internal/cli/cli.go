package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/gpucache/gpucache/internal/version"
)

// Stdio is the command's standard streams.
type Stdio struct {
	In  io.Reader
	Out io.Writer
	Err io.Writer
}

// Usage is the top-level help text.
const Usage = `gpucache: client for the gpucache KV-cache store

Usage:
  gpucache <command> [flags] [args]

Commands:
  put      store a file as one block:     gpucache put --key-text demo ./file.bin
  get      read one block into a file:    gpucache get --key-text demo -o out.bin
  lookup   count the cached leading blocks of a token chain
  delete   remove one block
  stat     print the server's counters (--json for JSON); with --cluster,
           every member's, one section each
  ping     measure the round trip to the server; with --cluster, to every member
  members  print the node's view of the cluster: epoch, members, owner shares
           (with --cluster, the view of the first seed that answers)
  admin    cold-tier lifecycle on a node: inventory, purge --tenant, expire, backfill
           (gpucache admin --help)
  doctor   what this machine and this node's config can do: CPU, limits, NUMA,
           RDMA/GPU/NVMe/BlueField, S3 and etcd reachability, clock, certificates
           (gpucache doctor --config /etc/gpucache/gpucached.yaml [--json])
  version  print the client and protocol versions

The demos and load tools (bench, noisy, replay, soak, report, shard-demo,
cold-demo, dpu-demo) are a second command, gpucache-bench: see
'gpucache-bench --help'.

Common flags (every command but version):
  --addr host:port   server address (env GPUCACHE_ADDR; default 127.0.0.1:9400)
  --cluster h:p,...  seed addresses of a cluster, used instead of --addr: put,
                     get, lookup and delete route each key to its owner;
                     members asks a seed; stat and ping go to every member
                     (env GPUCACHE_CLUSTER)
  --tenant name      session tenant (env GPUCACHE_TENANT; default "default",
                     or the tenant the server derives from --secret-file or
                     the client certificate)
  --secret-file f    the tenant's bearer secret (env GPUCACHE_SECRET_FILE)
  --tls-ca f         CA that verifies the server; turns TLS on (env GPUCACHE_TLS_CA)
  --timeout d        per-request timeout (default 5s)

A block is addressed by its identity: the namespace flags (--model, --revision,
--tokenizer, --trust-domain, --adapter, --rope, --dtype, --quant, --layout,
--tp-rank, --tp-size, --pp-rank, --pp-size, --layer-start, --layers,
--kv-heads, --head-dim, --block-tokens; all have defaults, so put and get work
without them) plus its tokens: --key-text TEXT (one token per byte of TEXT) or
--tokens 1,2,3.

Exit codes:
  0  done; a GET hit
  1  miss: a GET or DELETE found no block
  2  usage error (bad flags or arguments)
  3  refused: authentication (the server's, or a server certificate that
     --tls-ca does not verify), rights, quota, size limits, capacity
  4  unavailable: unreachable, timed out, not a data port (an HTTP admin
     port), draining, read-only (a PUT to a node that lost its control
     plane: retry later or use another node), the key is owned by another
     cluster member (use --cluster), or its owner cannot be reached
  5  any other failure (a local file, a protocol error)

Run 'gpucache <command> --help' for a command's flags.
`

// commands are the command names, for suggesting the nearest to a typo.
var commands = []string{"put", "get", "lookup", "delete", "stat", "ping", "members", "admin", "doctor", "version", "help"}

// MovedCommands are the demos and load tools that gpucache-bench runs
// (tools/internal/benchcli): gpucache does not link the server, the hot tier or
// the plotting code they need.
var MovedCommands = []string{"bench", "noisy", "replay", "soak", "report", "shard-demo", "cold-demo", "dpu-demo"}

// BenchProgram is the name of the second command.
const BenchProgram = "gpucache-bench"

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
	case "admin":
		err = runAdmin(ctx, rest, std)
	case "doctor":
		err = runDoctor(ctx, rest, std)
	case "version", "--version":
		fmt.Fprintln(std.Out, versionLine())
		return exitOK
	case "help", "-h", "-help", "--help":
		fmt.Fprint(std.Out, Usage)
		return exitOK
	default:
		if slices.Contains(MovedCommands, cmd) {
			fmt.Fprintf(std.Err, "gpucache: %s is a command of %s now: run '%s %s'\n", cmd, BenchProgram, BenchProgram, strings.Join(args, " "))
			return exitUsage
		}
		hint := ""
		if near, ok := Nearest(cmd, commands); ok {
			hint = fmt.Sprintf(" (did you mean %q?)", near)
		}
		fmt.Fprintf(std.Err, "gpucache: unknown command %q%s; see 'gpucache --help'\n", cmd, hint)
		return exitUsage
	}
	return Exit(std, "gpucache", cmd, err)
}

// Exit returns the exit code of command cmd of program prog that ended
// with err, printing err as one line ("prog cmd: message") unless it is
// nil, a help request or already reported.
func Exit(std Stdio, prog, cmd string, err error) int {
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, flag.ErrHelp):
		return exitOK
	}
	return reportErr(std, prog, cmd, err)
}

var (
	// ErrUsage marks a usage error (exit 2).
	ErrUsage = errors.New("usage")
	// ErrReported marks a failure whose message has been printed.
	ErrReported = errors.New("reported")
)

// UsageErr returns a usage error (exit 2) with the formatted message.
func UsageErr(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrUsage, fmt.Sprintf(format, args...))
}

// OneLine strips the usage marker and newlines from an error message.
func OneLine(err error) string {
	s := strings.TrimPrefix(err.Error(), ErrUsage.Error()+": ")
	return strings.ReplaceAll(strings.TrimSpace(s), "\n", "; ")
}

// parse parses flags interspersed with positional arguments (flag stops at
// the first positional, so "put ./f --key-text x" would otherwise fail)
// and returns the positionals.
func parse(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	// The flag package prints an error and the whole usage on a bad flag:
	// instead, a bad flag is one line (see reportErr) and only -h/--help
	// prints the usage, through the flag set's own Usage.
	usage, out := fs.Usage, fs.Output()
	fs.Usage = func() {}
	fs.SetOutput(io.Discard)
	defer func() { fs.Usage = usage; fs.SetOutput(out) }()
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				fs.SetOutput(out)
				usage()
				return nil, err
			}
			return nil, fmt.Errorf("%w: %v%s", ErrUsage, err, flagHint(fs, err))
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

// flagHint suggests the nearest defined flag for an undefined one.
func flagHint(fs *flag.FlagSet, err error) string {
	const undefined = "flag provided but not defined: -"
	msg := err.Error()
	if !strings.HasPrefix(msg, undefined) {
		return ""
	}
	name := strings.TrimPrefix(msg[len(undefined):], "-")
	var names []string
	fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
	if near, ok := Nearest(name, names); ok {
		return fmt.Sprintf(" (did you mean --%s?)", near)
	}
	return ""
}

// newFlagSet is NewFlagSet for a gpucache command.
func newFlagSet(name, synopsis string, w io.Writer) *flag.FlagSet {
	return NewFlagSet("gpucache", name, synopsis, w)
}

// NewFlagSet returns the flag set of command name of program prog, whose
// help (-h, --help) goes to w, which is the command's stdout; usage errors
// are returned, not printed (see ParseNoArgs).
func NewFlagSet(prog, name, synopsis string, w io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(w)
	fs.Usage = func() {
		fmt.Fprintf(w, "Usage: %s %s\n\nFlags:\n", prog, synopsis)
		fs.PrintDefaults()
	}
	return fs
}

func versionLine() string { return version.Line("gpucache") }

// IsTerminal reports whether w is a character device (a terminal).
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
