package regress

import (
	"bufio"
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

// Environment is environment.json: where and on what the run happened.
type Environment struct {
	Commit     string   `json:"commit"`
	CleanTree  *bool    `json:"clean_tree"` // null when git could not tell
	TreeStatus []string `json:"tree_status,omitempty"`
	GoVersion  string   `json:"go_version"`
	OS         string   `json:"os"`
	Arch       string   `json:"arch"`
	OSRelease  string   `json:"os_release,omitempty"`
	Kernel     string   `json:"kernel,omitempty"`
	CPUModel   string   `json:"cpu_model"`
	CPUCount   int      `json:"cpu_count"`
	Profile    string   `json:"profile"`
	Offline    bool     `json:"offline"`
	GOFLAGS    string   `json:"goflags"`
	GOPROXY    string   `json:"goproxy"`
	Started    string   `json:"started"`
	Errors     []string `json:"errors,omitempty"`
}

func output(ctx context.Context, dir string, env []string, argv ...string) (string, error) {
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = dir
	cmd.Env = env
	b, err := cmd.Output()
	return strings.TrimSpace(string(b)), err
}

func environment(ctx context.Context, root string, env []string, o Options) Environment {
	e := Environment{OS: runtime.GOOS, Arch: runtime.GOARCH, CPUCount: runtime.NumCPU(), Profile: o.Profile,
		Offline: o.Offline, Started: time.Now().UTC().Format(time.RFC3339)}
	var err error
	if e.Commit, err = output(ctx, root, env, "git", "rev-parse", "HEAD"); err != nil {
		e.Commit = "unknown"
		e.Errors = append(e.Errors, "git rev-parse HEAD: "+err.Error())
	}
	if st, err := output(ctx, root, env, "git", "status", "--porcelain", "--untracked-files=normal"); err != nil {
		e.Errors = append(e.Errors, "git status: "+err.Error())
	} else {
		clean := st == ""
		e.CleanTree = &clean
		if !clean {
			lines := strings.Split(st, "\n")
			if len(lines) > 50 {
				lines = append(lines[:50], fmt.Sprintf("... %d more", len(lines)-50))
			}
			e.TreeStatus = lines
		}
	}
	if e.GoVersion, err = output(ctx, root, env, "go", "env", "GOVERSION"); err != nil {
		e.GoVersion = "unknown"
		e.Errors = append(e.Errors, "go env GOVERSION: "+err.Error())
	}
	e.GOFLAGS, _ = output(ctx, root, env, "go", "env", "GOFLAGS")
	e.GOPROXY, _ = output(ctx, root, env, "go", "env", "GOPROXY")
	e.Kernel, _ = output(ctx, root, env, "uname", "-r")
	if b, err := os.ReadFile("/etc/os-release"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "PRETTY_NAME="); ok {
				e.OSRelease = strings.Trim(v, `"`)
			}
		}
	}
	e.CPUModel = "unknown"
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			k, v, ok := strings.Cut(sc.Text(), ":")
			if ok && strings.TrimSpace(k) == "model name" {
				e.CPUModel = strings.TrimSpace(v)
				break
			}
		}
		f.Close()
	}
	return e
}

// Capabilities is capabilities.json: `gpucache doctor --json` as run here.
type Capabilities struct {
	Source    string          `json:"source"`
	Collected bool            `json:"collected"`
	Reason    string          `json:"reason,omitempty"`
	ExitCode  *int            `json:"exit_code,omitempty"`
	Checks    json.RawMessage `json:"checks"`
}

// doctorOut is the shape doctor's --json has: {"checks":[{name,status,detail}]}.
type doctorOut struct {
	Checks []struct {
		Name   string `json:"name"`
		Status string `json:"status"`
		Detail string `json:"detail"`
	} `json:"checks"`
}

var doctorStatuses = map[string]bool{"OK": true, "WARN": true, "ABSENT": true, "NOT_RUN_HARDWARE": true, "FAIL": true}

func checkDoctor(b []byte) error {
	var d doctorOut
	if err := json.Unmarshal(b, &d); err != nil {
		return fmt.Errorf("doctor --json is not JSON: %v", err)
	}
	if len(d.Checks) == 0 {
		return errors.New("doctor --json has no checks")
	}
	for _, c := range d.Checks {
		if c.Name == "" || !doctorStatuses[c.Status] {
			return fmt.Errorf("doctor check %q has status %q (want OK, WARN, ABSENT, NOT_RUN_HARDWARE or FAIL)", c.Name, c.Status)
		}
	}
	return nil
}

func capabilities(r *runner) Capabilities {
	c := Capabilities{Source: filepath.Join(r.bin, "gpucache") + " doctor --json", Checks: json.RawMessage("null")}
	res := r.results["doctor"]
	if res == nil {
		c.Reason = "the doctor gate was not selected"
		return c
	}
	if res.ExitCode >= 0 {
		code := res.ExitCode
		c.ExitCode = &code
	}
	if res.Status == Pass {
		var raw struct {
			Checks json.RawMessage `json:"checks"`
		}
		if json.Unmarshal(r.doctor, &raw) == nil {
			c.Collected, c.Checks = true, raw.Checks
			return c
		}
	}
	c.Reason = "doctor gate " + strings.ToLower(res.Status) + ": " + res.Reason + " (log " + res.Log + ")"
	return c
}

// junit types: one testsuite, one testcase per gate.
type junitSuites struct {
	XMLName xml.Name     `xml:"testsuites"`
	Suites  []junitSuite `xml:"testsuite"`
}

