// Command protodoc writes docs/PROTOCOL.md, the wire protocol's
// specification, from its one source: the package comment of api/wire
// (doc.go, continued in doc_status.go; go doc joins them in file-name
// order).
//
//	go run ./internal/tools/protodoc          # rewrite docs/PROTOCOL.md
//	go run ./internal/tools/protodoc -check   # exit 1 if it is out of date
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
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
)

// FileName is the generated file, relative to the module root.
var FileName = filepath.Join("docs", "PROTOCOL.md")

// Command is what regenerates FileName.
const Command = "go run ./internal/tools/protodoc"

func main() {
	check := flag.Bool("check", false, "compare with the committed file instead of writing it; exit 1 when they differ")
	flag.Parse()
	if err := run(*check); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(check bool) error {
	root, err := moduleRoot()
	if err != nil {
		return err
	}
	want, err := Generate(root)
	if err != nil {
		return err
	}
	path := filepath.Join(root, FileName)
	if !check {
		return os.WriteFile(path, want, 0o644)
	}
	have, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("protodoc: %w (generate it: %s)", err, Command)
	}
	if !bytes.Equal(have, want) {
		return fmt.Errorf("protodoc: %s is out of date with api/wire's package comment; run: %s", FileName, Command)
	}
	return nil
}

// moduleRoot is the nearest directory at or above the working directory
// that holds go.mod.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("protodoc: no go.mod at or above the working directory")
		}
		dir = parent
	}
}
