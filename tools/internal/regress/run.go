package regress

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"time"
)

// Statuses of a gate.
const (
	Pass = "PASS"
	Fail = "FAIL"
	Skip = "SKIP"
)

// Options configure a run.
type Options struct {
	Root      string   // repository root (default ".")
	Out       string   // artifact directory (created)
	Profile   string   // "cpu" (the only profile)
	Offline   bool     // GOFLAGS=-mod=mod, GOPROXY=off, and a module preflight gate
	Gates     []string // selectors: a gate name or a name prefix before '/' ("fuzz", "demo")
	FuzzExecs int      // executions per fuzz target (default 200)
	Progress  io.Writer
	// gates, when set, replaces the profile's gate list (tests).
	gates []Gate
}

// Result is one gate's record in results.json.
type Result struct {
	Name     string  `json:"name"`
	Command  string  `json:"command"`
	ExitCode int     `json:"exit_code"`
	Duration float64 `json:"duration_seconds"`
	Log      string  `json:"log"`
	Status   string  `json:"status"`
	Reason   string  `json:"reason,omitempty"`
	tail     string
}

// Report is a whole run.
type Report struct {
	Profile  string    `json:"profile"`
	Offline  bool      `json:"offline"`
	Selected []string  `json:"selected,omitempty"`
	Started  time.Time `json:"started"`
	Duration float64   `json:"duration_seconds"`
	Passed   int       `json:"passed"`
	Failed   int       `json:"failed"`
	Skipped  int       `json:"skipped"`
	Gates    []Result  `json:"gates"`
}

type runner struct {
	o       Options
	bin     string
	env     []string
	modPath string
	results map[string]*Result
	ran     Ran
	pyRan   bool
	doctor  []byte // doctor's stdout, for capabilities.json
}

// ErrUsage marks a bad option.
var ErrUsage = errors.New("gpucache/regress: usage")

