// Package gendoc is the scaffold of the commands that generate a
// documentation file from the source (configdoc: docs/CONFIG.md;
// protodoc: docs/PROTOCOL.md): find the module root, write the file or
// check it is up to date, and the test that fails with the command to run.
package gendoc

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Doc is one generated file.
type Doc struct {
	Name     string // the command's name, for messages: "configdoc"
	File     string // the generated file, relative to the module root
	Command  string // what regenerates it: "go run ./tools/internal/configdoc"
	Source   string // what it is generated from, for messages: "internal/config"
	Generate func(root string) ([]byte, error)
}

// Main is a generator's main: it writes the file, or with -check exits 1
// when the committed file differs.
func (d Doc) Main() {
	check := flag.Bool("check", false, "compare with the committed file instead of writing it; exit 1 when they differ")
	flag.Parse()
	if err := d.Run(*check); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// Run writes the file, or checks it.
func (d Doc) Run(check bool) error {
	root, err := ModuleRoot()
	if err != nil {
		return err
	}
	want, err := d.Generate(root)
	if err != nil {
		return err
	}
	path := filepath.Join(root, d.File)
	if !check {
		return os.WriteFile(path, want, 0o644)
	}
	have, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("%s: %w (generate it: %s)", d.Name, err, d.Command)
	}
	if !bytes.Equal(have, want) {
		return fmt.Errorf("%s: %s is out of date with %s; run: %s", d.Name, d.File, d.Source, d.Command)
	}
	return nil
}

// TestUpToDate fails t when the committed file is not what the generator
// writes now, naming the first differing line and the command that fixes it.
func (d Doc) TestUpToDate(t *testing.T) {
	t.Helper()
	root, err := ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	want, err := d.Generate(root)
	if err != nil {
		t.Fatal(err)
	}
	have, err := os.ReadFile(filepath.Join(root, d.File))
	if err != nil {
		t.Fatalf("%v (generate it: %s)", err, d.Command)
	}
	if bytes.Equal(have, want) {
		return
	}
	hl, wl := strings.Split(string(have), "\n"), strings.Split(string(want), "\n")
	for i := range max(len(hl), len(wl)) {
		if h, w := line(hl, i), line(wl, i); h != w {
			t.Fatalf("%s is out of date with %s (regenerate: %s); first difference at line %d:\ncommitted: %q\ngenerated: %q", d.File, d.Source, d.Command, i+1, h, w)
		}
	}
}

func line(lines []string, i int) string {
	if i < len(lines) {
		return lines[i]
	}
	return "<end of file>"
}

// ModuleRoot is the repository root: the nearest directory at or above the
// working directory whose go.mod is the product module's
// (github.com/gpucache/gpucache). The tools' own module (tools/go.mod) and
// the other nested modules are passed over (ADR 0028).
func ModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && productModule(b) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("gendoc: no go.mod of module github.com/gpucache/gpucache at or above the working directory; run from the repository")
		}
		dir = parent
	}
}

// productModule reports whether a go.mod declares the product module.
func productModule(gomod []byte) bool {
	for _, line := range strings.Split(string(gomod), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "module" {
			return strings.Trim(f[1], `"`) == "github.com/gpucache/gpucache"
		}
	}
	return false
}
