package lint

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// runTestScript runs scripts/test with args and returns its combined
// output and exit status. Only the argument handling is exercised: --help,
// --list and a bad argument run nothing else.
func runTestScript(t *testing.T, args ...string) (string, int) {
	t.Helper()
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash: scripts/test needs it")
	}
	root := filepath.Join("..", "..")
	cmd := exec.Command(bash, append([]string{filepath.Join(root, "scripts", "test")}, args...)...)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return string(out), 0
	case errors.As(err, &ee):
		return string(out), ee.ExitCode()
	default:
		t.Fatalf("scripts/test %v: %v", args, err)
		return "", -1
	}
}

// TestScriptsTestArguments: scripts/test's --help, --list and --fast --list
// say what they promise and run nothing; an unknown argument is refused
// with the usage and exit 2. The full run has the end-to-end and engine
// stages; --fast has neither and names them as skipped.
func TestScriptsTestArguments(t *testing.T) {
	out, rc := runTestScript(t, "--help")
	if rc != 0 || !strings.HasPrefix(out, "usage: scripts/test [--fast]") {
		t.Errorf("--help: exit %d, output %q; want exit 0 and the usage", rc, out)
	}

	out, rc = runTestScript(t, "--no-such-flag")
	if rc != 2 || !strings.Contains(out, "unknown argument --no-such-flag") || !strings.Contains(out, "usage:") {
		t.Errorf("unknown argument: exit %d, output %q; want exit 2, the argument named and the usage", rc, out)
	}

	full, rc := runTestScript(t, "--list")
	if rc != 0 {
		t.Fatalf("--list: exit %d: %s", rc, full)
	}
	fast, rc := runTestScript(t, "--fast", "--list")
	if rc != 0 {
		t.Fatalf("--fast --list: exit %d: %s", rc, fast)
	}
	for _, s := range []string{"go vet", "staticcheck", "-short work", "python tests"} {
		if !strings.Contains(fast, s) {
			t.Errorf("--fast --list lacks %q:\n%s", s, fast)
		}
	}
	stagesOfFast, skippedByFast, _ := strings.Cut(fast, "fast stages only: skipped")
	if skippedByFast == "" {
		t.Errorf("--fast --list does not say what it skips:\n%s", fast)
	}
	for _, s := range []struct{ stage, skipped string }{
		{"end-to-end: go test", "end-to-end stage"},
		{"engine tests (", "engine tests ("},
		{"engines environment", "engines environment"},
	} {
		if !strings.Contains(full, s.stage) {
			t.Errorf("--list (the full run) lacks %q:\n%s", s.stage, full)
		}
		if strings.Contains(stagesOfFast, s.stage) || !strings.Contains(skippedByFast, s.skipped) {
			t.Errorf("--fast --list runs %q, or does not name it as skipped:\n%s", s.stage, fast)
		}
	}
	if strings.Contains(full, "-short") {
		t.Errorf("the full run's stages use -short:\n%s", full)
	}
}

// TestCIRunsTheWholeSuite: .ci/run runs scripts/test without --fast.
func TestCIRunsTheWholeSuite(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", ".ci", "run"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "exec ./scripts/test\n") || strings.Contains(string(b), "--fast") {
		t.Errorf(".ci/run does not run the whole ./scripts/test:\n%s", b)
	}
}
