package lint

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// exempt names the package-level errors that may lack the prefix, by
// "dir.name", each with its reason.
var exempt = map[string]string{
	// The CLI's exit-class markers: their text is the word the command
	// prints ("gpucache get: miss: not cached: ..."); only the two
	// commands (internal/cli, tools/internal/benchcli) use them.
	"internal/cli.ErrUsage":       "CLI output marker",
	"internal/cli.ErrReported":    "CLI output marker",
	"internal/cli.errMiss":        "CLI output marker",
	"internal/cli.errRefused":     "CLI output marker",
	"internal/cli.errUnavailable": "CLI output marker",
}

// sentinel is one package-level error variable.
type sentinel struct {
	pos   string // file:line
	dir   string // package directory, slash-separated, from the module root
	pkg   string // package name (the directory's base for package main)
	name  string
	text  string // the literal text (leading literal of a concatenation); "" if none
	wraps string // for fmt.Errorf("%w...", X): X as "dir.name", when X names a sentinel of this module
}

// module is the module path, which sentinels() strips from import paths.
const module = "github.com/gpucache/gpucache/"

// TestSentinelPrefix: every package-level sentinel error carries the
// "gpucache/<pkg>: " prefix (ADR 0023, convention 5), directly or through the
// sentinel of its own package it wraps.
func TestSentinelPrefix(t *testing.T) {
	all := sentinels(t, "../..")
	if len(all) < 100 {
		t.Fatalf("found only %d sentinels: is the walk rooted at the module?", len(all))
	}
	byName := make(map[string]sentinel, len(all))
	for _, s := range all {
		byName[s.dir+"."+s.name] = s
	}
	var ok func(s sentinel, depth int) bool
	ok = func(s sentinel, depth int) bool {
		if strings.HasPrefix(s.text, "%w") {
			w, found := byName[s.wraps]
			return found && depth < 8 && ok(w, depth+1)
		}
		return prefixRE(s.pkg).MatchString(s.text)
	}
	var bad []string
	for _, s := range all {
		if _, skip := exempt[s.dir+"."+s.name]; skip {
			continue
		}
		if !ok(s, 0) {
			bad = append(bad, s.pos+": "+s.name+" = "+strconv.Quote(s.text))
		}
	}
	sort.Strings(bad)
	if len(bad) > 0 {
		t.Errorf("%d sentinel errors lack the \"gpucache/<pkg>: \" prefix:\n\t%s", len(bad), strings.Join(bad, "\n\t"))
	}
	for k := range exempt {
		if _, found := byName[k]; !found {
			t.Errorf("exempt %s names no sentinel any more: remove it", k)
		}
	}
}

// prefixRE matches "gpucache/pkg: " and "gpucache/parent/pkg: ".
func prefixRE(pkg string) *regexp.Regexp {
	return regexp.MustCompile(`^gpucache/([a-z0-9_]+/)*` + regexp.QuoteMeta(pkg) + `: `)
}

// sentinels parses every non-test Go file under root (skipping testdata,
// hidden directories and python/) and returns its package-level
// errors.New and fmt.Errorf variables.
func sentinels(t *testing.T, root string) []sentinel {
	t.Helper()
	var out []sentinel
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != root && (d.Name() == "testdata" || d.Name() == "python" || strings.HasPrefix(d.Name(), ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, filepath.Dir(p))
		if err != nil {
			return err
		}
		dir := filepath.ToSlash(rel)
		pkg := f.Name.Name
		if pkg == "main" {
			pkg = path.Base(dir)
		}
		imports := make(map[string]string) // local name -> dir, for this module's packages
		for _, im := range f.Imports {
			ip, _ := strconv.Unquote(im.Path.Value)
			if !strings.HasPrefix(ip, module) {
				continue
			}
			name := path.Base(ip)
			if im.Name != nil {
				name = im.Name.Name
			}
			imports[name] = strings.TrimPrefix(ip, module)
		}
		for _, decl := range f.Decls {
			g, isGen := decl.(*ast.GenDecl)
			if !isGen || g.Tok != token.VAR {
				continue
			}
			for _, spec := range g.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, v := range vs.Values {
					if i >= len(vs.Names) {
						break
					}
					s, isErr := errorCall(v, dir, imports)
					if !isErr {
						continue
					}
					s.pos = fset.Position(v.Pos()).String()
					s.dir, s.pkg, s.name = dir, pkg, vs.Names[i].Name
					out = append(out, s)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// errorCall reports whether e is errors.New(...) or fmt.Errorf(...), with
// its leading literal text and, for a leading %w, the wrapped sentinel: an
// identifier of package dir, or one of this module's imported packages.
func errorCall(e ast.Expr, dir string, imports map[string]string) (sentinel, bool) {
	c, ok := e.(*ast.CallExpr)
	if !ok || len(c.Args) == 0 {
		return sentinel{}, false
	}
	sel, ok := c.Fun.(*ast.SelectorExpr)
	if !ok {
		return sentinel{}, false
	}
	x, ok := sel.X.(*ast.Ident)
	if !ok || !(x.Name == "errors" && sel.Sel.Name == "New" || x.Name == "fmt" && sel.Sel.Name == "Errorf") {
		return sentinel{}, false
	}
	s := sentinel{text: leadingLiteral(c.Args[0])}
	if strings.HasPrefix(s.text, "%w") && len(c.Args) > 1 {
		switch w := c.Args[1].(type) {
		case *ast.Ident:
			s.wraps = dir + "." + w.Name
		case *ast.SelectorExpr:
			if x, ok := w.X.(*ast.Ident); ok && imports[x.Name] != "" {
				s.wraps = imports[x.Name] + "." + w.Sel.Name
			}
		}
	}
	return s, true
}

// leadingLiteral returns the string literal e starts with: e itself, or
// the leftmost operand of a + concatenation.
func leadingLiteral(e ast.Expr) string {
	for {
		switch v := e.(type) {
		case *ast.BasicLit:
			s, err := strconv.Unquote(v.Value)
			if err != nil {
				return ""
			}
			return s
		case *ast.BinaryExpr:
			e = v.X
		case *ast.ParenExpr:
			e = v.X
		default:
			return ""
		}
	}
}