type junitSuite struct {
	Name      string      `xml:"name,attr"`
	Tests     int         `xml:"tests,attr"`
	Failures  int         `xml:"failures,attr"`
	Skipped   int         `xml:"skipped,attr"`
	Time      string      `xml:"time,attr"`
	Timestamp string      `xml:"timestamp,attr"`
	Cases     []junitCase `xml:"testcase"`
}

type junitCase struct {
	Name      string        `xml:"name,attr"`
	Classname string        `xml:"classname,attr"`
	Time      string        `xml:"time,attr"`
	Failure   *junitMessage `xml:"failure,omitempty"`
	Skipped   *junitMessage `xml:"skipped,omitempty"`
	SystemOut string        `xml:"system-out,omitempty"`
}

type junitMessage struct {
	Message string `xml:"message,attr"`
	Type    string `xml:"type,attr,omitempty"`
	Body    string `xml:",chardata"`
}

// xmlSafe drops the characters XML 1.0 cannot carry (encoding/xml would
// write them as U+FFFD, but attributes must stay short and readable).
func xmlSafe(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '\t' || r == '\n' || r == '\r' || r >= 0x20 && r != 0xFFFE && r != 0xFFFF && !(r >= 0xD800 && r <= 0xDFFF) {
			return r
		}
		return -1
	}, s)
}

func junit(rep *Report) ([]byte, error) {
	s := junitSuite{Name: "gpucache-regress-" + rep.Profile, Tests: len(rep.Gates), Failures: rep.Failed, Skipped: rep.Skipped,
		Time: fmt.Sprintf("%.3f", rep.Duration), Timestamp: rep.Started.Format("2006-01-02T15:04:05")}
	for _, g := range rep.Gates {
		c := junitCase{Name: g.Name, Classname: "regress." + strings.SplitN(g.Name, "/", 2)[0], Time: fmt.Sprintf("%.3f", g.Duration),
			SystemOut: xmlSafe("command: " + g.Command + "\nlog: " + g.Log + "\n")}
		switch g.Status {
		case Fail:
			c.Failure = &junitMessage{Message: xmlSafe(g.Reason), Type: "FAIL", Body: xmlSafe(g.tail)}
		case Skip:
			c.Skipped = &junitMessage{Message: xmlSafe(g.Reason)}
		}
		s.Cases = append(s.Cases, c)
	}
	b, err := xml.MarshalIndent(junitSuites{Suites: []junitSuite{s}}, "", "  ")
	if err != nil {
		return nil, err
	}
	return append([]byte(xml.Header), append(b, '\n')...), nil
}

func summary(env Environment, caps Capabilities, rep *Report) string {
	var b strings.Builder
	verdict := "PASS"
	if rep.Failed > 0 {
		verdict = "FAIL"
	}
	clean := "unknown"
	if env.CleanTree != nil {
		clean = fmt.Sprint(*env.CleanTree)
	}
	fmt.Fprintf(&b, "# gpucache regression run: %s\n\n", verdict)
	fmt.Fprintf(&b, "- commit `%s`, clean tree: %s\n", env.Commit, clean)
	fmt.Fprintf(&b, "- %s, %s/%s, %s; CPU %s × %d\n", env.GoVersion, env.OS, env.Arch, env.OSRelease, env.CPUModel, env.CPUCount)
	fmt.Fprintf(&b, "- profile `%s`, offline %v, started %s, %.1f s\n", rep.Profile, rep.Offline, env.Started, rep.Duration)
	if len(rep.Selected) > 0 {
		fmt.Fprintf(&b, "- gates selected: %s\n", strings.Join(rep.Selected, ", "))
	}
	fmt.Fprintf(&b, "- gates: %d passed, %d failed, %d skipped\n", rep.Passed, rep.Failed, rep.Skipped)
	if caps.Collected {
		fmt.Fprintf(&b, "- capabilities: collected from `gpucache doctor --json` (capabilities.json)\n")
	} else {
		fmt.Fprintf(&b, "- capabilities: NOT collected: %s\n", caps.Reason)
	}
	b.WriteString("\n| gate | status | exit | seconds | reason | log |\n|---|---|---|---|---|---|\n")
	for _, g := range rep.Gates {
		reason := strings.ReplaceAll(g.Reason, "|", `\|`)
		reason = strings.ReplaceAll(reason, "\n", " ")
		fmt.Fprintf(&b, "| %s | %s | %d | %.1f | %s | [%s](%s) |\n", g.Name, g.Status, g.ExitCode, g.Duration, reason, g.Log, g.Log)
	}
	return b.String()
}

// writeArtifacts writes the five artifacts; each is written even if
// another fails.
func writeArtifacts(r *runner, env Environment, rep *Report) error {
	caps := capabilities(r)
	var errs []error
	put := func(name string, b []byte, err error) {
		if err == nil {
			err = os.WriteFile(filepath.Join(r.o.Out, name), b, 0o644)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
		}
	}
	js := func(v any) ([]byte, error) {
		b, err := json.MarshalIndent(v, "", "  ")
		return append(b, '\n'), err
	}
	b, err := js(env)
	put("environment.json", b, err)
	b, err = js(caps)
	put("capabilities.json", b, err)
	b, err = js(rep)
	put("results.json", b, err)
	put("summary.md", []byte(summary(env, caps, rep)), nil)
	b, err = junit(rep)
	put("junit.xml", b, err)
	return errors.Join(errs...)
}