// Run runs the selected gates in order and writes the five artifacts to
// o.Out. It returns the report; a failed gate is in the report, not an error.
func Run(ctx context.Context, o Options) (*Report, error) {
	if o.Root == "" {
		o.Root = "."
	}
	root, err := filepath.Abs(o.Root)
	if err != nil {
		return nil, err
	}
	o.Root = root
	if o.Profile == "" {
		o.Profile = "cpu"
	}
	if o.Profile != "cpu" {
		return nil, fmt.Errorf("%w: profile %q unknown (known: cpu)", ErrUsage, o.Profile)
	}
	if o.Out == "" {
		return nil, fmt.Errorf("%w: --out DIR is required", ErrUsage)
	}
	if o.FuzzExecs <= 0 {
		o.FuzzExecs = 200
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	out, err := filepath.Abs(o.Out)
	if err != nil {
		return nil, err
	}
	o.Out = out
	if err := os.MkdirAll(filepath.Join(out, "logs"), 0o755); err != nil {
		return nil, err
	}
	r := &runner{o: o, bin: filepath.Join(out, "bin"), results: map[string]*Result{}, modPath: modulePath(root)}
	r.env = os.Environ()
	if o.Offline {
		goflags := strings.TrimSpace(os.Getenv("GOFLAGS") + " -mod=mod")
		r.env = append(r.env, "GOFLAGS="+goflags, "GOPROXY=off")
	}
	env := environment(ctx, root, r.env, o) // before any gate writes to the tree
	all := o.gates
	if all == nil {
		all = cpuGates(o)
	}
	if o.Offline {
		all = append([]Gate{{Name: "offline/modules", Func: offlineModules, Command: "GOPROXY=off go mod download; go mod download " + strings.Replace(staticcheck, "/cmd/staticcheck", "", 1)}}, all...)
	}
	gates, err := selectGates(all, o.Gates)
	if err != nil {
		return nil, err
	}
	rep := r.runGates(ctx, gates)
	return rep, writeArtifacts(r, env, rep)
}

// runGates runs gates in order and counts their outcomes.
func (r *runner) runGates(ctx context.Context, gates []Gate) *Report {
	o := r.o
	rep := &Report{Profile: o.Profile, Offline: o.Offline, Selected: o.Gates, Started: time.Now().UTC()}
	for _, g := range gates {
		res := r.runGate(ctx, g)
		r.results[g.Name] = res
		fmt.Fprintf(o.Progress, "%-4s %-40s %6.1fs %s\n", res.Status, res.Name, res.Duration, res.Reason)
		rep.Gates = append(rep.Gates, *res)
		switch res.Status {
		case Pass:
			rep.Passed++
		case Fail:
			rep.Failed++
		default:
			rep.Skipped++
		}
	}
	rep.Duration = time.Since(rep.Started).Seconds()
	return rep
}

// selectGates keeps the gates the selectors name, plus the gates they need,
// in the profile's order.
func selectGates(all []Gate, sel []string) ([]Gate, error) {
	if len(sel) == 0 {
		return all, nil
	}
	byName := map[string]Gate{}
	for _, g := range all {
		byName[g.Name] = g
	}
	want := map[string]bool{}
	var add func(string)
	add = func(n string) {
		if want[n] {
			return
		}
		want[n] = true
		for _, d := range byName[n].Needs {
			add(d)
		}
	}
	for _, s := range sel {
		s = strings.TrimSpace(s)
		found := false
		for _, g := range all {
			if g.Name == s || strings.HasPrefix(g.Name, s+"/") {
				add(g.Name)
				found = true
			}
		}
		if !found {
			var names []string
			for _, g := range all {
				names = append(names, g.Name)
			}
			return nil, fmt.Errorf("%w: no gate %q (gates: %s)", ErrUsage, s, strings.Join(names, ", "))
		}
	}
	for n := range byName {
		if strings.HasPrefix(n, "offline/") {
			add(n)
		}
	}
	var out []Gate
	for _, g := range all {
		if want[g.Name] {
			out = append(out, g)
		}
	}
	return out, nil
}

func (r *runner) expand(s string) string { return strings.ReplaceAll(s, "{bin}", r.bin) }

func (r *runner) runGate(ctx context.Context, g Gate) *Result {
	logName := strings.NewReplacer("/", "_", " ", "_").Replace(g.Name) + ".log"
	res := &Result{Name: g.Name, Command: r.expand(strings.Join(g.Cmd, " ")), Log: filepath.Join("logs", logName)}
	if g.Func != nil {
		res.Command = r.expand(g.Command)
	}
	if len(g.Env) > 0 {
		res.Command = r.expand(strings.Join(g.Env, " ")) + " " + res.Command
	}
	logPath := filepath.Join(r.o.Out, res.Log)
	f, err := os.Create(logPath)
	if err != nil {
		res.Status, res.Reason, res.ExitCode = Fail, err.Error(), -1
		return res
	}
	defer f.Close()
	if r.blocked(g, res, f) {
		return res
	}
	timeout := g.Timeout
	if timeout == 0 {
		timeout = 10 * time.Minute
	}
	gctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var buf bytes.Buffer
	w := io.MultiWriter(f, &buf)
	start := time.Now()
	if g.Func != nil {
		code, err := g.Func(gctx, r, w)
		res.ExitCode = code
		if err != nil {
			res.Status, res.Reason = Fail, err.Error()
		}
	} else {
		r.runCmd(ctx, gctx, g, timeout, w, &buf, res)
	}
	res.Duration = time.Since(start).Seconds()
	if res.Status == "" {
		res.Status = Pass
	}
	if res.Status == Fail {
		if g.JSON {
			res.tail = failedTestOutput(buf.Bytes())
		}
		if res.tail == "" {
			res.tail = tail(buf.String(), 60, 8<<10)
		}
	}
	return res
}

// blocked settles a gate that does not run: one it needs failed, the
// module cache is incomplete, or it is skipped. It notes why in the log f.
func (r *runner) blocked(g Gate, res *Result, f io.Writer) bool {
	for _, d := range g.Needs {
		if dr := r.results[d]; dr != nil && dr.Status == Fail {
			res.Status, res.ExitCode = Fail, -1
			res.Reason = "needs gate " + d + ", which failed"
			fmt.Fprintln(f, res.Reason)
			return true
		}
	}
	if off := r.results["offline/modules"]; off != nil && off.Status == Fail && g.Name != "offline/modules" {
		res.Status, res.ExitCode = Fail, -1
		res.Reason = "offline: modules missing from the module cache (see gate offline/modules)"
		fmt.Fprintln(f, res.Reason)
		return true
	}
	if g.Skip != "" {
		res.Status, res.Reason = Skip, g.Skip
		fmt.Fprintln(f, "SKIP: "+g.Skip)
		return true
	}
	return false
}

// runCmd runs the command of gate g under gctx (its timeout), its output
// to w and buf, and judges its exit and output.
func (r *runner) runCmd(ctx, gctx context.Context, g Gate, timeout time.Duration, w io.Writer, buf *bytes.Buffer, res *Result) {
	argv := make([]string, len(g.Cmd))
	for i, a := range g.Cmd {
		argv[i] = r.expand(a)
	}
	cmd := exec.CommandContext(gctx, argv[0], argv[1:]...)
	cmd.Dir = r.o.Root
	cmd.Env = r.env
	for _, e := range g.Env {
		cmd.Env = append(cmd.Env, r.expand(e))
	}
	cmd.Stdout, cmd.Stderr = w, w
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	err := cmd.Run()
	res.ExitCode = exitCode(err)
	switch {
	case gctx.Err() != nil && ctx.Err() == nil:
		res.Status, res.Reason = Fail, fmt.Sprintf("timed out after %s", timeout)
	case err != nil && res.ExitCode >= 0:
		res.Status, res.Reason = Fail, fmt.Sprintf("exit %d: %s", res.ExitCode, lastLine(buf.String()))
	case err != nil:
		res.Status, res.Reason = Fail, err.Error()
	case g.EmptyOutput && strings.TrimSpace(buf.String()) != "":
		res.Status, res.Reason = Fail, "output not empty: "+firstLine(buf.String())
	}
	r.judgeOutput(g, buf, res)
}

// judgeOutput checks the output of gate g for its expected labels, and
// hands it to the gates that read it (go test JSON, python, doctor).
func (r *runner) judgeOutput(g Gate, buf *bytes.Buffer, res *Result) {
	if res.Status == "" {
		for _, want := range g.Expect {
			if !strings.Contains(buf.String(), want) {
				res.Status, res.Reason = Fail, fmt.Sprintf("output lacks the label %q", want)
				break
			}
		}
	}
	if g.JSON {
		_ = r.ran.AddGoTestJSON(bytes.NewReader(buf.Bytes()), r.modPath)
	}
	if g.Name == "python" {
		r.ran.AddPythonLog(buf.String())
		r.pyRan = true
	}
	if g.Name == "doctor" {
		r.doctor = buf.Bytes()
		if res.Status == "" {
			if err := checkDoctor(buf.Bytes()); err != nil {
				res.Status, res.Reason = Fail, err.Error()
			}
		}
	}
}

func exitCode(err error) int {
	if err == nil {
		return 0
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	return -1
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i] + " …"
	}
	return s
}

