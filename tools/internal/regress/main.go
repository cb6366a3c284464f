package regress

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

const usage = `usage:
  regress --out DIR [--profile cpu] [--offline] [--gates a,b,...] [--fuzz-execs N] [--root DIR]
  regress --list [--root DIR]
  regress contracts-column [-w] [--results DIR] [FILE]   (default FILE docs/CONTRACTS.md)
  regress contracts-check [FILE]                         (statuses and that every named test exists)

Runs the regression gates and writes environment.json, capabilities.json,
results.json, summary.md and junit.xml (logs under DIR/logs). Exit 0 when no
gate failed, 1 when one did, 2 on a usage error. See docs/REGRESSION.md.
`

// Main is tools/cmd/regress.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		switch args[0] {
		case "contracts-column":
			return columnCmd(args[1:], stdout, stderr)
		case "contracts-check":
			return checkCmd(args[1:], stdout, stderr)
		}
	}
	fs := flag.NewFlagSet("regress", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usage) }
	var o Options
	var gates string
	list := fs.Bool("list", false, "list the profile's gates and exit")
	fs.StringVar(&o.Out, "out", "", "artifact `dir`")
	fs.StringVar(&o.Profile, "profile", "cpu", "gate profile (cpu: every gate that needs no hardware)")
	fs.BoolVar(&o.Offline, "offline", false, "no module downloads (GOFLAGS=-mod=mod GOPROXY=off); fails clearly if a module is missing")
	fs.StringVar(&gates, "gates", "", "comma-separated gates or prefixes (fuzz, demo, tags) to run; default all")
	fs.IntVar(&o.FuzzExecs, "fuzz-execs", 200, "executions per fuzz target (-fuzztime Nx)")
	fs.StringVar(&o.Root, "root", ".", "repository root")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "regress: unexpected argument %q\n%s", fs.Arg(0), usage)
		return 2
	}
	if *list {
		if o.FuzzExecs <= 0 {
			o.FuzzExecs = 200
		}
		for _, g := range cpuGates(o) {
			line := g.Name + "\t" + strings.Join(g.Cmd, " ") + g.Command
			if g.Skip != "" {
				line += "\t(SKIP: " + g.Skip + ")"
			}
			fmt.Fprintln(stdout, line)
		}
		return 0
	}
	if gates != "" {
		o.Gates = strings.Split(gates, ",")
	}
	o.Progress = stdout
	rep, err := Run(ctx, o)
	if errors.Is(err, ErrUsage) {
		fmt.Fprintf(stderr, "regress: %v\n", err)
		return 2
	}
	if err != nil {
		fmt.Fprintf(stderr, "regress: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "%d passed, %d failed, %d skipped; artifacts in %s\n", rep.Passed, rep.Failed, rep.Skipped, o.Out)
	if rep.Failed > 0 {
		return 1
	}
	return 0
}

func columnCmd(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("contracts-column", flag.ContinueOnError)
	fs.SetOutput(stderr)
	write := fs.Bool("w", false, "rewrite the file in place (default: print it)")
	results := fs.String("results", "", "a run's artifact `dir`: rows whose tests all passed there become PASS")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	file := filepath.Join("docs", "CONTRACTS.md")
	if fs.NArg() > 0 {
		file = fs.Arg(0)
	}
	root := rootOf(file)
	src, err := os.ReadFile(file)
	if err != nil {
		fmt.Fprintf(stderr, "regress: %v\n", err)
		return 1
	}
	var passed func(Row) bool
	if *results != "" {
		if passed, err = passedFrom(*results, root); err != nil {
			fmt.Fprintf(stderr, "regress: %v\n", err)
			return 1
		}
	}
	out := AddStatusColumn(string(src), root, passed)
	if !*write {
		fmt.Fprint(stdout, out)
		return 0
	}
	if err := os.WriteFile(file, []byte(out), 0o644); err != nil {
		fmt.Fprintf(stderr, "regress: %v\n", err)
		return 1
	}
	return 0
}

// rootOf guesses the repository root of a docs/CONTRACTS.md path.
func rootOf(file string) string {
	dir := filepath.Dir(filepath.Dir(file))
	if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
		return dir
	}
	return "."
}

// passedFrom reads a run's results (its race and tagged test logs and its
// python log) and says whether every test a row names passed in it. Only
// a run whose race gate ran counts.
func passedFrom(dir, root string) (func(Row) bool, error) {
	b, err := os.ReadFile(filepath.Join(dir, "results.json"))
	if err != nil {
		return nil, err
	}
	var rep Report
	if err := json.Unmarshal(b, &rep); err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	ran, err := ranFrom(dir, root, rep)
	if err != nil {
		return nil, err
	}
	idx, err := IndexTests(root)
	if err != nil {
		return nil, err
	}
	return func(r Row) bool {
		r.HasCol, r.Status = true, StatusRequiredCPU
		return len(CheckContracts([]Row{r}, idx, root, ran)) == 0
	}, nil
}

// ranFrom reads the test outcomes of the race, tags and python gates of
// the run in dir (report rep). The race gate must have run.
func ranFrom(dir, root string, rep Report) (Ran, error) {
	var ran Ran
	raceRan, pyRan := false, false
	for _, g := range rep.Gates {
		if g.Status == Skip || g.ExitCode < 0 {
			continue
		}
		switch {
		case g.Name == "race" || strings.HasPrefix(g.Name, "tags/") && strings.HasSuffix(g.Name, "/test"):
			f, err := os.Open(filepath.Join(dir, g.Log))
			if err != nil {
				return ran, err
			}
			err = ran.AddGoTestJSON(f, modulePath(root))
			f.Close()
			if err != nil {
				return ran, err
			}
			raceRan = raceRan || g.Name == "race"
		case g.Name == "python":
			lb, err := os.ReadFile(filepath.Join(dir, g.Log))
			if err != nil {
				return ran, err
			}
			ran.AddPythonLog(string(lb))
			pyRan = true
		}
	}
	if !raceRan {
		return ran, fmt.Errorf("%s: the race gate did not run there; nothing can be stamped PASS", dir)
	}
	if !pyRan {
		ran.Python = map[string]Outcome{}
	}
	return ran, nil
}

func checkCmd(args []string, stdout, stderr io.Writer) int {
	file := filepath.Join("docs", "CONTRACTS.md")
	if len(args) > 0 {
		file = args[0]
	}
	root := rootOf(file)
	f, err := os.Open(file)
	if err != nil {
		fmt.Fprintf(stderr, "regress: %v\n", err)
		return 1
	}
	defer f.Close()
	rows, err := ParseContracts(f, root)
	if err != nil {
		fmt.Fprintf(stderr, "regress: %v\n", err)
		return 1
	}
	idx, err := IndexTests(root)
	if err != nil {
		fmt.Fprintf(stderr, "regress: %v\n", err)
		return 1
	}
	ps := CheckContracts(rows, idx, root, Ran{})
	for _, p := range ps {
		fmt.Fprintf(stdout, "%s:%d: %s\n", file, p.Line, p.What)
	}
	fmt.Fprintf(stdout, "%d rows, %d problems\n", len(rows), len(ps))
	if len(ps) > 0 {
		return 1
	}
	return 0
}
