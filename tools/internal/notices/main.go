// Command notices writes THIRD_PARTY_NOTICES from the module graph: the
// modules linked into cmd/gpucache, tools/cmd/gpucache-bench and cmd/gpucached, each with the license
// detected from its files in the module cache and the texts of those files.
//
//	go run ./tools/internal/notices          # rewrite THIRD_PARTY_NOTICES
//	go run ./tools/internal/notices -check   # exit 1 if it is out of date
//
// It runs offline (the module cache must hold the modules go.sum names) and
// refuses to write a file that has a module whose license it does not
// recognize. TestNoticesUpToDate runs the -check comparison.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/gpucache/gpucache/tools/internal/gendoc"
)

// FileName is the notices file, at the module root.
const FileName = "THIRD_PARTY_NOTICES"

func main() {
	check := flag.Bool("check", false, "compare with the committed file instead of writing it; exit 1 when they differ")
	flag.Parse()
	if err := run(context.Background(), *check); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(ctx context.Context, check bool) error {
	root, err := moduleRoot(ctx)
	if err != nil {
		return err
	}
	want, err := Generate(ctx, root)
	if err != nil {
		return err
	}
	path := filepath.Join(root, FileName)
	if !check {
		return os.WriteFile(path, want, 0o644)
	}
	have, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("gpucache/notices: %w", err)
	}
	if !bytes.Equal(have, want) {
		return fmt.Errorf("gpucache/notices: %s is out of date with the module graph; run: go run ./tools/internal/notices", FileName)
	}
	return nil
}

// Generate returns the notices file's bytes for the module at root.
func Generate(ctx context.Context, root string) ([]byte, error) {
	mods, err := Collect(ctx, root)
	if err != nil {
		return nil, err
	}
	std, err := stdFiles(ctx, root)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	if err := Render(&b, mods, std); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// moduleRoot is the repository root.
func moduleRoot(context.Context) (string, error) {
	// The product module's root, above the tools' own go.mod (ADR 0028).
	return gendoc.ModuleRoot()
}

// stdFiles are the Go distribution's LICENSE and PATENTS.
func stdFiles(ctx context.Context, root string) ([]File, error) {
	goroot, err := goEnv(ctx, root, "GOROOT")
	if err != nil {
		return nil, err
	}
	var fs []File
	for _, name := range []string{"LICENSE", "PATENTS"} {
		b, err := os.ReadFile(filepath.Join(goroot, name))
		if err != nil {
			return nil, fmt.Errorf("gpucache/notices: the Go distribution's %s: %w", name, err)
		}
		fs = append(fs, File{Name: name, Notice: name == "PATENTS", Text: normalize(b)})
	}
	return fs, nil
}

func goEnv(ctx context.Context, dir, name string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", "env", name)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("gpucache/notices: go env %s: %w", name, err)
	}
	return strings.TrimSpace(string(out)), nil
}
