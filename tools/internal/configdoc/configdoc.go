package main

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpucache/gpucache/internal/config"
)

// rootStruct is the config struct whose fields are the settings.
const rootStruct = "Config"

// source is the documentation that internal/config's source carries: each
// struct type's doc comment and fields, by type name.
type source struct {
	fset    *token.FileSet
	structs map[string]*ast.StructType
	docs    map[string]string
}

// parseDir parses the non-test Go files of dir with their comments.
func parseDir(dir string) (*source, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	s := newSource()
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(s.fset, filepath.Join(dir, name), nil, parser.ParseComments)
		if err != nil {
			return nil, err
		}
		s.add(f)
	}
	return s, nil
}

func newSource() *source {
	return &source{fset: token.NewFileSet(), structs: map[string]*ast.StructType{}, docs: map[string]string{}}
}

// add records the struct types that f declares.
func (s *source) add(f *ast.File) {
	for _, d := range f.Decls {
		gd, ok := d.(*ast.GenDecl)
		if !ok || gd.Tok != token.TYPE {
			continue
		}
		for _, sp := range gd.Specs {
			ts := sp.(*ast.TypeSpec)
			st, ok := ts.Type.(*ast.StructType)
			if !ok {
				continue
			}
			doc := ts.Doc
			if doc == nil && len(gd.Specs) == 1 {
				doc = gd.Doc
			}
			s.structs[ts.Name.Name] = st
			s.docs[ts.Name.Name] = doc.Text()
		}
	}
}

// field is one exported, YAML-tagged struct field.
type field struct {
	name, key string
	typ       ast.Expr
	doc, line string // its doc comment and its line comment
	first     int    // line of the field's first token
	last      int    // line of its last token
}

// fields lists st's settings: its exported fields with a YAML key.
func (s *source) fields(st *ast.StructType) []field {
	var out []field
	for _, f := range st.Fields.List {
		if f.Tag == nil {
			continue
		}
		tag, err := strconv.Unquote(f.Tag.Value)
		if err != nil {
			continue
		}
		key, _, _ := strings.Cut(reflect.StructTag(tag).Get("yaml"), ",")
		if key == "" || key == "-" {
			continue
		}
		for _, n := range f.Names {
			if !n.IsExported() {
				continue
			}
			out = append(out, field{
				name: n.Name, key: key, typ: f.Type,
				doc: f.Doc.Text(), line: f.Comment.Text(),
				first: s.fset.Position(f.Pos()).Line, last: s.fset.Position(f.End()).Line,
			})
		}
	}
	return out
}

// row is one line of a settings table: a field with its own comment, and
// the uncommented fields declared right below it, which that comment
// describes too ("TLSCert and TLSKey turn on TLS").
type row struct {
	fields []field
	doc    string
}

// rows groups fields into rows. A field without a comment of its own
// that does not directly follow another field is an error: every setting
// must be described.
func rows(typeName string, fs []field) ([]row, error) {
	var out []row
	for i, f := range fs {
		switch {
		case f.doc != "" || f.line != "":
			out = append(out, row{fields: []field{f}, doc: strings.TrimSpace(f.doc + "\n" + f.line)})
		case i > 0 && len(out) > 0 && f.first == fs[i-1].last+1:
			out[len(out)-1].fields = append(out[len(out)-1].fields, f)
		default:
			return nil, fmt.Errorf("configdoc: %s.%s (%s) has no doc comment: describe it in internal/config", typeName, f.name, f.key)
		}
	}
	return out, nil
}

// section is a table of one struct's settings.
type section struct {
	typeName string
	usedAt   []string // YAML paths of the fields of this type
	doc      string
	rows     []row
}

// text is the row's description. A comment that opens with the field's
// own name ("HotSlab is the size of one mmap'd slab") drops it: the key
// column already names the setting.
func (r row) text() string {
	for _, verb := range []string{" is ", " are "} {
		if rest, ok := strings.CutPrefix(r.doc, r.fields[0].name+verb); ok && len(r.fields) == 1 && rest != "" {
			return strings.ToUpper(rest[:1]) + rest[1:]
		}
	}
	return r.doc
}

