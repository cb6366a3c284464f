package main

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/gpucache/gpucache/internal/cold/s3store/s3test"
)

// The README's shell blocks are marked for TestReadmeRunsVerbatim. The
// line before each fenced sh block is one of
//
//	<!-- runnable -->               the test runs the block as written
//	<!-- runnable wait="TEXT" -->   ... and then waits for a line with TEXT
//	                                (the block starts gpucached with &)
//	<!-- not-runnable: REASON -->   the test does not run it; REASON says
//	                                why and what runs it instead
//
// A block is not runnable when it needs what a test machine lacks or must
// not do: the engines environment and its models (python/engine_tests run
// those commands), a GPU, root (/run/gpucache), or the whole test suite
// (./scripts/test, which runs this test). TestReadmeBlocksAreMarked fails
// on a README shell block with neither marker.

// docBlock is one fenced shell block of a doc and its marker.
type docBlock struct {
	doc    string
	line   int    // of the opening fence, 1-based
	marker string // "runnable", "not-runnable" or "" (none)
	wait   string // runnable: a line to wait for after the block
	reason string // not-runnable: why
	body   string
}

var (
	shellFence     = regexp.MustCompile("^```(sh|bash|shell|console)\\s*$")
	runnableMarker = regexp.MustCompile(`^<!-- runnable(?: wait="([^"]+)")? -->$`)
	notRunMarker   = regexp.MustCompile(`^<!-- not-runnable: (\S.*\S) -->$`)
)

// docBlocks returns the fenced shell blocks of doc (its text is src), with
// the marker on the line before each.
func docBlocks(doc, src string) []docBlock {
	lines := strings.Split(src, "\n")
	var out []docBlock
	for i := 0; i < len(lines); i++ {
		if !strings.HasPrefix(lines[i], "```") {
			continue
		}
		open := i
		for i++; i < len(lines) && lines[i] != "```"; i++ {
		}
		if !shellFence.MatchString(lines[open]) {
			continue
		}
		b := docBlock{doc: doc, line: open + 1, body: strings.Join(lines[open+1:min(i, len(lines))], "\n")}
		if open > 0 {
			if m := runnableMarker.FindStringSubmatch(lines[open-1]); m != nil {
				b.marker, b.wait = "runnable", m[1]
			} else if m := notRunMarker.FindStringSubmatch(lines[open-1]); m != nil {
				b.marker, b.reason = "not-runnable", m[1]
			}
		}
		out = append(out, b)
	}
	return out
}

// TestReadmeBlocksAreMarked: every shell block of the README says whether
// TestReadmeRunsVerbatim runs it, and why not when it does not.
func TestReadmeBlocksAreMarked(t *testing.T) {
	src, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := docBlocks("README.md", string(src))
	runnable := 0
	for _, b := range blocks {
		switch b.marker {
		case "runnable":
			runnable++
		case "":
			t.Errorf("README.md:%d: a shell block without a marker: put <!-- runnable --> (TestReadmeRunsVerbatim runs it as written) "+
				"or <!-- not-runnable: REASON --> on the line before it", b.line)
		}
	}
	if runnable < 3 {
		t.Errorf("README.md has %d runnable shell blocks, want at least 3 (Start, Store and read a block, the flash tier)", runnable)
	}
	// A marker that does not stand right before a shell block is a typo.
	if n, m := len(regexp.MustCompile(`(?m)^<!-- runnable`).FindAllString(string(src), -1)), runnable; n != m {
		t.Errorf("README.md: %d runnable markers, %d of them right before a shell block", n, m)
	}
	if n := len(regexp.MustCompile(`(?m)^<!-- not-runnable`).FindAllString(string(src), -1)); n != len(blocks)-runnable {
		t.Errorf("README.md: %d not-runnable markers for %d shell blocks that are not runnable", n, len(blocks)-runnable)
	}
}

// TestDocBlocksParser: the parser finds markers only on the line right
// before a shell fence and ignores other languages.
func TestDocBlocksParser(t *testing.T) {
	src := "<!-- runnable -->\n```sh\necho a\n```\n\n```go\nx := 1\n```\n<!-- not-runnable: needs a GPU -->\n```sh\nnvidia-smi\n```\n" +
		"<!-- runnable wait=\"serving\" -->\n```sh\nd &\n```\n<!-- runnable -->\n\n```sh\nno marker\n```\n"
	got := docBlocks("t.md", src)
	want := []docBlock{
		{doc: "t.md", line: 2, marker: "runnable", body: "echo a"},
		{doc: "t.md", line: 10, marker: "not-runnable", reason: "needs a GPU", body: "nvidia-smi"},
		{doc: "t.md", line: 14, marker: "runnable", wait: "serving", body: "d &"},
		{doc: "t.md", line: 19, body: "no marker"},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("got  %+v\nwant %+v", got, want)
	}
}

