// Command configdoc writes docs/CONFIG.md, the table of gpucached's
// settings, from the source of internal/config: each field of Config (and
// of the structs its fields hold: tenants, secrets, RESP profiles) with its
// YAML key, its type, its default from config.Default and its doc comment.
//
//	go run ./internal/tools/configdoc          # rewrite docs/CONFIG.md
//	go run ./internal/tools/configdoc -check   # exit 1 if it is out of date
//
// A field is described by its own comment, or, when it has none, by the
// comment of the field declared right above it (a group such as tls_cert
// and tls_key). A field with neither is an error, so a new setting cannot
// reach the table undocumented. TestConfigDocUpToDate runs the -check
// comparison.
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
var FileName = filepath.Join("docs", "CONFIG.md")

// Command is what regenerates FileName.
const Command = "go run ./internal/tools/configdoc"

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
		return fmt.Errorf("configdoc: %w (generate it: %s)", err, Command)
	}
	if !bytes.Equal(have, want) {
		return fmt.Errorf("configdoc: %s is out of date with internal/config; run: %s", FileName, Command)
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
			return "", errors.New("configdoc: no go.mod at or above the working directory")
		}
		dir = parent
	}
}
