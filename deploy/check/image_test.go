package check

import (
	"bufio"
	"bytes"
	"debug/buildinfo"
	"debug/elf"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"go.yaml.in/yaml/v3"
	corev1 "k8s.io/api/core/v1"

	"github.com/gpucache/gpucache/internal/version"
)

const repoRoot = "../.."

// imageUID is the distroless nonroot user the image runs as.
const imageUID = 65532

// dockerignore reads the root .dockerignore's patterns.
func dockerignore(t *testing.T) []string {
	t.Helper()
	var pats []string
	sc := bufio.NewScanner(bytes.NewReader(readFile(t, filepath.Join(repoRoot, ".dockerignore"))))
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" && !strings.HasPrefix(l, "#") {
			if strings.HasPrefix(l, "!") {
				t.Fatalf(".dockerignore: %q: this check knows no exceptions (!); keep the file to plain patterns", l)
			}
			pats = append(pats, l)
		}
	}
	return pats
}

// ignored says whether .dockerignore's patterns leave f (slash-separated,
// relative to the root) out of the build context: a pattern names a file
// or a directory and everything under it; **/ matches any directories.
func ignored(pats []string, f string) bool {
	for _, p := range pats {
		rest, any := strings.CutPrefix(p, "**/")
		parts := strings.Split(f, "/")
		for i := range parts {
			for j := i + 1; j <= len(parts); j++ {
				if i > 0 && !any {
					break
				}
				if ok, _ := path.Match(rest, strings.Join(parts[i:j], "/")); ok {
					return true
				}
			}
		}
	}
	return false
}

// buildContext copies the files docker build would send (those git would
// commit, less .dockerignore's) into a new directory.
func buildContext(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed: the build context cannot be listed")
	}
	cmd := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	cmd.Dir = repoRoot
	out, err := cmd.Output()
	if err != nil {
		t.Skipf("not a git work tree (%v): the build context cannot be listed", err)
	}
	pats := dockerignore(t)
	ctx := t.TempDir()
	n := 0
	seen := map[string]bool{}
	for f := range strings.SplitSeq(strings.TrimRight(string(out), "\x00"), "\x00") {
		if ignored(pats, f) || seen[f] { // a file in a merge conflict is listed once per stage
			continue
		}
		seen[f] = true
		src := filepath.Join(repoRoot, filepath.FromSlash(f))
		fi, err := os.Lstat(src)
		if os.IsNotExist(err) {
			continue // deleted in the work tree, not yet in the index
		}
		if err != nil {
			t.Fatal(err)
		}
		if !fi.Mode().IsRegular() {
			continue
		}
		dst := filepath.Join(ctx, filepath.FromSlash(f))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := copyFile(src, dst, fi.Mode().Perm()); err != nil {
			t.Fatal(err)
		}
		n++
	}
	t.Logf("build context: %d files", n)
	return ctx
}

func copyFile(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// TestDockerignoreMatching: the context filter leaves out what the
// patterns name, and only that.
func TestDockerignoreMatching(t *testing.T) {
	pats := []string{".git", "docs", "bench/results", "**/*.test", "**/__pycache__"}
	for f, want := range map[string]bool{
		".git/HEAD": true, "docs/OPERATIONS.md": true, "bench/results/x.json": true, "a/b/c.test": true,
		"python/x/__pycache__/y.pyc": true, "go.mod": false, "cmd/gpucached/main.go": false,
		"bench/compare.sh": false, "internal/docs/x.go": false, ".gitignore": false,
	} {
		if got := ignored(pats, f); got != want {
			t.Errorf("%s: ignored %v, want %v", f, got, want)
		}
	}
}

// TestImageBuildScript runs the image's build step, deploy/docker/build.sh,
// on a copy of the build context docker would get (.dockerignore applied),
// as the Dockerfile's build stage does, and checks the binary it makes:
// static, built without cgo and with -trimpath, and runnable by the
// image's non-root uid. The image itself is not built here: there is no
// container runtime on these machines (NOT_RUN_IMAGE_BUILD).
func TestImageBuildScript(t *testing.T) {
	bin := buildImageBinary(t)
	out := filepath.Dir(bin)

	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Errorf("program header %s: the binary is dynamically linked; the distroless static image has no libc", p.Type)
		}
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		t.Errorf("shared libraries needed: %v", libs)
	}
	bi, err := buildinfo.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	settings := map[string]string{}
	for _, s := range bi.Settings {
		settings[s.Key] = s.Value
	}
	if bi.Path != "github.com/gpucache/gpucache/cmd/gpucached" || settings["CGO_ENABLED"] != "0" || settings["-trimpath"] != "true" || settings["GOOS"] != "linux" {
		t.Errorf("build info: path %s, CGO_ENABLED=%q, -trimpath=%q, GOOS=%q; want cmd/gpucached, 0, true, linux",
			bi.Path, settings["CGO_ENABLED"], settings["-trimpath"], settings["GOOS"])
	}

	// Run it as the image's user where this test may switch users.
	run := exec.Command(bin, "--version")
	if os.Geteuid() == 0 {
		openToAll(t, out)
		run.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: imageUID, Gid: imageUID}}
	} else {
		t.Logf("not root: gpucached runs as uid %d, not switched to %d", os.Geteuid(), imageUID)
	}
	b, err := run.CombinedOutput()
	if err != nil || !strings.HasPrefix(string(b), "gpucached "+version.Number+" ") {
		t.Errorf("gpucached --version as uid %d: %v: %q", imageUID, err, b)
	}
	t.Logf("%s", bytes.TrimSpace(b))
}

