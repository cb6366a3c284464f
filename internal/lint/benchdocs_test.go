package lint

import (
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"unicode"
)

// The benchmark record: the current figures and the dated runs beside them.
const (
	benchPage = "docs/BENCHMARKS.md"
	benchDir  = "docs/benchmarks"
)

var (
	mdLink    = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	codeSpan  = regexp.MustCompile("`[^`]*`")
	mdHeading = regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)
	urlScheme = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
	datedName = regexp.MustCompile(`^\d{4}-\d{2}-\d{2}$`)
)

// inBenchRecord reports whether a slash path from the module root is the
// current-figures page or under the dated record.
func inBenchRecord(p string) bool {
	return p == benchPage || p == benchDir || strings.HasPrefix(p, benchDir+"/")
}

// TestBenchmarkDocLinks: every relative link in docs/BENCHMARKS.md and in
// the dated records under docs/benchmarks/, and every link from any other
// markdown file of the module into them, names a file that exists and,
// with a #fragment, a heading of that file (as GitHub derives anchors).
// A figure's link to its dated section or its CSV therefore cannot rot
// when a section is renamed or a file moves.
func TestBenchmarkDocLinks(t *testing.T) {
	root := "../.."
	files := markdownFiles(t, root)
	anchors := map[string]map[string]bool{}
	checked := 0
	for _, f := range files {
		text, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range relativeLinks(string(text)) {
			target, frag, _ := strings.Cut(l.target, "#")
			p := f
			if target != "" {
				p = path.Clean(path.Join(path.Dir(f), target))
			}
			if !inBenchRecord(f) && !inBenchRecord(p) {
				continue
			}
			checked++
			if _, err := os.Stat(filepath.Join(root, p)); err != nil {
				t.Errorf("%s:%d: link %s: no file %s", f, l.line, l.target, p)
				continue
			}
			if frag == "" {
				continue
			}
			a, ok := anchors[p]
			if !ok {
				b, err := os.ReadFile(filepath.Join(root, p))
				if err != nil {
					t.Fatal(err)
				}
				a = headingAnchors(string(b))
				anchors[p] = a
			}
			if !a[frag] {
				t.Errorf("%s:%d: link %s: %s has no heading with anchor #%s", f, l.line, l.target, p, frag)
			}
		}
	}
	if checked < 100 {
		t.Fatalf("checked only %d links into or within the benchmark record: is the walk rooted at the module?", checked)
	}
}

// TestBenchmarkRawOutputsLinked: every file under docs/benchmarks/<date>/
// (a run's raw output, or a table transcribed from the record) is linked
// from docs/benchmarks/<date>.md, so none sits without the figure it
// supports; and every dated record is linked from docs/BENCHMARKS.md.
func TestBenchmarkRawOutputsLinked(t *testing.T) {
	root := "../.."
	entries, err := os.ReadDir(filepath.Join(root, benchDir))
	if err != nil {
		t.Fatal(err)
	}
	page, err := os.ReadFile(filepath.Join(root, benchPage))
	if err != nil {
		t.Fatal(err)
	}
	pageLinks := linkedPaths(benchPage, string(page))
	records := 0
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() {
			if !datedName.MatchString(name) {
				t.Errorf("%s/%s: a directory of raw outputs is named by its date (YYYY-MM-DD)", benchDir, name)
			}
			continue
		}
		date, ok := strings.CutSuffix(name, ".md")
		if !ok || !datedName.MatchString(date) {
			t.Errorf("%s/%s: the dated record holds only YYYY-MM-DD.md files and their YYYY-MM-DD/ directories", benchDir, name)
			continue
		}
		records++
		rec := benchDir + "/" + name
		if !pageLinks[rec] {
			t.Errorf("%s does not link the dated record %s", benchPage, rec)
		}
		text, err := os.ReadFile(filepath.Join(root, rec))
		if err != nil {
			t.Fatal(err)
		}
		linked := linkedPaths(rec, string(text))
		dir := benchDir + "/" + date
		err = fs.WalkDir(os.DirFS(root), dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			if !linked[p] {
				t.Errorf("%s is not linked from %s: link it beside the figure it supports", p, rec)
			}
			return nil
		})
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
	}
	if records == 0 {
		t.Fatalf("no dated record under %s", benchDir)
	}
}

// TestHeadingAnchors pins the anchor rule the link checks rely on to
// GitHub's: lower case, punctuation dropped, spaces to hyphens, a repeated
// heading numbered from -1.
func TestHeadingAnchors(t *testing.T) {
	doc := "# Benchmarks\n" +
		"## 1. gpucache vs Redis vs iperf3\n" +
		"### 3. The redesign: before (`0f5d117`) and after (`74af642`), interleaved\n" +
		"## Hot tier (`go test -bench`)\n" +
		"```\n# not a heading\n```\n" +
		"## GET\n## GET\n"
	got := headingAnchors(doc)
	want := []string{
		"benchmarks",
		"1-gpucache-vs-redis-vs-iperf3",
		"3-the-redesign-before-0f5d117-and-after-74af642-interleaved",
		"hot-tier-go-test--bench",
		"get", "get-1",
	}
	for _, w := range want {
		if !got[w] {
			t.Errorf("no anchor #%s", w)
		}
	}
	if len(got) != len(want) {
		t.Errorf("anchors %v, want %v", sortedKeys(got), want)
	}
}

type mdRef struct {
	line   int
	target string
}

// relativeLinks returns the markdown links of text that are not URLs,
// outside fenced blocks and code spans.
func relativeLinks(text string) []mdRef {
	var out []mdRef
	fenced := false
	for i, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if fenced {
			continue
		}
		for _, m := range mdLink.FindAllStringSubmatch(codeSpan.ReplaceAllString(line, ""), -1) {
			if !urlScheme.MatchString(m[1]) {
				out = append(out, mdRef{line: i + 1, target: m[1]})
			}
		}
	}
	return out
}

// linkedPaths returns the module paths that the markdown file f (a slash
// path from the module root) links, without fragments.
func linkedPaths(f, text string) map[string]bool {
	out := map[string]bool{}
	for _, l := range relativeLinks(text) {
		target, _, _ := strings.Cut(l.target, "#")
		if target != "" {
			out[path.Clean(path.Join(path.Dir(f), target))] = true
		}
	}
	return out
}

// headingAnchors returns the anchors GitHub gives the headings of a
// markdown text.
func headingAnchors(text string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	fenced := false
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		m := mdHeading.FindStringSubmatch(line)
		if fenced || m == nil {
			continue
		}
		var b strings.Builder
		for _, r := range strings.ToLower(m[1]) {
			switch {
			case r == ' ':
				b.WriteByte('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsNumber(r):
				b.WriteRune(r)
			}
		}
		a := b.String()
		if n, dup := seen[a]; dup {
			seen[a] = n + 1
			a = fmt.Sprintf("%s-%d", a, n+1)
		} else {
			seen[a] = 0
		}
		out[a] = true
	}
	return out
}

// markdownFiles returns the module's markdown files as slash paths from
// root, skipping hidden directories.
func markdownFiles(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	err := fs.WalkDir(os.DirFS(root), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != "." && strings.HasPrefix(d.Name(), ".") {
			return fs.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(p, ".md") {
			out = append(out, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(out)
	return out
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
