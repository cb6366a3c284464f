package regress

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// The statuses a row of docs/CONTRACTS.md may carry.
//
//   - REQUIRED_CPU: the row's tests run on any CPU machine; the runner's
//     contracts gate checks, for each run, that they exist, ran and passed.
//     It is a requirement, not a retained result: it does not say that a
//     given checkout passed (the run's artifacts say that).
//   - PASS: the same, stamped from a runner's results by `regress
//     contracts-column --results DIR` (the commit of that run is written
//     under the table's heading).
//   - NOT_RUN_HARDWARE: the contract needs hardware this project does not
//     run (RDMA, GPUDirect, a DPU); the named test shows the path refuses or
//     labels itself NOT_RUN_HARDWARE.
const (
	StatusPass           = "PASS"
	StatusRequiredCPU    = "REQUIRED_CPU"
	StatusNotRunHardware = "NOT_RUN_HARDWARE"
)

// ErrContracts is the contracts gate's failure.
var ErrContracts = errors.New("gpucache/regress: contract matrix check failed")

// Row is one row of a contract table.
type Row struct {
	Line     int    // 1-based line in the file
	Section  string // the nearest "## " heading
	Contract string // first cell
	Status   string // the status cell ("" when the table has none)
	TestCell string // the test cell
	Refs     []Ref  // what the test cell names
	HasCol   bool   // the table has a status column
}

// RefKind says what a Ref names.
type RefKind int

const (
	RefGoTest RefKind = iota // a Test/Fuzz/Benchmark/Example function (Name may end in '*')
	RefPython                // a Python test file under python/tests
	RefFile                  // a file or directory (testdata scripts, bench scripts)
)

// Ref is one thing a row's test cell names.
type Ref struct {
	Kind RefKind
	Dir  string // package directory relative to the root (RefGoTest); "" when none was named
	Name string // test name, or the path relative to the root
}

func (r Ref) String() string {
	switch r.Kind {
	case RefGoTest:
		if r.Dir == "" {
			return r.Name + " (no package named before it)"
		}
		return r.Dir + "." + r.Name
	default:
		return r.Name
	}
}

var (
	codeSpan  = regexp.MustCompile("`([^`]+)`")
	testIdent = regexp.MustCompile(`^(Test|Fuzz|Benchmark|Example)[A-Za-z0-9_]*\*?$`)
	pkgLike   = regexp.MustCompile(`^[a-z][a-z0-9_]*(/[a-z0-9_]+)*$`)
	pathLike  = regexp.MustCompile(`^(\./)?[A-Za-z0-9_./-]+$`)
)

// splitCells splits a markdown table row into its cells, ignoring '|'
// inside code spans and escaped as "\|".
func splitCells(line string) []string {
	s := strings.TrimSpace(line)
	s = strings.TrimPrefix(s, "|")
	s = strings.TrimSuffix(s, "|")
	var cells []string
	var cur strings.Builder
	inCode := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\\' && i+1 < len(s) && s[i+1] == '|':
			cur.WriteString(`\|`)
			i++
		case c == '`':
			inCode = !inCode
			cur.WriteByte(c)
		case c == '|' && !inCode:
			cells = append(cells, strings.TrimSpace(cur.String()))
			cur.Reset()
		default:
			cur.WriteByte(c)
		}
	}
	return append(cells, strings.TrimSpace(cur.String()))
}

func isSeparator(cells []string) bool {
	for _, c := range cells {
		if strings.Trim(c, ":-") != "" || !strings.Contains(c, "-") {
			return false
		}
	}
	return len(cells) > 0
}

// table is one markdown table: its header line and its column indexes.
type table struct {
	statusCol, testCol int // -1 when absent
}

func headerOf(cells []string) table {
	t := table{statusCol: -1, testCol: -1}
	for i, c := range cells {
		h := strings.ToLower(strings.TrimSpace(c))
		switch {
		case h == "status":
			t.statusCol = i
		case strings.HasPrefix(h, "test"):
			t.testCol = i
		}
	}
	return t
}

