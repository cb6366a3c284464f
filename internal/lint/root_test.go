package lint

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// rootAllowed is what the repository root may hold: what a newcomer
// should see first (README, licences, the module files) and the source
// tree. Working notes (STATUS-*.md and the like), scratch scripts and
// build outputs belong elsewhere or in .gitignore; a new top-level entry
// is a deliberate change to this list.
var rootAllowed = map[string]bool{
	".ci":                 true,
	".dockerignore":       true, // the image's build context (Dockerfile)
	".git":                true, // a directory in a clone, a file in a worktree
	".gitignore":          true,
	"Dockerfile":          true, // the gpucached image (ADR 0029)
	"LICENSE":             true,
	"README.md":           true,
	"THIRD_PARTY_NOTICES": true,
	"go.mod":              true,
	"go.sum":              true,
	"go.work":             true, // the workspace of the modules (ADR 0028)
	"go.work.sum":         true,
	"tools":               true, // the tools' module (ADR 0028)
	"api":                 true,
	"bench":               true,
	"client":              true,
	"cmd":                 true,
	"deploy":              true,
	"docs":                true,
	"examples":            true,
	"internal":            true,
	"python":              true,
	"scripts":             true,
}

// TestRootHoldsOnlyAllowedEntries: every entry at the repository root that
// git would commit (not matched by the root .gitignore) is in rootAllowed.
func TestRootHoldsOnlyAllowedEntries(t *testing.T) {
	root := filepath.Join("..", "..")
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("the module root is not two directories up: %v", err)
	}
	ignored := rootIgnorePatterns(t, filepath.Join(root, ".gitignore"))
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	var bad []string
	for _, e := range entries {
		name := e.Name()
		if rootAllowed[name] || matchesAny(ignored, name, e.IsDir()) {
			continue
		}
		bad = append(bad, name)
	}
	sort.Strings(bad)
	if len(bad) > 0 {
		t.Errorf("the repository root holds %d entries outside the allow-list: %s\n"+
			"working notes go into an ADR, docs/ or a package doc, not the root; "+
			"a new top-level entry needs a line in rootAllowed (internal/lint/root_test.go)",
			len(bad), strings.Join(bad, ", "))
	}
}

// TestRootTracksOnlyAllowedEntries: what git tracks at the root is in
// rootAllowed, so a working note force-added past .gitignore fails too.
// It needs git and a work tree; a source archive has neither, and the
// test above covers it.
func TestRootTracksOnlyAllowedEntries(t *testing.T) {
	root := filepath.Join("..", "..")
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed: tracked files cannot be listed")
	}
	cmd := exec.Command("git", "ls-files", "-z", "--cached", "--", ".")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Skipf("not a git work tree (%v): tracked files cannot be listed", err)
	}
	seen := map[string]bool{}
	var bad []string
	for _, f := range bytes.Split(out, []byte{0}) {
		if len(f) == 0 {
			continue
		}
		top, _, _ := strings.Cut(string(f), "/")
		if seen[top] {
			continue
		}
		seen[top] = true
		if !rootAllowed[top] {
			bad = append(bad, top)
		}
	}
	if len(seen) == 0 {
		t.Fatal("git ls-files listed nothing: is the test run inside the repository?")
	}
	sort.Strings(bad)
	if len(bad) > 0 {
		t.Errorf("git tracks %d root entries outside the allow-list: %s", len(bad), strings.Join(bad, ", "))
	}
}

// TestRootIgnoresWorkingNotes: the root .gitignore keeps the working-note
// names out of a commit, and the allow-list test honours it.
func TestRootIgnoresWorkingNotes(t *testing.T) {
	ignored := rootIgnorePatterns(t, filepath.Join("..", "..", ".gitignore"))
	for _, name := range []string{"STATUS-17-arch.md", "NOTES.md", "TODO.md"} {
		if !matchesAny(ignored, name, false) {
			t.Errorf("%s is not ignored at the root by .gitignore", name)
		}
	}
	for _, name := range []string{"README.md", "go.mod", "internal"} {
		if matchesAny(ignored, name, name == "internal") {
			t.Errorf("%s is ignored at the root by .gitignore", name)
		}
	}
}

// ignorePattern is a .gitignore line that can match a root entry.
type ignorePattern struct {
	glob    string
	dirOnly bool
}

// rootIgnorePatterns reads the .gitignore lines that can match an entry of
// the root: "/name", "name", "*.ext", each optionally ending in "/" (a
// directory only). Lines with a slash inside name deeper paths and are
// left out; negations are not used in this repository and are refused.
func rootIgnorePatterns(t *testing.T, file string) []ignorePattern {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []ignorePattern
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if strings.HasPrefix(line, "!") {
			t.Fatalf(".gitignore negation %q: this check does not interpret negations", line)
		}
		p := ignorePattern{}
		if strings.HasSuffix(line, "/") {
			p.dirOnly = true
			line = strings.TrimSuffix(line, "/")
		}
		line = strings.TrimPrefix(line, "/")
		if strings.Contains(line, "/") {
			continue
		}
		if _, err := path.Match(line, ""); err != nil {
			t.Fatalf(".gitignore pattern %q: %v", line, err)
		}
		p.glob = line
		out = append(out, p)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func matchesAny(ps []ignorePattern, name string, isDir bool) bool {
	for _, p := range ps {
		if p.dirOnly && !isDir {
			continue
		}
		if ok, _ := path.Match(p.glob, name); ok {
			return true
		}
	}
	return false
}
