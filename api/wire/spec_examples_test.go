package wire_test

import (
	"bytes"
	"encoding/hex"
	"go/ast"
	"go/doc"
	"go/doc/comment"
	"go/parser"
	"go/token"
	"os"
	"regexp"
	"strings"
	"testing"
)

// packageDoc returns this package's comment as go doc shows it.
func packageDoc(t *testing.T) string {
	t.Helper()
	ents, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var files []*ast.File
	for _, e := range ents {
		if n := e.Name(); strings.HasSuffix(n, ".go") && !strings.HasSuffix(n, "_test.go") {
			f, err := parser.ParseFile(fset, n, nil, parser.PackageClauseOnly|parser.ParseComments)
			if err != nil {
				t.Fatal(err)
			}
			files = append(files, f)
		}
	}
	pkg, err := doc.NewFromFiles(fset, files, "github.com/gpucache/gpucache/api/wire")
	if err != nil {
		t.Fatal(err)
	}
	return pkg.Doc
}

var goldenRef = regexp.MustCompile(`golden frame "([a-z0-9_]+)"`)

// specExamples returns the worked examples of the package comment: each
// code block right after a paragraph that names a golden frame, as the
// bytes of its hex column (what comes before two spaces on each line).
func specExamples(t *testing.T, text string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	blocks := new(comment.Parser).Parse(text).Content
	for i := 1; i < len(blocks); i++ {
		code, ok := blocks[i].(*comment.Code)
		para, ok2 := blocks[i-1].(*comment.Paragraph)
		if !ok || !ok2 {
			continue
		}
		var s strings.Builder
		for _, x := range para.Text {
			if p, ok := x.(comment.Plain); ok {
				s.WriteString(string(p))
			}
		}
		m := goldenRef.FindStringSubmatch(strings.ReplaceAll(s.String(), "\n", " "))
		if m == nil {
			continue
		}
		var frame []byte
		for _, line := range strings.Split(strings.TrimRight(code.Text, "\n"), "\n") {
			hexCol, _, _ := strings.Cut(line, "  ")
			b, err := hex.DecodeString(strings.ReplaceAll(hexCol, " ", ""))
			if err != nil {
				t.Fatalf("example %q: line %q: %v", m[1], line, err)
			}
			frame = append(frame, b...)
		}
		if _, dup := out[m[1]]; dup {
			t.Fatalf("example %q appears twice", m[1])
		}
		out[m[1]] = frame
	}
	return out
}

// The worked examples of the specification (doc_status.go, "Worked
// examples", rendered into docs/PROTOCOL.md) are byte for byte the golden
// frames they name, so the annotated bytes a reader follows are the ones
// the codec is tested against.
func TestGoldenFramesInSpec(t *testing.T) {
	ex := specExamples(t, packageDoc(t))
	for _, name := range []string{"hello_request", "get_into_request"} {
		if _, ok := ex[name]; !ok {
			t.Errorf("the specification has no worked example of the golden frame %q", name)
		}
	}
	frames := map[string][]byte{}
	for _, g := range loadGolden(t).Frames {
		frames[g.Name] = g.Frame
	}
	for name, b := range ex {
		want, ok := frames[name]
		switch {
		case !ok:
			t.Errorf("the specification's example %q names no frame of %s", name, goldenPath)
		case !bytes.Equal(b, want):
			t.Errorf("the specification's example %q differs from %s\n spec %x\n file %x", name, goldenPath, b, want)
		}
	}
}