// ParseContracts reads the contract tables of a CONTRACTS.md. root is the
// repository root, used to tell a package path from other code spans.
func ParseContracts(r io.Reader, root string) ([]Row, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	var rows []Row
	section := ""
	var lines []string
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		if strings.HasPrefix(line, "## ") {
			section = strings.TrimSpace(strings.TrimPrefix(line, "## "))
			continue
		}
		if !strings.HasPrefix(strings.TrimSpace(line), "|") || i+1 >= len(lines) || !isSeparator(splitCells(lines[i+1])) {
			continue
		}
		t := headerOf(splitCells(line))
		i += 2
		for ; i < len(lines) && strings.HasPrefix(strings.TrimSpace(lines[i]), "|"); i++ {
			cells := splitCells(lines[i])
			row := Row{Line: i + 1, Section: section, Contract: cells[0], HasCol: t.statusCol >= 0}
			if t.statusCol >= 0 && t.statusCol < len(cells) {
				row.Status = cells[t.statusCol]
			}
			tc := len(cells) - 1
			if t.testCol >= 0 && t.testCol < len(cells) {
				tc = t.testCol
			}
			row.TestCell = cells[tc]
			row.Refs = parseRefs(row.TestCell, root)
			rows = append(rows, row)
		}
		i--
	}
	return rows, nil
}

// parseRefs reads the names in a test cell. A package path sets the package
// for the test names after it; test names before any package in a segment
// (between ';') belong to every package named later in it ("`TestX*` in
// `a`, `b`"). Python test files without a directory are under python/tests.
func parseRefs(cell, root string) []Ref {
	p := &refParser{root: root}
	for _, seg := range strings.Split(cell, ";") {
		p.pending = nil
		for _, m := range codeSpan.FindAllStringSubmatch(seg, -1) {
			p.token(strings.TrimSpace(m[1]))
		}
		if p.pkg == "" || len(p.pending) > 0 && !anyAssigned(p.refs, p.pending) {
			for _, t := range p.pending {
				p.refs = append(p.refs, Ref{Kind: RefGoTest, Name: t})
			}
		}
	}
	return p.refs
}

// refParser reads the code spans of one cell: a test name refers to the
// package named last in the cell, or, within a segment, the one named
// after it.
type refParser struct {
	root    string
	pkg     string   // the package named last
	pending []string // test names of this segment before any package
	refs    []Ref
}

// token adds what code span tok names.
func (p *refParser) token(tok string) {
	switch {
	case testIdent.MatchString(tok):
		if p.pkg == "" {
			p.pending = append(p.pending, tok)
		} else {
			p.refs = append(p.refs, Ref{Kind: RefGoTest, Dir: p.pkg, Name: tok})
		}
	case pkgLike.MatchString(tok) && isGoDir(filepath.Join(p.root, tok)):
		p.pkg = tok
		for _, t := range p.pending {
			p.refs = append(p.refs, Ref{Kind: RefGoTest, Dir: p.pkg, Name: t})
		}
	case strings.HasSuffix(tok, ".py") && pathLike.MatchString(tok):
		if !strings.Contains(tok, "/") {
			tok = "python/tests/" + tok
		}
		p.refs = append(p.refs, Ref{Kind: RefPython, Name: tok})
	case strings.HasPrefix(tok, "testdata/") && pathLike.MatchString(tok):
		p.refs = append(p.refs, Ref{Kind: RefFile, Name: filepath.ToSlash(filepath.Join(p.pkg, tok))})
	case strings.Contains(tok, "/") && filepath.Ext(tok) != "" && pathLike.MatchString(tok):
		p.refs = append(p.refs, Ref{Kind: RefFile, Name: strings.TrimPrefix(tok, "./")})
	}
}

func anyAssigned(refs []Ref, names []string) bool {
	for _, r := range refs {
		if r.Kind == RefGoTest && r.Dir != "" && r.Name == names[0] {
			return true
		}
	}
	return false
}