// readmeKeyHash is the key `gpucache put --key-text "system prompt v1"`
// stores under: the default namespace's chain of that text. The README
// shows its first 8 hex digits.
const readmeKeyHash = "f60144f7babad800a34ad7362686892331422f56c3a94a4932f374d301b91c09"

// copyTree copies the repository's tracked and untracked, not ignored
// files (what a fresh clone has, plus work in progress) from root to dst.
func copyTree(t *testing.T, root, dst string) {
	t.Helper()
	out, err := exec.Command("git", "-C", root, "ls-files", "-z", "--cached", "--others", "--exclude-standard").Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	for _, rel := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		src := filepath.Join(root, rel)
		fi, err := os.Lstat(src)
		if err != nil || fi.IsDir() {
			continue // deleted in the work tree, or a submodule
		}
		to := filepath.Join(dst, rel)
		if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
			t.Fatal(err)
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			target, err := os.Readlink(src)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(target, to); err != nil {
				t.Fatal(err)
			}
			continue
		}
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(to, b, fi.Mode().Perm()); err != nil {
			t.Fatal(err)
		}
	}
}

// listFiles returns the regular files under dir, relative to it.
func listFiles(t *testing.T, dir string) map[string]bool {
	t.Helper()
	files := map[string]bool{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			rel, _ := filepath.Rel(dir, p)
			files[rel] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// TestReadmeRunsVerbatim runs the README's blocks marked <!-- runnable -->
// exactly as written, in order, in one bash, in a copy of the repository
// (the files git would check out), then docs/ENGINES.md's runnable block
// (gpucached with examples/lmcache/llama3-8b.yaml). It checks what the
// blocks' comments promise: the build and the daemon, the put's key, the
// get, the miss's exit code, the flash tier, the LMCache config's two
// tenants, that SIGTERM stops each daemon with exit 0, and that the blocks
// leave nothing in the repository but bin/ and gpucache-data/ (both
// ignored by git). bash runs in a private network namespace when it can
// (the blocks use the default ports); TMPDIR is a test directory, so
// mktemp -d stays inside the test; GOFLAGS=-trimpath lets the copy's build
// reuse the build cache from one run to the next.
func TestReadmeRunsVerbatim(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binaries from a copy of the repository and runs daemons")
	}
	needTool(t, "bash", "bash")
	needTool(t, "git", "git")
	needTool(t, "openssl", "openssl")
	if os.Getenv("GPUCACHE_ETCD") == "" {
		needTool(t, "etcd", "etcd-server") // the cluster block's scripts/local-cluster
	}
	vgw, err := s3test.Binary() // the cluster block's S3 server
	if err != nil {
		t.Fatal(err)
	}
	if vgw == "" {
		msg := "versitygw not found: run scripts/s3-server install (or set GPUCACHE_VERSITYGW to the binary)"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	goTool := needTool(t, "go", "golang-go")
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	var blocks []docBlock
	for _, doc := range []string{"README.md", "docs/ENGINES.md"} {
		src, err := os.ReadFile(filepath.Join(root, doc))
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range docBlocks(doc, string(src)) {
			if b.marker == "runnable" {
				blocks = append(blocks, b)
			}
		}
	}
	byDoc := func(doc string) (n int) {
		for _, b := range blocks {
			if b.doc == doc {
				n++
			}
		}
		return n
	}
	if byDoc("README.md") != 4 || byDoc("docs/ENGINES.md") != 1 {
		t.Fatalf("runnable blocks: README.md %d, docs/ENGINES.md %d; want 4 and 1 (the checks below name them)", byDoc("README.md"), byDoc("docs/ENGINES.md"))
	}

	repo := filepath.Join(t.TempDir(), "gpucache")
	copyTree(t, root, repo)
	before := listFiles(t, repo)
	tmp := t.TempDir()

	sh := walkShell(t)
	sh.Dir = repo
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GPUCACHE_") && !strings.HasPrefix(kv, "TMPDIR=") && !strings.HasPrefix(kv, "GOFLAGS=") && !strings.HasPrefix(kv, "PATH=") {
			sh.Env = append(sh.Env, kv)
		}
	}
	// The cluster block's scripts/local-cluster takes etcd and versitygw
	// from these when set (the end-to-end stage sets GPUCACHE_VERSITYGW),
	// as a reader's shell would; otherwise from PATH and .cache/bin.
	if v := os.Getenv("GPUCACHE_ETCD"); v != "" {
		sh.Env = append(sh.Env, "GPUCACHE_ETCD="+v)
	}
	sh.Env = append(sh.Env, "GPUCACHE_VERSITYGW="+vgw)
	sh.Env = append(sh.Env, "TMPDIR="+tmp, "GOFLAGS=-trimpath",
		"PATH="+filepath.Dir(goTool)+string(os.PathListSeparator)+os.Getenv("PATH"))
	stdin, lines := bashSession(t, sh)
	var transcript strings.Builder
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf(format+"\n--- transcript ---\n%s", append(args, transcript.String())...)
	}
	io.WriteString(stdin, "trap 'echo \"@@failed rc=$? line=$LINENO: $BASH_COMMAND\"' ERR\n")

	// run writes one script to bash and collects its output until done;
	// wait, when set, is a line that must also appear (a daemon's).
	step := 0
	run := func(name, script, wait string) string {
		t.Helper()
		step++
		fmt.Fprintf(&transcript, "$ # %s\n", name)
		done := fmt.Sprintf("@@step %d done", step)
		if _, err := io.WriteString(stdin, script+"\necho '"+done+"'\n"); err != nil {
			fail("%s: write to bash: %v", name, err)
		}
		var out strings.Builder
		sawDone, sawWait := false, wait == ""
		for !sawDone || !sawWait {
			line, ok := <-lines
			if !ok {
				fail("%s: bash exited before the block finished (%v)", name, sh.Wait())
			}
			transcript.WriteString(line + "\n")
			switch {
			case line == done:
				sawDone = true
			case strings.HasPrefix(line, "@@failed"):
				fail("%s: a command failed: %s", name, line)
			case wait != "" && strings.HasPrefix(line, "gpucached: "):
				fail("%s: the daemon did not start: %s", name, line)
			default:
				out.WriteString(line + "\n")
				if wait != "" && strings.Contains(line, wait) {
					sawWait = true
				}
			}
		}
		return out.String()
	}
	// stop ends the daemon a block left in the background, as the README
	// says: SIGTERM, and it exits 0.
	stop := func(name string) {
		t.Helper()
		if out := run(name, `kill %1; wait %1; echo "gpucached exited $?"`, ""); !strings.Contains(out, "gpucached exited 0") {
			fail("%s: %q, want gpucached exited 0", name, out)
		}
	}
	outputs := map[string][]string{}
	for i, b := range blocks {
		if i > 0 && b.doc != blocks[i-1].doc {
			stop("stop the daemon of " + blocks[i-1].doc)
		}
		outputs[b.doc] = append(outputs[b.doc], run(fmt.Sprintf("%s:%d", b.doc, b.line), b.body, b.wait))
	}
	stop("stop the last daemon")
	stdin.Close()

	expect := func(doc string, i int, wants ...string) {
		t.Helper()
		for _, w := range wants {
			if !strings.Contains(outputs[doc][i], w) {
				fail("%s runnable block %d: output lacks %q", doc, i+1, w)
			}
		}
	}
	expect("README.md", 0, `msg="gpucached serving" data=127.0.0.1:9400 admin=127.0.0.1:9401 cold=fs:./gpucache-data hot_capacity=1GiB`)
	// The key the put prints is the one the README shows.
	shown := regexp.MustCompile(`stored 1048576 bytes as ([0-9a-f]{4,})…`).FindStringSubmatch(blocks[1].body)
	if shown == nil || !strings.HasPrefix(readmeKeyHash, shown[1]) {
		t.Errorf("README.md:%d: the put's comment shows %q, want the first hex digits of %s", blocks[1].line, shown, readmeKeyHash)
	}
	expect("README.md", 1, "stored 1048576 bytes as "+readmeKeyHash, "wrote 1048576 bytes to "+tmp, "identical\n",
		"gpucache get: miss: gpucache/client: not cached\nexit 1\n", "hot_blocks ")
	expect("README.md", 2, "gpu-1", "gpu-2", "gpu-3", "active")
	expect("README.md", 3, `msg="flash tier open" flash_dir=`+tmp, "gpucached serving")
	expect("docs/ENGINES.md", 0, `msg="RESP2 endpoint listening" resp_listen=127.0.0.1:6380 tenants_with_profiles=2`, `auth="2 tenants"`)

	// Nothing but the build and the cold tier lands in the repository.
	for f := range listFiles(t, repo) {
		if !before[f] && !strings.HasPrefix(f, "bin/") && !strings.HasPrefix(f, "gpucache-data/") &&
			!strings.HasPrefix(f, ".cache/") { // the local cluster's state, git-ignored
			t.Errorf("the blocks left %s in the repository; write scratch files under $(mktemp -d)", f)
		}
	}
	t.Logf("transcript:\n%s", transcript.String())
}