// lastLine is the last non-empty line of s (at most 200 bytes): what a
// failing command said last.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	l := strings.TrimSpace(lines[len(lines)-1])
	if len(l) > 200 {
		l = l[:200] + " …"
	}
	if l == "" {
		return "(no output)"
	}
	return l
}

// tail returns the last n lines of s, at most max bytes.
func tail(s string, n, max int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	t := strings.Join(lines, "\n")
	if len(t) > max {
		t = t[len(t)-max:]
	}
	return t
}

// failedTestOutput gathers the output of the failed tests in a go test
// -json stream (bounded), for the junit failure message.
func failedTestOutput(b []byte) string {
	type ev struct{ Action, Package, Test, Output string }
	outs := map[string]*strings.Builder{}
	var failed []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	var plain strings.Builder
	for sc.Scan() {
		var e ev
		line := sc.Bytes()
		if len(line) == 0 || line[0] != '{' || jsonUnmarshal(line, &e) != nil {
			plain.Write(line)
			plain.WriteByte('\n')
			continue
		}
		k := e.Package + " " + e.Test
		if e.Action == "output" {
			if outs[k] == nil {
				outs[k] = &strings.Builder{}
			}
			if outs[k].Len() < 16<<10 {
				outs[k].WriteString(e.Output)
			}
		}
		if e.Action == "fail" && e.Test != "" && !strings.Contains(e.Test, "/") {
			failed = append(failed, k)
		}
	}
	var s strings.Builder
	s.WriteString(plain.String())
	for _, k := range failed {
		fmt.Fprintf(&s, "--- %s\n", k)
		if o := outs[k]; o != nil {
			s.WriteString(tail(o.String(), 40, 4<<10))
			s.WriteByte('\n')
		}
	}
	return tail(s.String(), 200, 16<<10)
}