// buildImageBinary runs deploy/docker/build.sh on a copy of the build
// context and returns the binary's path.
func buildImageBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: the build takes a minute or two with a cold cache")
	}
	ctx := buildContext(t)
	out := t.TempDir()
	cmd := exec.Command("./deploy/docker/build.sh", out)
	cmd.Dir = ctx
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("deploy/docker/build.sh: %v\n%s", err, b)
	}
	return filepath.Join(out, "gpucached")
}

// openToAll makes dir and its parents up to the temporary directory
// traversable, so another uid reaches what lies under it.
func openToAll(t *testing.T, dir string) {
	t.Helper()
	for d := dir; d != filepath.Dir(d) && d != os.TempDir(); d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

// TestImageServesTheChartsPod runs the image's binary as the image's uid
// on the chart's pod laid out as the kubelet would (Secrets group-owned by
// the pod's fsGroup, the flash directory owned by uid 65532 as the chart's
// README tells the operator), with the pod's environment and args only,
// and asks the admin listener what the chart's probes ask: /healthz and
// /readyz (and /readyz?write=1) answer 200; SIGTERM drains and exits 0.
// Only the listen addresses are changed (127.0.0.1:0, flags after the
// pod's args), so that it never collides with another test's ports; the
// pod's own (0.0.0.0:9400, :9401) are checked by TestChart.
func TestImageServesTheChartsPod(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("not root: cannot run as the image's uid or give the pod's files to its fsGroup")
	}
	bin := buildImageBinary(t)
	out, err := helmTemplate(t, "--set", "config.hot_capacity=128MiB", "--set", "flash.enabled=true",
		"--set", "flash.capacity=512MiB", "--set", "config.flash_segment=128MiB", "--set", "sealKeys.ids={k1}")
	if err != nil {
		t.Fatal(err)
	}
	m, err := Decode(out)
	if err != nil {
		t.Fatal(err)
	}
	var tmpl corev1.PodTemplateSpec
	for _, d := range m.DaemonSets {
		tmpl = d.Spec.Template
	}
	root := t.TempDir()
	pod, err := Layout(root, tmpl, m.Secrets, m.ConfigMaps)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := pod.Start()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(cfg.FlashDir, imageUID, imageUID); err != nil {
		t.Fatal(err)
	}
	openToAll(t, filepath.Dir(bin))
	openToAll(t, root)
	if err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			err = os.Chmod(p, 0o755)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}

	env := []string{}
	for k, v := range pod.Env {
		env = append(env, k+"="+v)
	}
	d := exec.Command(bin, append(slices.Clone(pod.Args), "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0")...)
	d.Env, d.Dir = env, "/"
	d.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: imageUID, Gid: imageUID, Groups: []uint32{uint32(*tmpl.Spec.SecurityContext.FSGroup)}}}
	stderr, err := d.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 64)
	exited := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		exited <- d.Wait()
	}()
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			d.Process.Kill()
			for range lines {
			}
			<-exited
		}
	})
	var admin string
	var log []string
	for l := range lines {
		log = append(log, l)
		var e struct{ Msg, Admin string }
		if json.Unmarshal([]byte(l), &e) == nil && e.Msg == "gpucached serving" {
			admin = e.Admin
			break
		}
	}
	if admin == "" {
		err := <-exited
		stopped = true
		t.Fatalf("gpucached exited before serving (%v):\n%s", err, strings.Join(log, "\n"))
	}
	go func() { // keep reading the log so the daemon never blocks on it
		for l := range lines {
			_ = l
		}
	}()
	hc := &http.Client{}
	defer hc.CloseIdleConnections()
	for _, path := range []string{"/healthz", "/readyz", "/readyz?write=1"} {
		resp, err := hc.Get("http://" + admin + path)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("%s: %d %q; the chart's probe wants 200", path, resp.StatusCode, body)
		}
		t.Logf("%s: %d %s", path, resp.StatusCode, bytes.TrimSpace(body))
	}
	hc.CloseIdleConnections()
	if err := d.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	stopped = true
	if err := <-exited; err != nil {
		t.Errorf("after SIGTERM: %v; want a drain and exit 0", err)
	}
}

