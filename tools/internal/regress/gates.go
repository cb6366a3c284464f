package regress

import (
	"cmp"
	"context"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Gate is one check of a run: a command, or a function of the runner.
type Gate struct {
	Name string
	// Cmd is the argv; a leading "{bin}/" is the run's binary directory.
	Cmd []string
	Env []string
	// JSON: the command is `go test -json`; its events feed the contracts
	// gate and its failures the junit message.
	JSON bool
	// Expect: strings the output must contain (a demo's labels).
	Expect []string
	// EmptyOutput: the command passes only if it prints nothing (gofmt -l).
	EmptyOutput bool
	// Needs: gates that must pass first; selecting this gate selects them.
	Needs []string
	// Skip, when set, is why the gate does not run here.
	Skip string
	// Func replaces Cmd: it writes its log to w and returns the exit code
	// it stands for and an error when the gate fails.
	Func    func(ctx context.Context, r *runner, w io.Writer) (int, error)
	Command string // how Func is described in results.json
	Timeout time.Duration
}

// staticcheck is the pinned linter version (the one scripts/test runs).
const staticcheck = "honnef.co/go/tools/cmd/staticcheck@v0.8.2"

// Demo labels: what each demo must print (the seed contracts' demos;
// docs/CONTRACTS.md, "Where the contracts come from").
var demoLabels = map[string][]string{
	"shard": {"SHARD_OK", "rdma=NOT_RUN_HARDWARE"},
	"cold":  {"COLD_CONTRACT_OK", "gds=NOT_RUN_HARDWARE"},
	"dpu":   {"offload_active=false", "hardware=NOT_RUN_HARDWARE"},
}

// benchPackages are the packages the bench smoke runs once each (-benchtime
// 1x): the hot path's tiers, with no external server.
var benchPackages = []string{"./api/wire", "./internal/hot", "./internal/directory", "./api/identity"}

// cpuGates is the cpu profile: every gate that needs no hardware.
func cpuGates(o Options) []Gate {
	root := o.Root
	race := []string{"go", "test", "-race", "-count=1", "-timeout", "20m", "-json", "work"}
	gs := []Gate{
		{Name: "gofmt", Cmd: []string{"gofmt", "-l", "."}, EmptyOutput: true},
		{Name: "vet", Cmd: []string{"go", "vet", "work"}},
		{Name: "staticcheck", Cmd: []string{"go", "run", staticcheck, "work"}},
		{Name: "build", Cmd: []string{"go", "build", "-o", "{bin}/", "./cmd/gpucache", "./tools/cmd/gpucache-bench", "./cmd/gpucached"}},
		{Name: "s3-server", Func: s3Server, Command: "$GPUCACHE_VERSITYGW, else scripts/s3-server install"},
		{Name: "race", Cmd: race, JSON: true, Needs: []string{"s3-server"}, Timeout: 25 * time.Minute},
	}
	for _, tag := range []string{"rdma_nixl", "dpu_bf3"} {
		gs = append(gs, Gate{Name: "tags/" + tag + "/build", Cmd: []string{"go", "vet", "-tags", tag, "work"}})
		g := Gate{Name: "tags/" + tag + "/test", JSON: true}
		pkgs := taggedPackages(root, tag)
		if len(pkgs) == 0 {
			g.Skip = "no package has a file with //go:build " + tag
			g.Cmd = []string{"go", "test", "-tags", tag}
		} else {
			g.Cmd = append([]string{"go", "test", "-race", "-count=1", "-json", "-tags", tag}, pkgs...)
		}
		gs = append(gs, g)
	}
	for _, d := range []string{"shard", "cold", "dpu"} {
		gs = append(gs, Gate{Name: "demo/" + d, Cmd: []string{"{bin}/gpucache-bench", d + "-demo"}, Expect: demoLabels[d], Needs: []string{"build"}})
	}
	gs = append(gs, Gate{Name: "doctor", Cmd: []string{"{bin}/gpucache", "doctor", "--json"}, Needs: []string{"build"}})
	for _, f := range fuzzTargets(root) {
		gs = append(gs, Gate{
			Name: "fuzz/" + f.dir + "/" + f.name,
			Cmd:  []string{"go", "test", "-run", "^$", "-fuzz", "^" + f.name + "$", "-fuzztime", strconv.Itoa(o.FuzzExecs) + "x", "./" + f.dir},
		})
	}
	var bp []string
	for _, p := range benchPackages {
		if isGoDir(filepath.Join(root, p)) {
			bp = append(bp, p)
		}
	}
	bg := Gate{Name: "bench/go", Cmd: append([]string{"go", "test", "-run", "^$", "-bench", ".", "-benchtime", "1x"}, bp...)}
	if len(bp) == 0 {
		bg.Skip = "none of the bench smoke packages is in this tree"
	}
	gs = append(gs, bg,
		Gate{Name: "bench/cli", Func: benchCLI, Needs: []string{"build"},
			Command: "{bin}/gpucached --listen 127.0.0.1:0 ...; {bin}/gpucache-bench bench --requests 64 --sizes 64KiB --conns 2"})
	py := Gate{Name: "python", Cmd: []string{"/usr/bin/python3", "-m", "unittest", "discover", "-s", "python/tests", "-v"},
		Env: []string{"GPUCACHE_BIN={bin}/gpucached"}, Needs: []string{"build"}, Timeout: 20 * time.Minute}
	if _, err := os.Stat(filepath.Join(root, "python", "tests")); err != nil {
		py.Skip = "no python/tests in this tree"
	} else if _, err := os.Stat("/usr/bin/python3"); err != nil {
		py.Skip = "/usr/bin/python3 is not installed"
	}
	gs = append(gs, py, Gate{Name: "contracts", Func: contractsGate, Command: "check docs/CONTRACTS.md: statuses, every named test exists, and ran and passed in this run's go test -json and python logs"})
	return gs
}

type fuzzTarget struct{ dir, name string }

var fuzzFunc = regexp.MustCompile(`(?m)^func (Fuzz[A-Za-z0-9_]*)\(\w+ \*testing\.F\)`)

// fuzzTargets finds every `func FuzzX(f *testing.F)` under root; a file
// it cannot read is skipped.
func fuzzTargets(root string) []fuzzTarget {
	var out []fuzzTarget
	_ = walkGo(root, func(rel string, name string, b []byte) {
		if !strings.HasSuffix(name, "_test.go") {
			return
		}
		for _, m := range fuzzFunc.FindAllSubmatch(b, -1) {
			out = append(out, fuzzTarget{dir: rel, name: string(m[1])})
		}
	})
	sort.Slice(out, func(i, j int) bool {
		if out[i].dir != out[j].dir {
			return out[i].dir < out[j].dir
		}
		return out[i].name < out[j].name
	})
	return out
}

// taggedPackages lists the packages ("./dir") with a file constrained by
// tag; a file it cannot read is skipped.
func taggedPackages(root, tag string) []string {
	re := regexp.MustCompile(`(?m)^//go:build .*\b` + regexp.QuoteMeta(tag) + `\b`)
	seen := map[string]bool{}
	_ = walkGo(root, func(rel, _ string, b []byte) {
		if re.Match(b) {
			seen["./"+rel] = true
		}
	})
	var out []string
	for p := range seen {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}

// walkGo calls fn for every .go file under root the go tool would see
// (it skips directories starting with '.' or '_', testdata and vendor),
// with the file's directory relative to root, slash separated. It goes on
// past a directory or file it cannot read and returns the first such error.
func walkGo(root string, fn func(relDir, name string, b []byte)) error {
	var first error
	_ = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			first = cmp.Or(first, err)
			return nil
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" || name == "vendor") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			first = cmp.Or(first, err)
			return nil
		}
		rel, _ := filepath.Rel(root, filepath.Dir(path))
		fn(filepath.ToSlash(rel), name, b)
		return nil
	})
	return first
}