var modLine = regexp.MustCompile(`(?m)^module\s+(\S+)`)

func modulePath(root string) string {
	b, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		return ""
	}
	if m := modLine.FindSubmatch(b); m != nil {
		return string(m[1])
	}
	return ""
}

// sh runs one command of a Func gate, logging it.
func (r *runner) sh(ctx context.Context, w io.Writer, env []string, argv ...string) (string, int, error) {
	fmt.Fprintf(w, "$ %s\n", strings.Join(argv, " "))
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = r.o.Root
	cmd.Env = append(append([]string{}, r.env...), env...)
	var out bytes.Buffer
	cmd.Stdout = io.MultiWriter(w, &out)
	cmd.Stderr = w
	err := cmd.Run()
	return out.String(), exitCode(err), err
}

// offlineModules checks that every module the build needs, and the pinned
// staticcheck, are in the module cache, with the proxy off.
func offlineModules(ctx context.Context, r *runner, w io.Writer) (int, error) {
	if _, code, err := r.sh(ctx, w, nil, "go", "mod", "download"); err != nil {
		return code, fmt.Errorf("offline: a module of go.mod is missing from the module cache (GOPROXY=off): %v; run go mod download once online", err)
	}
	mod := strings.Replace(staticcheck, "/cmd/staticcheck", "", 1)
	if _, code, err := r.sh(ctx, w, nil, "go", "mod", "download", mod); err != nil {
		return code, fmt.Errorf("offline: %s is missing from the module cache (GOPROXY=off): %v", mod, err)
	}
	return 0, nil
}

// s3Server finds the versitygw binary the cold tier's S3 suite runs
// against, building it once (scripts/s3-server install) if needed.
func s3Server(ctx context.Context, r *runner, w io.Writer) (int, error) {
	if p := os.Getenv("GPUCACHE_VERSITYGW"); p != "" {
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			fmt.Fprintf(w, "GPUCACHE_VERSITYGW=%s\n", p)
			return 0, nil
		}
		return 1, fmt.Errorf("GPUCACHE_VERSITYGW=%s is not a file", p)
	}
	script := filepath.Join(r.o.Root, "scripts", "s3-server")
	out, code, err := r.sh(ctx, w, nil, script, "install")
	if err != nil {
		return code, fmt.Errorf("scripts/s3-server install: %v", err)
	}
	p := strings.TrimSpace(out)
	r.env = append(r.env, "GPUCACHE_VERSITYGW="+p)
	fmt.Fprintf(w, "GPUCACHE_VERSITYGW=%s\n", p)
	return 0, nil
}