// TestDockerfile: the Dockerfile's stages are what the build script test
// and the chart assume: the build stage runs deploy/docker/build.sh /out,
// the final stage is distroless static as uid 65532 (the chart's
// runAsUser) with the binary as its entrypoint (the chart passes only
// args), exposing the chart's default ports.
func TestDockerfile(t *testing.T) {
	var froms, runs, users, exposes, entry, copies []string
	args := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(readFile(t, filepath.Join(repoRoot, "Dockerfile"))))
	cont := ""
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		if rest, ok := strings.CutSuffix(l, "\\"); ok { // continued on the next line
			cont += rest + " "
			continue
		}
		l, cont = strings.Join(strings.Fields(cont+l), " "), ""
		ins, rest, _ := strings.Cut(l, " ")
		switch strings.ToUpper(ins) {
		case "ARG":
			k, v, _ := strings.Cut(rest, "=")
			args[k] = v
		case "FROM":
			froms = append(froms, os.Expand(rest, func(k string) string { return args[k] }))
		case "RUN":
			runs = append(runs, rest)
		case "USER":
			users = append(users, rest)
		case "EXPOSE":
			exposes = append(exposes, strings.Fields(rest)...)
		case "ENTRYPOINT":
			entry = append(entry, rest)
		case "COPY":
			copies = append(copies, rest)
		}
	}
	if len(froms) != 2 || !regexp.MustCompile(`^golang:1\.26\S* AS build$`).MatchString(froms[0]) ||
		froms[1] != "gcr.io/distroless/static-debian12:nonroot" {
		t.Errorf("stages %q: want golang:1.26 AS build, then gcr.io/distroless/static-debian12:nonroot", froms)
	}
	if len(runs) != 1 || !strings.HasSuffix(runs[0], " deploy/docker/build.sh /out") {
		t.Errorf("RUN %q: the build stage's one step must be deploy/docker/build.sh /out (what TestImageBuildScript tests)", runs)
	}
	if !slices.Contains(copies, "--from=build /out/gpucached /gpucached") {
		t.Errorf("COPY %q: want the built binary alone copied to /gpucached", copies)
	}
	if len(users) != 1 || users[0] != "65532:65532" {
		t.Errorf("USER %q: want 65532:65532 (distroless nonroot, numeric so runAsNonRoot can verify it)", users)
	}
	if len(entry) != 1 || entry[0] != `["/gpucached"]` {
		t.Errorf("ENTRYPOINT %q: want [\"/gpucached\"]", entry)
	}
	var values struct {
		Ports struct{ Data, Admin int }
	}
	if err := yaml.Unmarshal(readFile(t, filepath.Join(chartDir, "values.yaml")), &values); err != nil {
		t.Fatal(err)
	}
	for _, p := range []int{values.Ports.Data, values.Ports.Admin} {
		if !slices.Contains(exposes, strconv.Itoa(p)) {
			t.Errorf("EXPOSE %q lacks the chart's port %d", exposes, p)
		}
	}
	tmpl := readFile(t, filepath.Join(chartDir, "templates", "_pod.tpl"))
	if !bytes.Contains(tmpl, []byte("runAsUser: 65532")) || bytes.Contains(tmpl, []byte("command:")) {
		t.Error("the chart's pod must run as uid 65532 and keep the image's entrypoint (args only)")
	}
}