func isGoDir(dir string) bool {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, e := range ents {
		if !e.IsDir() && strings.HasSuffix(e.Name(), ".go") {
			return true
		}
	}
	return false
}

var testFunc = regexp.MustCompile(`(?m)^func ((?:Test|Fuzz|Benchmark|Example)[A-Za-z0-9_]*)\(`)

// TestIndex maps a package directory (relative to the root, slash
// separated) to the test functions its _test.go files declare.
type TestIndex map[string]map[string]bool

// IndexTests walks root for _test.go files, skipping what the go tool skips
// (directories starting with '.' or '_', testdata, vendor).
func IndexTests(root string) (TestIndex, error) {
	idx := TestIndex{}
	err := walkGo(root, func(rel, name string, b []byte) {
		if !strings.HasSuffix(name, "_test.go") {
			return
		}
		for _, m := range testFunc.FindAllSubmatch(b, -1) {
			if idx[rel] == nil {
				idx[rel] = map[string]bool{}
			}
			idx[rel][string(m[1])] = true
		}
	})
	return idx, err
}

// match returns the tests of dir the (possibly wildcard) name denotes.
func (idx TestIndex) match(dir, name string) []string {
	var out []string
	if prefix, ok := strings.CutSuffix(name, "*"); ok {
		for n := range idx[dir] {
			if strings.HasPrefix(n, prefix) {
				out = append(out, n)
			}
		}
		sort.Strings(out)
		return out
	}
	if idx[dir][name] {
		out = append(out, name)
	}
	return out
}

// Outcome is what a run saw of one test: "pass", "fail" or "skip".
type Outcome string

// Ran records the outcome of top-level Go tests by package directory and
// name, and of Python test modules by file; nil maps mean "not run".
type Ran struct {
	Go     map[string]map[string]Outcome // dir → test → outcome
	Python map[string]Outcome            // python/tests/x.py → outcome
}

// testEvent is the part of a `go test -json` event the check reads.
type testEvent struct {
	Action  string
	Package string
	Test    string
}

// AddGoTestJSON reads a `go test -json` stream (other lines are ignored)
// and records each top-level test's final action. modPath is the module
// path, to turn import paths into directories.
func (r *Ran) AddGoTestJSON(rd io.Reader, modPath string) error {
	if r.Go == nil {
		r.Go = map[string]map[string]Outcome{}
	}
	sc := bufio.NewScanner(rd)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if len(line) == 0 || line[0] != '{' {
			continue
		}
		var ev testEvent
		if json.Unmarshal(line, &ev) != nil || ev.Test == "" || strings.Contains(ev.Test, "/") {
			continue
		}
		switch ev.Action {
		case "pass", "fail", "skip":
		default:
			continue
		}
		dir := strings.TrimPrefix(strings.TrimPrefix(ev.Package, modPath), "/")
		if ev.Package == modPath {
			dir = "."
		}
		if r.Go[dir] == nil {
			r.Go[dir] = map[string]Outcome{}
		}
		// A failure anywhere (another run of the same test) wins.
		if r.Go[dir][ev.Test] != "fail" {
			r.Go[dir][ev.Test] = Outcome(ev.Action)
		}
	}
	return sc.Err()
}

var (
	pyFailed = regexp.MustCompile(`^(?:FAIL|ERROR): \S+ \((test_[A-Za-z0-9_]+)\.`)
	pyStatus = regexp.MustCompile(`\((test_[A-Za-z0-9_]+)\.[^)]*\)(?:\n.*?)? \.\.\. (ok|skipped|FAIL|ERROR|expected failure|unexpected success)`)
)

