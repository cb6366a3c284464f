package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// walkStep is one fenced block of docs/SECURITY.md marked
// <!-- test:security step=N [wait="TEXT"] -->.
type walkStep struct {
	n    int
	wait string // a line to wait for after the block (a background daemon's)
	body string
}

var walkMarker = regexp.MustCompile("(?m)^<!-- test:security step=(\\d+)(?: wait=\"([^\"]*)\")? -->\n```[a-z]*\n((?s:.*?))\n```\n")

// walkSteps extracts the marked blocks of the walk-through, in order; the
// steps must be numbered 1, 2, ...
func walkSteps(t *testing.T, doc string) []walkStep {
	t.Helper()
	var steps []walkStep
	for _, m := range walkMarker.FindAllStringSubmatch(doc, -1) {
		n, _ := strconv.Atoi(m[1])
		if n != len(steps)+1 {
			t.Fatalf("docs/SECURITY.md: test:security step=%d follows step %d", n, len(steps))
		}
		steps = append(steps, walkStep{n: n, wait: m[2], body: m[3]})
	}
	if c := len(regexp.MustCompile("(?m)^<!-- test:security").FindAllString(doc, -1)); c != len(steps) {
		t.Fatalf("docs/SECURITY.md: %d test:security markers, %d of them before a fenced block", c, len(steps))
	}
	return steps
}