// sections returns the root struct's section, then one for each struct
// type of the package that its fields reach, in the order they are first
// reached.
func (s *source) sections() ([]section, error) {
	if s.structs[rootStruct] == nil {
		return nil, fmt.Errorf("configdoc: no struct type %s", rootStruct)
	}
	index := map[string]int{rootStruct: 0}
	out := []section{{typeName: rootStruct}}
	paths := map[string]string{rootStruct: ""}
	for i := 0; i < len(out); i++ {
		name := out[i].typeName
		fs := s.fields(s.structs[name])
		rs, err := rows(name, fs)
		if err != nil {
			return nil, err
		}
		out[i].doc, out[i].rows = s.docs[name], rs
		for _, f := range fs {
			elem, list := s.localStruct(f.typ)
			if elem == "" {
				continue
			}
			p := paths[name] + f.key
			if list {
				p += "[]"
			}
			j, ok := index[elem]
			if !ok {
				j = len(out)
				index[elem] = j
				out = append(out, section{typeName: elem})
				paths[elem] = p + "."
			}
			out[j].usedAt = append(out[j].usedAt, p)
		}
	}
	return out, nil
}

// localStruct names the struct type of this package that e is, points to
// or lists, and whether it is a list.
func (s *source) localStruct(e ast.Expr) (name string, list bool) {
	switch t := e.(type) {
	case *ast.StarExpr:
		return s.localStruct(t.X)
	case *ast.ArrayType:
		n, _ := s.localStruct(t.Elt)
		return n, true
	case *ast.Ident:
		if s.structs[t.Name] != nil {
			return t.Name, false
		}
	}
	return "", false
}

// typeText is what a reader writes for a value of type e.
func (s *source) typeText(e ast.Expr) string {
	switch t := e.(type) {
	case *ast.StarExpr:
		return s.typeText(t.X)
	case *ast.ArrayType:
		if id, ok := t.Elt.(*ast.Ident); ok && id.Name == "string" {
			return "list of strings"
		}
		return "list of " + s.typeText(t.Elt)
	case *ast.Ident:
		switch t.Name {
		case "string", "bool":
			return t.Name
		case "int", "int8", "int16", "int32", "int64", "uint", "uint8", "uint16", "uint32", "uint64":
			return "integer"
		case "float32", "float64":
			return "number"
		case "ByteSize":
			return "size"
		}
		if s.structs[t.Name] != nil {
			return "[" + t.Name + "](#" + strings.ToLower(t.Name) + ")"
		}
	case *ast.SelectorExpr:
		if types.ExprString(t) == "time.Duration" {
			return "duration"
		}
	}
	return "`" + types.ExprString(e) + "`"
}

// Generate returns docs/CONFIG.md for the module at root: the settings of
// internal/config's Config with their YAML keys, types, defaults
// (config.Default) and doc comments.
func Generate(root string) ([]byte, error) {
	s, err := parseDir(filepath.Join(root, "internal", "config"))
	if err != nil {
		return nil, err
	}
	return s.render(defaults(config.Default()), config.FlagKeys())
}

// defaults formats each YAML key's value in cfg, "" where it is unset.
func defaults(cfg any) map[string]string {
	out := map[string]string{}
	v := reflect.ValueOf(cfg)
	t := v.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		key, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if !f.IsExported() || key == "" || key == "-" {
			continue
		}
		out[key] = formatValue(v.Field(i))
	}
	return out
}

// formatValue writes v as a config file would.
func formatValue(v reflect.Value) string {
	switch x := v.Interface().(type) {
	case time.Duration:
		return shortDuration(x)
	case config.ByteSize:
		if x == 0 {
			return "0"
		}
		return x.String()
	}
	switch v.Kind() {
	case reflect.String:
		return v.String()
	case reflect.Bool:
		return strconv.FormatBool(v.Bool())
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return strconv.FormatInt(v.Int(), 10)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return strconv.FormatUint(v.Uint(), 10)
	case reflect.Float32, reflect.Float64:
		return strconv.FormatFloat(v.Float(), 'g', -1, 64)
	case reflect.Slice, reflect.Map, reflect.Pointer:
		if v.IsNil() || (v.Kind() != reflect.Pointer && v.Len() == 0) {
			return ""
		}
	}
	return fmt.Sprint(v.Interface())
}