var serving = regexp.MustCompile(`msg="gpucached serving" data=(\S+)`)

// benchCLI starts a loopback gpucached and runs a tiny `gpucache-bench bench`.
func benchCLI(ctx context.Context, r *runner, w io.Writer) (int, error) {
	dir, err := os.MkdirTemp("", "gpucache-regress-")
	if err != nil {
		return -1, err
	}
	defer os.RemoveAll(dir)
	argv := []string{filepath.Join(r.bin, "gpucached"), "--listen", "127.0.0.1:0", "--admin-listen", "off", "--cold-store", "off", "--hot-capacity", "256MiB"}
	fmt.Fprintf(w, "$ %s\n", strings.Join(argv, " "))
	d := exec.CommandContext(ctx, argv[0], argv[1:]...)
	d.Dir = dir
	d.Env = r.env
	stderr, err := d.StderrPipe()
	if err != nil {
		return -1, err
	}
	if err := d.Start(); err != nil {
		return -1, fmt.Errorf("start gpucached: %v", err)
	}
	addr := make(chan string, 1)
	pumped := make(chan struct{})
	go func() { // read stderr to the end so the daemon never blocks on a full pipe
		defer close(pumped)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
		sent := false
		for sc.Scan() {
			fmt.Fprintf(w, "gpucached: %s\n", sc.Text())
			if m := serving.FindStringSubmatch(sc.Text()); m != nil && !sent {
				addr <- m[1]
				sent = true
			}
		}
		if !sent {
			close(addr)
		}
	}()
	stop := func() {
		_ = d.Process.Signal(syscall.SIGTERM)
		<-pumped
		_ = d.Wait()
	}
	a, ok := <-addr
	if !ok {
		stop()
		return -1, errors.New("gpucached did not print its serving line")
	}
	_, code, berr := r.sh(ctx, w, nil, filepath.Join(r.bin, "gpucache-bench"), "bench", "--addr", a,
		"--requests", "64", "--sizes", "64KiB", "--conns", "2", "--keys", "16", "--op", "both")
	stop()
	if berr != nil {
		return code, fmt.Errorf("gpucache-bench bench: exit %d", code)
	}
	return 0, nil
}

// contractsGate checks docs/CONTRACTS.md against the tree and this run.
func contractsGate(_ context.Context, r *runner, w io.Writer) (int, error) {
	path := filepath.Join(r.o.Root, "docs", "CONTRACTS.md")
	f, err := os.Open(path)
	if err != nil {
		return 1, err
	}
	defer f.Close()
	rows, err := ParseContracts(f, r.o.Root)
	if err != nil {
		return 1, err
	}
	idx, err := IndexTests(r.o.Root)
	if err != nil {
		return 1, err
	}
	ran := r.ran
	if rr := r.results["race"]; rr == nil || rr.Status == Skip || rr.ExitCode < 0 {
		ran.Go = nil
		fmt.Fprintln(w, "the race gate did not run: Go tests checked for existence only")
	}
	if !r.pyRan {
		ran.Python = nil
		fmt.Fprintln(w, "the python gate did not run: Python test files checked for existence only")
	}
	ps := CheckContracts(rows, idx, r.o.Root, ran)
	count := map[string]int{}
	for _, row := range rows {
		count[row.Status]++
	}
	var keys []string
	for k := range count {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	fmt.Fprintf(w, "%d rows:", len(rows))
	for _, k := range keys {
		fmt.Fprintf(w, " %s=%d", k, count[k])
	}
	fmt.Fprintln(w)
	for _, p := range ps {
		fmt.Fprintf(w, "docs/CONTRACTS.md:%d: %s\n", p.Line, p.What)
	}
	if len(ps) > 0 {
		return 1, fmt.Errorf("%w: %d problems, first: line %d: %s", ErrContracts, len(ps), ps[0].Line, ps[0].What)
	}
	return 0, nil
}
