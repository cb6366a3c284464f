package regress

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// contractsTree is a tiny tree with two packages and a python test file.
func contractsTree(t *testing.T) string {
	return tinyModule(t, map[string]string{
		"a/a_test.go":                   "package a\n\nimport \"testing\"\n\nfunc TestOne(t *testing.T) {}\n\nfunc TestDegradeX(t *testing.T) {}\n\nfunc FuzzDecode(f *testing.F) {}\n",
		"b/b_test.go":                   "package b\n\nimport \"testing\"\n\nfunc TestDegradeY(t *testing.T) {}\n",
		"a/testdata/s.txt":              "script\n",
		"python/tests/test_thing.py":    "# test\n",
		"python/tests/test_another.py":  "# test\n",
		"bench/soak.sh":                 "#!/bin/sh\n",
		"cmd/tool/main.go":              "package main\n\nfunc main() {}\n",
		"cmd/tool/main_test.go":         "package main\n\nimport \"testing\"\n\nfunc TestTool(t *testing.T) {}\n",
		"internal/deep/x/x.go":          "package x\n",
		"internal/deep/x/x_test.go":     "package x\n\nimport \"testing\"\n\nfunc TestDeep(t *testing.T) {}\n",
		"a/testdata/ignored/z_test.go":  "package z\n\nimport \"testing\"\n\nfunc TestIgnored(t *testing.T) {}\n",
		"b/helper.go":                   "package b\n\nfunc TestLooksLikeOne() {}\n",
		"python/tests/fakeclient.py":    "# helper\n",
		"docs/placeholder_for_root.txt": "",
	})
}

func TestParseContractRefs(t *testing.T) {
	root := contractsTree(t)
	for _, tc := range []struct {
		cell string
		want []string
	}{
		{"`a` `TestOne`, `FuzzDecode` (`testdata/s.txt`)", []string{"a.TestOne", "a.FuzzDecode", "a/testdata/s.txt"}},
		{"`TestDegrade*` in `a`, `b` (table); `internal/deep/x` `TestDeep`", []string{"a.TestDegrade*", "b.TestDegrade*", "internal/deep/x.TestDeep"}},
		{"`a` `TestOne`; over the wire: `cmd/tool` `TestTool` (`-tags x`, `fillFunc`, `seal_hot_reads`)", []string{"a.TestOne", "cmd/tool.TestTool"}},
		{"`python/tests/test_thing.py` (real), `test_another.py`; `bench/soak.sh`", []string{"python/tests/test_thing.py", "python/tests/test_another.py", "bench/soak.sh"}},
		{"`TestOrphan` alone", []string{"TestOrphan (no package named before it)"}},
	} {
		var got []string
		for _, r := range parseRefs(tc.cell, root) {
			got = append(got, r.String())
		}
		if strings.Join(got, " ") != strings.Join(tc.want, " ") {
			t.Errorf("%s:\n got %q\nwant %q", tc.cell, got, tc.want)
		}
	}
	if cells := splitCells("| a `x|y` b | REQUIRED_CPU | c \\| d |"); len(cells) != 3 || cells[0] != "a `x|y` b" {
		t.Errorf("splitCells: %q", cells)
	}
}

const contractsDoc = `# Contracts

## Good
| contract | status | test |
|---|---|---|
| one | REQUIRED_CPU | ` + "`a` `TestOne`, `FuzzDecode`" + ` |
| degrade | PASS | ` + "`TestDegrade*` in `a`, `b`" + ` |
| hw | NOT_RUN_HARDWARE | ` + "`internal/deep/x` `TestDeep`" + ` |
| py | REQUIRED_CPU | ` + "`python/tests/test_thing.py`" + ` |

## Bad
| contract | status | test |
|---|---|---|
| missing test | REQUIRED_CPU | ` + "`a` `TestMissing`" + ` |
| bad status | DONE | ` + "`a` `TestOne`" + ` |
| no test | REQUIRED_CPU | the membership tests |
| testdata only helper | REQUIRED_CPU | ` + "`b` `TestIgnored`, `TestLooksLikeOne`" + ` |
| missing python | REQUIRED_CPU | ` + "`python/tests/test_gone.py`" + ` |
| missing file | REQUIRED_CPU | ` + "`a` `TestOne`, `testdata/nope.txt`" + ` |
| no wildcard match | REQUIRED_CPU | ` + "`b` `TestNothing*`" + ` |

## No column
| contract | test |
|---|---|
| old row | ` + "`a` `TestOne`" + ` |
`

