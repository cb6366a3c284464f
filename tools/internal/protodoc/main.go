// Command protodoc writes docs/PROTOCOL.md, the wire protocol's
// specification, from its one source: the package comment of api/wire
// (doc.go, continued in doc_status.go; go doc joins them in file-name
// order).
//
//	go run ./tools/internal/protodoc          # rewrite docs/PROTOCOL.md
//	go run ./tools/internal/protodoc -check   # exit 1 if it is out of date
//
// api/wire's doc.go names it in a go:generate directive, so go generate
// ./api/wire does the same. The comment becomes Markdown block for block:
// a "# X" heading a "## X" section, a paragraph that opens with an
// operation's run-in title ("GET (3). ...") a "### GET (3)" subsection,
// a code block a fenced code block, a list a list. Every operation must
// have exactly one such title, so an opcode cannot reach the package
// without a section. TestProtocolDocUpToDate runs the -check comparison.
package main

import (
	"path/filepath"

	"github.com/gpucache/gpucache/tools/internal/gendoc"
)

// FileName is the generated file, relative to the module root.
var FileName = filepath.Join("docs", "PROTOCOL.md")

// Command is what regenerates FileName.
const Command = "go run ./tools/internal/protodoc"

// doc is the generated file, for main and the tests.
var generated = gendoc.Doc{Name: "protodoc", File: FileName, Command: Command, Source: "api/wire's package comment", Generate: Generate}

func main() { generated.Main() }

// moduleRoot is the repository root (gendoc.ModuleRoot: the product
// module's go.mod, above the tools' own).
func moduleRoot() (string, error) { return gendoc.ModuleRoot() }
