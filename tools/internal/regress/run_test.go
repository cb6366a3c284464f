package regress

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// tinyModule writes a small module under a fresh directory: files maps a
// relative path to its contents. It returns the root.
func tinyModule(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	all := map[string]string{"go.mod": "module example.com/tiny\n\ngo 1.26\n"}
	for k, v := range files {
		all[k] = v
	}
	for name, body := range all {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func readResults(t *testing.T, out string) Report {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(out, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rep Report
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatalf("results.json: %v", err)
	}
	return rep
}

func gateOf(t *testing.T, rep Report, name string) Result {
	t.Helper()
	for _, g := range rep.Gates {
		if g.Name == name {
			return g
		}
	}
	t.Fatalf("no gate %q in results.json", name)
	return Result{}
}

// parseJUnit parses junit.xml with encoding/xml and returns its cases.
func parseJUnit(t *testing.T, out string) []junitCase {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(out, "junit.xml"))
	if err != nil {
		t.Fatal(err)
	}
	var s junitSuites
	if err := xml.Unmarshal(b, &s); err != nil {
		t.Fatalf("junit.xml does not parse: %v\n%s", err, b)
	}
	if len(s.Suites) != 1 {
		t.Fatalf("junit.xml: %d suites", len(s.Suites))
	}
	return s.Suites[0].Cases
}

const formatted = "package tiny\n\n// Two returns 2.\nfunc Two() int { return 2 }\n"

// A gofmt violation in a tiny module: the gofmt gate fails, and the failure
// is in results.json (status, exit code, reason, log file), in the log, in
// summary.md and as a junit failure carrying the log's tail; another failing
// command keeps its exit code; the runner exits 1.
func TestFailingGateIsRecordedWithItsLog(t *testing.T) {
	root := tinyModule(t, map[string]string{"a.go": "package tiny\nfunc Two() int {   return 2 }\n"})
	out := filepath.Join(t.TempDir(), "out")
	var stdout, stderr bytes.Buffer
	code := Main(context.Background(), []string{"--root", root, "--out", out, "--gates", "gofmt,vet"}, &stdout, &stderr)
	if code != 1 {
		t.Fatalf("exit %d, want 1\n%s%s", code, stdout.String(), stderr.String())
	}
	rep := readResults(t, out)
	if rep.Failed != 1 || rep.Passed != 1 || len(rep.Gates) != 2 {
		t.Fatalf("results: %+v", rep)
	}
	g := gateOf(t, rep, "gofmt")
	if g.Status != Fail || !strings.Contains(g.Reason, "a.go") || g.Command != "gofmt -l ." || g.Log != "logs/gofmt.log" {
		t.Fatalf("gofmt result %+v", g)
	}
	if log, err := os.ReadFile(filepath.Join(out, g.Log)); err != nil || strings.TrimSpace(string(log)) != "a.go" {
		t.Fatalf("gofmt log %q %v", log, err)
	}
	if v := gateOf(t, rep, "vet"); v.Status != Pass || v.ExitCode != 0 {
		t.Fatalf("vet result %+v", v)
	}
	sum, _ := os.ReadFile(filepath.Join(out, "summary.md"))
	if !strings.Contains(string(sum), "# gpucache regression run: FAIL") || !strings.Contains(string(sum), "| gofmt | FAIL |") {
		t.Fatalf("summary.md:\n%s", sum)
	}
	var failure *junitMessage
	for _, c := range parseJUnit(t, out) {
		if c.Name == "gofmt" {
			failure = c.Failure
		} else if c.Failure != nil {
			t.Fatalf("junit: %s failed", c.Name)
		}
	}
	if failure == nil || !strings.Contains(failure.Body, "a.go") || !strings.Contains(failure.Message, "output not empty") {
		t.Fatalf("junit failure %+v", failure)
	}

	// A command that exits non-zero: its code and output are kept; a gate
	// needing it fails without running.
	out2 := filepath.Join(t.TempDir(), "out")
	rep2, err := Run(context.Background(), Options{Root: root, Out: out2, gates: []Gate{
		{Name: "boom", Cmd: []string{"sh", "-c", "echo line-one; echo the-cause >&2; exit 3"}},
		{Name: "after", Cmd: []string{"true"}, Needs: []string{"boom"}},
		{Name: "skipped", Cmd: []string{"true"}, Skip: "not here"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if b := rep2.Gates[0]; b.Status != Fail || b.ExitCode != 3 || !strings.Contains(b.tail, "the-cause") || b.Reason != "exit 3: the-cause" {
		t.Fatalf("boom %+v", b)
	}
	if a := rep2.Gates[1]; a.Status != Fail || !strings.Contains(a.Reason, "needs gate boom") {
		t.Fatalf("after %+v", a)
	}
	if s := rep2.Gates[2]; s.Status != Skip || s.Reason != "not here" {
		t.Fatalf("skipped %+v", s)
	}
	cases := parseJUnit(t, out2)
	if cases[0].Failure == nil || !strings.Contains(cases[0].Failure.Body, "line-one") || cases[2].Skipped == nil {
		t.Fatalf("junit cases %+v", cases)
	}
}

// A passing run on a tiny module (in a git repository) writes the five
// artifacts: environment.json with the commit and a clean tree,
// capabilities.json saying doctor was not run, results.json, summary.md and
// a junit.xml that encoding/xml and Python's xml.etree parse. The contracts
// gate sees the test the matrix names run and pass in the go test -json log.
func TestRunWritesAllArtifacts(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not installed")
	}
	root := tinyModule(t, map[string]string{
		"a.go":        formatted,
		"p/p.go":      strings.Replace(formatted, "package tiny", "package p", 1),
		"p/p_test.go": "package p\n\nimport \"testing\"\n\nfunc TestTwo(t *testing.T) {\n\tif Two() != 2 {\n\t\tt.Fatal(Two())\n\t}\n}\n",
		"docs/CONTRACTS.md": "# c\n\n## Tiny\n| contract | status | test |\n|---|---|---|\n" +
			"| Two is two | REQUIRED_CPU | `p` `TestTwo` |\n",
		".gitignore": "/out/\n",
	})
	git := func(args ...string) {
		cmd := exec.Command("git", append([]string{"-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "commit.gpgsign=false"}, args...)...)
		cmd.Dir = root
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, b)
		}
	}
	git("init", "-q")
	git("add", "-A")
	git("commit", "-q", "-m", "tiny")
	out := filepath.Join(root, "out")
	rep, err := Run(context.Background(), Options{Root: root, Out: out, gates: []Gate{
		{Name: "gofmt", Cmd: []string{"gofmt", "-l", "."}, EmptyOutput: true},
		{Name: "race", Cmd: []string{"go", "test", "-count=1", "-json", "./..."}, JSON: true},
		{Name: "contracts", Func: contractsGate, Command: "contracts"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Failed != 0 || rep.Passed != 3 {
		b, _ := os.ReadFile(filepath.Join(out, "logs", "contracts.log"))
		t.Fatalf("results %+v\n%s", rep, b)
	}
	for _, name := range []string{"environment.json", "capabilities.json", "results.json", "summary.md", "junit.xml"} {
		if st, err := os.Stat(filepath.Join(out, name)); err != nil || st.Size() == 0 {
			t.Fatalf("%s: %v", name, err)
		}
	}
	var env Environment
	b, _ := os.ReadFile(filepath.Join(out, "environment.json"))
	if err := json.Unmarshal(b, &env); err != nil {
		t.Fatal(err)
	}
	if len(env.Commit) != 40 || env.CleanTree == nil || !*env.CleanTree || env.GoVersion == "" || env.CPUCount < 1 || env.CPUModel == "" {
		t.Fatalf("environment.json %+v", env)
	}
	var caps Capabilities
	b, _ = os.ReadFile(filepath.Join(out, "capabilities.json"))
	if err := json.Unmarshal(b, &caps); err != nil || caps.Collected || !strings.Contains(caps.Reason, "not selected") {
		t.Fatalf("capabilities.json %s %v", b, err)
	}
	if cases := parseJUnit(t, out); len(cases) != 3 {
		t.Fatalf("junit cases %+v", cases)
	}
	clog, _ := os.ReadFile(filepath.Join(out, "logs", "contracts.log"))
	if strings.Contains(string(clog), "Go tests checked for existence only") || !strings.Contains(string(clog), "REQUIRED_CPU=1") {
		t.Fatalf("contracts log:\n%s", clog)
	}
	if _, err := os.Stat("/usr/bin/python3"); err == nil {
		py := exec.Command("/usr/bin/python3", "-c",
			"import sys, xml.etree.ElementTree as E; r = E.parse(sys.argv[1]).getroot(); print(len(r.findall('./testsuite/testcase')))",
			filepath.Join(out, "junit.xml"))
		b, err := py.CombinedOutput()
		if err != nil || strings.TrimSpace(string(b)) != "3" {
			t.Fatalf("python xml.etree: %v %s", err, b)
		}
	}
}

// The doctor gate validates the JSON shape, and capabilities.json carries
// its checks; absent doctor (an unknown command) fails with a reason and
// capabilities.json says it was not collected.
func TestCapabilitiesFromDoctor(t *testing.T) {
	root := tinyModule(t, map[string]string{"a.go": formatted})
	for _, tc := range []struct {
		name, script string
		collected    bool
	}{
		{"present", `echo '{"checks":[{"name":"cpu.aes","status":"OK","detail":"AES-NI"},{"name":"rdma","status":"NOT_RUN_HARDWARE","detail":"no device"}]}'`, true},
		{"absent", `echo 'gpucache: unknown command "doctor"' >&2; exit 2`, false},
		{"bad status", `echo '{"checks":[{"name":"x","status":"FINE","detail":""}]}'`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "out")
			rep, err := Run(context.Background(), Options{Root: root, Out: out, gates: []Gate{{Name: "doctor", Cmd: []string{"sh", "-c", tc.script}}}})
			if err != nil {
				t.Fatal(err)
			}
			var caps Capabilities
			b, _ := os.ReadFile(filepath.Join(out, "capabilities.json"))
			if err := json.Unmarshal(b, &caps); err != nil {
				t.Fatal(err)
			}
			if caps.Collected != tc.collected || (rep.Gates[0].Status == Pass) != tc.collected {
				t.Fatalf("capabilities %s; gate %+v", b, rep.Gates[0])
			}
			if tc.collected && !strings.Contains(string(caps.Checks), "NOT_RUN_HARDWARE") {
				t.Fatalf("checks %s", caps.Checks)
			}
			if !tc.collected && caps.Reason == "" {
				t.Fatalf("no reason: %s", b)
			}
		})
	}
}

// --gates selects by name or prefix and adds what a gate needs; an unknown
// gate and an unknown profile are usage errors (exit 2).
func TestSelectGates(t *testing.T) {
	all := []Gate{{Name: "build"}, {Name: "demo/shard", Needs: []string{"build"}}, {Name: "demo/cold", Needs: []string{"build"}}, {Name: "vet"}}
	got, err := selectGates(all, []string{"demo"})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, g := range got {
		names = append(names, g.Name)
	}
	if strings.Join(names, ",") != "build,demo/shard,demo/cold" {
		t.Fatalf("selected %v", names)
	}
	if _, err := selectGates(all, []string{"nope"}); err == nil {
		t.Fatal("unknown gate accepted")
	}
	root := tinyModule(t, nil)
	var o, e bytes.Buffer
	if code := Main(context.Background(), []string{"--root", root, "--out", t.TempDir(), "--gates", "nope"}, &o, &e); code != 2 || !strings.Contains(e.String(), `no gate "nope"`) {
		t.Fatalf("exit %d: %s", code, e.String())
	}
	if code := Main(context.Background(), []string{"--root", root, "--out", t.TempDir(), "--profile", "gpu"}, &o, &e); code != 2 {
		t.Fatalf("profile gpu: exit %d", code)
	}
}

// The cpu profile has every gate the issue names, a fuzz gate per target,
// and the demos with their labels.
func TestCPUProfileGates(t *testing.T) {
	root := tinyModule(t, map[string]string{
		"p/f_test.go": "package p\n\nimport \"testing\"\n\nfunc FuzzA(f *testing.F) { f.Fuzz(func(t *testing.T, b []byte) {}) }\n\nfunc FuzzB(f *testing.F) { f.Fuzz(func(t *testing.T, b []byte) {}) }\n",
		"q/t.go":      "//go:build rdma_nixl\n\npackage q\n",
	})
	names := map[string]Gate{}
	for _, g := range cpuGates(Options{Root: root, FuzzExecs: 50}) {
		names[g.Name] = g
	}
	for _, want := range []string{"gofmt", "vet", "staticcheck", "race", "tags/rdma_nixl/build", "tags/rdma_nixl/test", "tags/dpu_bf3/build",
		"demo/shard", "demo/cold", "demo/dpu", "doctor", "fuzz/p/FuzzA", "fuzz/p/FuzzB", "bench/go", "bench/cli", "python", "contracts"} {
		if _, ok := names[want]; !ok {
			t.Errorf("no gate %s", want)
		}
	}
	if g := names["fuzz/p/FuzzA"]; strings.Join(g.Cmd, " ") != "go test -run ^$ -fuzz ^FuzzA$ -fuzztime 50x ./p" {
		t.Errorf("fuzz cmd %v", g.Cmd)
	}
	if g := names["tags/rdma_nixl/test"]; g.Skip != "" || g.Cmd[len(g.Cmd)-1] != "./q" {
		t.Errorf("rdma test %+v", g)
	}
	if g := names["tags/dpu_bf3/test"]; g.Skip == "" {
		t.Errorf("dpu_bf3 test not skipped without tagged packages: %+v", g)
	}
	if g := names["demo/dpu"]; strings.Join(g.Expect, " ") != "offload_active=false hardware=NOT_RUN_HARDWARE" {
		t.Errorf("dpu labels %v", g.Expect)
	}
	if g := names["python"]; g.Skip == "" {
		t.Errorf("python gate not skipped without python/tests")
	}
}

// --offline: with a module missing from the module cache, the preflight
// gate fails naming the cause, and every later gate fails pointing at it
// instead of running.
func TestOfflineFailsClearlyOnAMissingModule(t *testing.T) {
	root := tinyModule(t, map[string]string{
		"go.mod": "module example.com/tiny\n\ngo 1.26\n\nrequire example.invalid/nothere v1.0.0\n",
		"a.go":   formatted,
	})
	out := filepath.Join(t.TempDir(), "out")
	rep, err := Run(context.Background(), Options{Root: root, Out: out, Offline: true, gates: []Gate{
		{Name: "vet", Cmd: []string{"go", "vet", "./..."}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Gates) != 2 || rep.Gates[0].Name != "offline/modules" {
		t.Fatalf("gates %+v", rep.Gates)
	}
	pre, vet := rep.Gates[0], rep.Gates[1]
	if pre.Status != Fail || !strings.Contains(pre.Reason, "missing from the module cache (GOPROXY=off)") {
		t.Fatalf("preflight %+v", pre)
	}
	if log, _ := os.ReadFile(filepath.Join(out, pre.Log)); !strings.Contains(string(log), "example.invalid/nothere") {
		t.Fatalf("preflight log:\n%s", log)
	}
	if vet.Status != Fail || !strings.Contains(vet.Reason, "see gate offline/modules") {
		t.Fatalf("vet %+v", vet)
	}
	var env Environment
	b, _ := os.ReadFile(filepath.Join(out, "environment.json"))
	if err := json.Unmarshal(b, &env); err != nil || env.GOPROXY != "off" || !strings.Contains(env.GOFLAGS, "-mod=mod") || !env.Offline {
		t.Fatalf("environment.json %s %v", b, err)
	}
}