func parseDoc(t *testing.T, root, doc string) []Row {
	t.Helper()
	rows, err := ParseContracts(strings.NewReader(doc), root)
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

// The check: a row naming a missing test, a bad or missing status, a row
// naming no test, a missing python file or testdata file, a wildcard with no
// match, each is a problem on its line; good rows are not. With a run's
// results, a named test that did not run, failed or skipped is a problem.
func TestContractsCheck(t *testing.T) {
	root := contractsTree(t)
	rows := parseDoc(t, root, contractsDoc)
	if len(rows) != 12 {
		t.Fatalf("%d rows", len(rows))
	}
	idx, err := IndexTests(root)
	if err != nil {
		t.Fatal(err)
	}
	ps := CheckContracts(rows, idx, root, Ran{})
	got := map[int]string{}
	for _, p := range ps {
		got[p.Line] += p.What + "; "
	}
	want := map[int]string{
		14: "test a.TestMissing does not exist",
		15: `status "DONE"`,
		16: "row names no test",
		17: "test b.TestIgnored does not exist",
		18: "python test python/tests/test_gone.py does not exist",
		19: "file a/testdata/nope.txt does not exist",
		20: "test b.TestNothing* does not exist",
		25: "table has no status column",
	}
	for line, w := range want {
		if !strings.Contains(got[line], w) {
			t.Errorf("line %d: got %q, want %q", line, got[line], w)
		}
	}
	if !strings.Contains(got[17], "TestLooksLikeOne does not exist") {
		t.Errorf("a non-test file's func counted as a test: %q", got[17])
	}
	for line := range got {
		if _, ok := want[line]; !ok {
			t.Errorf("unexpected problem on line %d: %s", line, got[line])
		}
	}

	// With a run: the good rows' tests must have run and passed.
	good := rows[:4]
	ran := Ran{Go: map[string]map[string]Outcome{}}
	stream := `{"Action":"run","Package":"example.com/tiny/a","Test":"TestOne"}
{"Action":"pass","Package":"example.com/tiny/a","Test":"TestOne"}
{"Action":"pass","Package":"example.com/tiny/a","Test":"FuzzDecode"}
{"Action":"fail","Package":"example.com/tiny/a","Test":"TestDegradeX/sub"}
{"Action":"pass","Package":"example.com/tiny/a","Test":"TestDegradeX"}
{"Action":"skip","Package":"example.com/tiny/b","Test":"TestDegradeY"}
# a build error line
{"Action":"fail","Package":"example.com/tiny/internal/deep/x","Test":"TestDeep"}
`
	if err := ran.AddGoTestJSON(strings.NewReader(stream), "example.com/tiny"); err != nil {
		t.Fatal(err)
	}
	ran.AddPythonLog("test_a (test_thing.T.test_a) ... ok\n")
	ps = CheckContracts(good, idx, root, ran)
	var what []string
	for _, p := range ps {
		what = append(what, p.What)
	}
	joined := strings.Join(what, "\n")
	for _, w := range []string{"test b/TestDegradeY: skip", "test internal/deep/x/TestDeep: fail"} {
		if !strings.Contains(joined, w) {
			t.Errorf("missing %q in:\n%s", w, joined)
		}
	}
	if len(ps) != 2 {
		t.Errorf("problems:\n%s", joined)
	}
	delete(ran.Go["a"], "TestOne")
	ran.Python = map[string]Outcome{}
	ps = CheckContracts(good[:1], idx, root, ran)
	if len(ps) != 1 || ps[0].What != "test a/TestOne did not run" {
		t.Errorf("not run: %+v", ps)
	}
	ps = CheckContracts(good[3:4], idx, root, ran)
	if len(ps) != 1 || !strings.Contains(ps[0].What, "test_thing.py did not run") {
		t.Errorf("python not run: %+v", ps)
	}
}

func TestAddPythonLog(t *testing.T) {
	var r Ran
	r.AddPythonLog(`test_a (test_one.A.test_a) ... ok
test_b (test_one.A.test_b) ... FAIL
test_c (test_two.B.test_c)
A docstring ... ok
test_d (test_three.C.test_d) ... skipped 'no torch'
test_e (test_four.D.test_e) ... ok

======================================================================
ERROR: test_f (test_four.D.test_f)
----------------------------------------------------------------------
`)
	want := map[string]Outcome{"python/tests/test_one.py": "fail", "python/tests/test_two.py": "pass",
		"python/tests/test_three.py": "skip", "python/tests/test_four.py": "fail"}
	for k, v := range want {
		if r.Python[k] != v {
			t.Errorf("%s: %q, want %q", k, r.Python[k], v)
		}
	}
}

// The column script: a table without the column gets it (REQUIRED_CPU, or
// NOT_RUN_HARDWARE where the test cell says so); a table with it keeps its
// statuses and fills a row added without one; rerunning changes nothing;
// with results, rows whose tests passed become PASS and back.
func TestStatusColumnIsMechanical(t *testing.T) {
	root := contractsTree(t)
	in := "# C\n\ntext | not a table\n\n## Old\n| contract | test |\n|---|---|\n" +
		"| one | `a` `TestOne` |\n| hw | `a` `TestOne` (NOT_RUN_HARDWARE: no device) |\n\n" +
		"## New\n| contract | status | test |\n|---|---|---|\n| kept | NOT_RUN_HARDWARE | `a` `TestOne` |\n| added later | `b` `TestDegradeY` |\n"
	out := AddStatusColumn(in, root, nil)
	want := "# C\n\ntext | not a table\n\n## Old\n| contract | status | test |\n|---|---|---|\n" +
		"| one | REQUIRED_CPU | `a` `TestOne` |\n| hw | NOT_RUN_HARDWARE | `a` `TestOne` (NOT_RUN_HARDWARE: no device) |\n\n" +
		"## New\n| contract | status | test |\n|---|---|---|\n| kept | NOT_RUN_HARDWARE | `a` `TestOne` |\n| added later | REQUIRED_CPU | `b` `TestDegradeY` |\n"
	if out != want {
		t.Fatalf("got:\n%s\nwant:\n%s", out, want)
	}
	if again := AddStatusColumn(out, root, nil); again != out {
		t.Fatalf("not idempotent:\n%s", again)
	}
	passed := func(r Row) bool { return strings.Contains(r.TestCell, "TestOne") }
	stamped := AddStatusColumn(out, root, passed)
	if !strings.Contains(stamped, "| one | PASS |") || !strings.Contains(stamped, "| added later | REQUIRED_CPU |") ||
		!strings.Contains(stamped, "| kept | NOT_RUN_HARDWARE |") || !strings.Contains(stamped, "| hw | NOT_RUN_HARDWARE |") {
		t.Fatalf("stamped:\n%s", stamped)
	}
	if back := AddStatusColumn(stamped, root, func(Row) bool { return false }); back != out {
		t.Fatalf("PASS not withdrawn:\n%s", back)
	}
}

// The repository's own matrix: every row has a status and every test it
// names exists (whether they ran is the runner's contracts gate).
func TestRepoContracts(t *testing.T) {
	root := filepath.Join("..", "..", "..") // tools/internal/regress: the repository root
	f, err := os.Open(filepath.Join(root, "docs", "CONTRACTS.md"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows, err := ParseContracts(f, root)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := IndexTests(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) < 100 {
		t.Fatalf("only %d rows parsed", len(rows))
	}
	for _, p := range CheckContracts(rows, idx, root, Ran{}) {
		t.Errorf("docs/CONTRACTS.md:%d: %s", p.Line, p.What)
	}
}