// AddPythonLog reads a `python3 -m unittest -v` log and records, per test
// module, "fail" if any of its tests failed or errored, else "pass" if any
// passed, else "skip".
func (r *Ran) AddPythonLog(log string) {
	if r.Python == nil {
		r.Python = map[string]Outcome{}
	}
	set := func(mod string, o Outcome) {
		key := "python/tests/" + mod + ".py"
		switch cur := r.Python[key]; {
		case cur == "fail":
		case o == "fail", cur == "":
			r.Python[key] = o
		case o == "pass":
			r.Python[key] = "pass"
		}
	}
	for _, m := range pyStatus.FindAllStringSubmatch(log, -1) {
		switch m[2] {
		case "ok", "expected failure":
			set(m[1], "pass")
		case "skipped":
			set(m[1], "skip")
		default:
			set(m[1], "fail")
		}
	}
	for _, line := range strings.Split(log, "\n") {
		if m := pyFailed.FindStringSubmatch(line); m != nil {
			set(m[1], "fail")
		}
	}
}

// Problem is one finding of the contracts check.
type Problem struct {
	Line int
	What string
}

// CheckContracts checks every row: its status is one of the three, it names
// at least one test, every named test and file exists, and, where ran has
// results (nil maps: not checked), every named Go test and Python file ran
// and passed. It returns the problems, sorted by line.
func CheckContracts(rows []Row, idx TestIndex, root string, ran Ran) []Problem {
	var ps []Problem
	for _, r := range rows {
		c := rowCheck{ps: &ps, r: r}
		switch {
		case !r.HasCol:
			c.add("table has no status column (run: go run ./tools/cmd/regress contracts-column -w docs/CONTRACTS.md)")
		case r.Status != StatusPass && r.Status != StatusRequiredCPU && r.Status != StatusNotRunHardware:
			c.add("status %q is not PASS, REQUIRED_CPU or NOT_RUN_HARDWARE", r.Status)
		}
		named := 0
		for _, ref := range r.Refs {
			switch ref.Kind {
			case RefGoTest:
				named++
				c.goTest(ref, idx, ran)
			case RefPython:
				named++
				c.pythonTest(ref, root, ran)
			case RefFile:
				if _, err := os.Stat(filepath.Join(root, ref.Name)); err != nil {
					c.add("file %s does not exist", ref.Name)
				}
			}
		}
		if named == 0 {
			c.add("row names no test (a `pkg` `TestName` or a python/tests file)")
		}
	}
	sort.SliceStable(ps, func(i, j int) bool { return ps[i].Line < ps[j].Line })
	return ps
}

// rowCheck collects the problems of one row.
type rowCheck struct {
	ps *[]Problem
	r  Row
}

func (c rowCheck) add(format string, args ...any) {
	*c.ps = append(*c.ps, Problem{Line: c.r.Line, What: fmt.Sprintf(format, args...)})
}

// goTest checks that the Go tests ref names exist and, with a run's
// outcomes, that each ran and passed (benchmarks and examples need only
// exist).
func (c rowCheck) goTest(ref Ref, idx TestIndex, ran Ran) {
	if ref.Dir == "" {
		c.add("test %s: no package named before it", ref.Name)
		return
	}
	got := idx.match(ref.Dir, ref.Name)
	if len(got) == 0 {
		c.add("test %s does not exist (no func %s in %s/*_test.go)", ref, strings.TrimSuffix(ref.Name, "*"), ref.Dir)
		return
	}
	if ran.Go == nil || strings.HasPrefix(ref.Name, "Benchmark") || strings.HasPrefix(ref.Name, "Example") {
		return
	}
	for _, n := range got {
		switch o := ran.Go[ref.Dir][n]; o {
		case "pass":
		case "":
			c.add("test %s/%s did not run", ref.Dir, n)
		default:
			c.add("test %s/%s: %s", ref.Dir, n, o)
		}
	}
}

// pythonTest checks that the python test ref names exists and, with a
// run's outcomes, that it ran and passed.
func (c rowCheck) pythonTest(ref Ref, root string, ran Ran) {
	if _, err := os.Stat(filepath.Join(root, ref.Name)); err != nil {
		c.add("python test %s does not exist", ref.Name)
		return
	}
	if ran.Python == nil {
		return
	}
	switch o := ran.Python[ref.Name]; o {
	case "pass":
	case "":
		c.add("python test %s did not run", ref.Name)
	default:
		c.add("python test %s: %s", ref.Name, o)
	}
}
