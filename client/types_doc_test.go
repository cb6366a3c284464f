package client

import (
	"go/ast"
	"go/parser"
	"go/token"
	"reflect"
	"regexp"
	"testing"

	"github.com/gpucache/gpucache/api/identity"
)

// TestAliasDocsListEveryField: go doc does not follow a type alias, so the
// doc comments of the identity aliases in types.go list the fields; every
// exported field of the aliased type must be listed there (as a line
// "\tName ..."), so that a field added to api/identity shows up in
// go doc ./client too.
func TestAliasDocsListEveryField(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "types.go", nil, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	docs := map[string]string{}
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.TYPE {
			continue
		}
		for _, sp := range g.Specs {
			ts := sp.(*ast.TypeSpec)
			if ts.Assign.IsValid() && ts.Doc != nil {
				docs[ts.Name.Name] = ts.Doc.Text()
			}
		}
	}
	for name, typ := range map[string]reflect.Type{
		"Namespace":     reflect.TypeFor[identity.Namespace](),
		"Layout":        reflect.TypeFor[identity.Layout](),
		"CacheIdentity": reflect.TypeFor[identity.CacheIdentity](),
	} {
		doc, ok := docs[name]
		if !ok {
			t.Errorf("types.go: no documented alias %s", name)
			continue
		}
		for i := range typ.NumField() {
			fd := typ.Field(i)
			if !fd.IsExported() {
				continue
			}
			if !regexp.MustCompile(`(?m)^\t` + fd.Name + `\b`).MatchString(doc) {
				t.Errorf("the doc of client.%s does not list field %s of identity.%s", name, fd.Name, typ.Name())
			}
		}
	}
}