// needTool returns the path of a Debian tool the walk-through uses, or skips
// (fails on CI).
func needTool(t *testing.T, name, pkg string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err == nil {
		return p
	}
	msg := fmt.Sprintf("%s not found (%v); install it: apt-get install -y %s", name, err, pkg)
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// walkShell returns the command that runs bash for the walk-through's steps.
// The walk-through uses the default ports 9400 and 9401: in a private network
// namespace (unshare, no privileges needed where user namespaces are
// allowed) they are free whatever else runs on the machine. Without one,
// bash runs on the host's network if both ports are free now.
func walkShell(t *testing.T) *exec.Cmd {
	t.Helper()
	if un, err := exec.LookPath("unshare"); err == nil {
		if ip, err := exec.LookPath("ip"); err == nil {
			probe := exec.Command(un, "--user", "--map-root-user", "--net", ip, "link", "set", "lo", "up")
			if out, err := probe.CombinedOutput(); err == nil {
				return exec.Command(un, "--user", "--map-root-user", "--net", "bash", "-c", `"$0" link set lo up && exec bash`, ip)
			} else {
				t.Logf("no private network namespace (%v: %s); using the host's", err, strings.TrimSpace(string(out)))
			}
		}
	}
	for _, port := range []string{"9400", "9401"} {
		ln, err := net.Listen("tcp", "127.0.0.1:"+port)
		if err != nil {
			msg := "the walk-through's port " + port + " is in use and no private network namespace is available (unshare --user --net): " + err.Error()
			if os.Getenv("CI") == "true" {
				t.Fatal(msg)
			}
			t.Skip(msg)
		}
		ln.Close()
	}
	return exec.Command("bash")
}

// TestSecurityWalkthrough runs docs/SECURITY.md's "A secure node, step by step"
// blocks exactly as written, in one bash, in a temporary directory, with
// freshly built gpucached and gpucache first on PATH: certificates from
// openssl, tenants and secrets, gpucached with mTLS, the data port with the
// client certificate, health probes without one, /admin/reload with and
// without the bearer token. A wrong command in the walk-through fails it.
func TestSecurityWalkthrough(t *testing.T) {
	if testing.Short() {
		t.Skip("builds binaries")
	}
	needTool(t, "bash", "bash")
	needTool(t, "openssl", "openssl")
	needTool(t, "curl", "curl")
	doc, err := os.ReadFile("../../docs/SECURITY.md")
	if err != nil {
		t.Fatal(err)
	}
	steps := walkSteps(t, string(doc))
	if len(steps) < 6 {
		t.Fatalf("docs/SECURITY.md has %d test:security steps, want 6", len(steps))
	}

	bin := t.TempDir()
	for _, cmd := range []string{"gpucached", "gpucache"} {
		if out, err := exec.Command("go", "build", "-o", filepath.Join(bin, cmd), "github.com/gpucache/gpucache/cmd/"+cmd).CombinedOutput(); err != nil {
			t.Fatalf("build %s: %v\n%s", cmd, err, out)
		}
	}
	work := t.TempDir()
	sh := walkShell(t)
	sh.Dir = work
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GPUCACHE_") && !strings.HasPrefix(kv, "PATH=") {
			sh.Env = append(sh.Env, kv)
		}
	}
	sh.Env = append(sh.Env, "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	stdin, lines := bashSession(t, sh)
	var transcript strings.Builder
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf(format+"\n--- transcript ---\n%s", append(args, transcript.String())...)
	}
	// Any command that fails outside a condition or a || list stops the
	// run with its step and line.
	io.WriteString(stdin, "trap 'echo \"@@failed rc=$? line=$LINENO: $BASH_COMMAND\"' ERR\n")

	outputs := make([]string, len(steps)+1)
	for _, st := range steps {
		fmt.Fprintf(&transcript, "$ # step %d\n", st.n)
		done := fmt.Sprintf("@@step %d done", st.n)
		if _, err := io.WriteString(stdin, st.body+"\necho '"+done+"'\n"); err != nil {
			fail("step %d: write to bash: %v", st.n, err)
		}
		var out strings.Builder
		sawDone, sawWait := false, st.wait == ""
		for !sawDone || !sawWait {
			line, ok := <-lines
			if !ok {
				fail("step %d: bash exited before the step finished (%v)", st.n, sh.Wait())
			}
			transcript.WriteString(line + "\n")
			switch {
			case line == done:
				sawDone = true
			case strings.HasPrefix(line, "@@failed"):
				fail("step %d: a command failed: %s", st.n, line)
			case st.wait != "" && strings.HasPrefix(line, "gpucached: "):
				// The daemon's one-line startup error: it exited
				// and will never print the line waited for.
				fail("step %d: the daemon did not start: %s", st.n, line)
			default:
				out.WriteString(line + "\n")
				if st.wait != "" && strings.Contains(line, st.wait) {
					sawWait = true
				}
			}
		}
		outputs[st.n] = out.String()
	}
	stdin.Close()

	expect := func(step int, wants ...string) {
		t.Helper()
		for _, w := range wants {
			if !strings.Contains(outputs[step], w) {
				fail("step %d: output lacks %q", step, w)
			}
		}
	}
	expect(3, `msg="gpucached serving" data=127.0.0.1:9400 admin=127.0.0.1:9401`)
	// put and get with the client certificate; the same tenant by secret.
	expect(4, "stored 65536 bytes as ", "wrote 65536 bytes to back.bin", "identical",
		"requires a client certificate", "credential_conflict")
	if n := strings.Count(outputs[4], "exit 3"); n != 2 {
		fail("step 4: %d refusals with exit 3, want 2 (no client certificate; certificate and secret of different tenants)", n)
	}
	// healthz and readyz without a certificate; reload with the token, then
	// with the token it added; no token 401, a non-admin's token 403.
	expect(5, "ok\n", "ready\n", "\n401\n", "\n403\n")
	if n := strings.Count(outputs[5], "reloaded\n"); n != 2 {
		fail("step 5: %d reloads answered, want 2 (the old token, then the new one)", n)
	}
	expect(6, "gpucached exited 0")
	t.Logf("transcript:\n%s", transcript.String())
}

// bashSession starts sh (walkShell's bash, its Dir and Env set) in a
// process group of its own, with its stdout and stderr, and those of the
// daemons it starts in the background, in one pipe: the order of lines is
// the order they were written. It returns bash's stdin and its output a
// line at a time; the test's cleanup kills the group and drains the rest.
func bashSession(t *testing.T, sh *exec.Cmd) (io.WriteCloser, <-chan string) {
	t.Helper()
	sh.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdin, err := sh.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	sh.Stdout, sh.Stderr = pw, pw
	if err := sh.Start(); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	lines := make(chan string, 256)
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		defer close(lines)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	t.Cleanup(func() {
		// bash and what it started (the daemon) share its process group.
		syscall.Kill(-sh.Process.Pid, syscall.SIGKILL)
		sh.Wait()
		for range lines {
		}
		<-readDone
		pr.Close()
	})
	return stdin, lines
}