// shortDuration drops a duration's zero trailing units: 5m, 24h, 1h30m.
func shortDuration(d time.Duration) string {
	if d == 0 {
		return "0"
	}
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// Header is the generated file's first line.
const Header = "<!-- Generated by `go run ./tools/internal/configdoc` from the comments in internal/config; edit those, not this file. -->"

// render writes the whole document.
func (s *source) render(defs map[string]string, flagKeys []string) ([]byte, error) {
	secs, err := s.sections()
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	b.WriteString(Header + "\n\n# Configuration\n\n")
	root := secs[0]
	b.WriteString(s.prose(root.typeName, root.doc) + "\n\n")
	b.WriteString("Values: a **size** is a number of bytes with an optional unit: `64KiB`, `1GiB` (2³⁰), `1GB` (10⁹), `4096`. " +
		"A **duration** is Go's syntax: `500ms`, `5s`, `1h30m`. A **list** and the nested entries below are YAML only. " +
		"`gpucached --help` prints every flag with its default; `gpucache doctor --config FILE` checks a config against the machine.\n\n")
	b.WriteString("## Settings\n\n")
	b.WriteString("| key | type | default | description |\n|---|---|---|---|\n")
	for _, r := range root.rows {
		var keys, typs, dflts []string
		for _, f := range r.fields {
			k := "`" + f.key + "`"
			if !slices.Contains(flagKeys, f.key) {
				k += " (YAML only)"
			}
			keys = append(keys, k)
			typs = append(typs, s.typeText(f.typ))
			d, ok := defs[f.key]
			if !ok {
				return nil, fmt.Errorf("configdoc: %s has no value in config.Default()", f.key)
			}
			if d == "" {
				dflts = append(dflts, "—")
			} else {
				dflts = append(dflts, "`"+escapeCode(d)+"`")
			}
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", strings.Join(keys, "<br>"), joinCells(typs), joinCells(dflts), s.prose(root.typeName, r.text()))
	}
	for _, sec := range secs[1:] {
		fmt.Fprintf(&b, "\n## %s\n\n", sec.typeName)
		used := make([]string, len(sec.usedAt))
		for i, p := range sec.usedAt {
			used[i] = "`" + p + "`"
		}
		fmt.Fprintf(&b, "Used as %s (YAML only). %s\n\n", strings.Join(used, ", "), s.prose(sec.typeName, sec.doc))
		b.WriteString("| key | type | description |\n|---|---|---|\n")
		for _, r := range sec.rows {
			var keys, typs []string
			for _, f := range r.fields {
				keys = append(keys, "`"+f.key+"`")
				typs = append(typs, s.typeText(f.typ))
			}
			fmt.Fprintf(&b, "| %s | %s | %s |\n", strings.Join(keys, "<br>"), joinCells(typs), s.prose(sec.typeName, r.text()))
		}
	}
	return b.Bytes(), nil
}

// joinCells is one value when all are the same, else one per line.
func joinCells(v []string) string {
	if len(slices.Compact(slices.Clone(v))) == 1 {
		return v[0]
	}
	return strings.Join(v, "<br>")
}

var identRE = regexp.MustCompile(`\b[A-Z][A-Za-z0-9]*\b`)

// prose turns a comment into one table cell: lines joined, Markdown's
// special characters escaped outside code spans, and the Go names of the
// type's fields (and of Config's) written as their YAML keys.
func (s *source) prose(typeName, comment string) string {
	names := map[string]string{}
	for _, t := range []string{rootStruct, typeName} {
		for _, f := range s.fields(s.structs[t]) {
			names[f.name] = f.key
		}
	}
	text := strings.Join(strings.Fields(comment), " ")
	parts := strings.Split(text, "`")
	for i, p := range parts {
		if i%2 == 1 {
			parts[i] = escapeCode(p)
			continue
		}
		var b strings.Builder
		last := 0
		for _, m := range identRE.FindAllStringIndex(p, -1) {
			word := p[m[0]:m[1]]
			key, ok := names[word]
			if !ok || strings.ToUpper(word) == word {
				continue
			}
			b.WriteString(escapeText(p[last:m[0]]))
			b.WriteString("`" + key + "`")
			last = m[1]
		}
		b.WriteString(escapeText(p[last:]))
		parts[i] = b.String()
	}
	return strings.Join(parts, "`")
}

// escapeText escapes what Markdown would read as emphasis, HTML or a
// table cell's end.
func escapeText(s string) string {
	return strings.NewReplacer(`\`, `\\`, "|", `\|`, "*", `\*`, "<", "&lt;").Replace(s)
}

// escapeCode escapes a code span's text for a table cell.
func escapeCode(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
