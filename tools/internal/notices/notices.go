package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// ErrUnknownLicense: a linked module has no license file, or none this
// tool recognizes. The notices are not written; a person must look.
var ErrUnknownLicense = errors.New("gpucache/notices: license not recognized")

// Binaries are the commands whose linked modules the notices cover.
var Binaries = []string{"./cmd/gpucache", "./tools/cmd/gpucache-bench", "./cmd/gpucached"}

// Platforms are the GOOS/GOARCH pairs the module set is the union over
// (docs/OPERATIONS.md, compatibility matrix).
var Platforms = [][2]string{{"linux", "amd64"}, {"linux", "arm64"}}

// Module is one linked module and what the notices say about it.
type Module struct {
	Path, Version string
	Dir           string   // module cache directory; not printed
	Binaries      []string // which of Binaries link it, sorted
	License       string   // SPDX-style expression detected from its files
	Files         []File   // license and notice files, in name order
}

// File is one license or notice file of a module.
type File struct {
	Name   string // relative to the module root
	Notice bool   // NOTICE or PATENTS: reproduced, not classified
	Text   string // normalized: LF line ends, trailing blank lines cut
}

// listed is the part of `go list -json` output the tool reads.
type listed struct {
	ImportPath string
	Standard   bool
	Module     *struct {
		Path, Version, Dir string
		Main               bool
		Replace            *struct{ Path, Version, Dir string }
	}
}

// goList runs `go list -deps -json` for one binary and platform and returns
// the non-main modules it links, by path.
func goList(ctx context.Context, root, bin, goos, goarch string) (map[string]Module, error) {
	cmd := exec.CommandContext(ctx, "go", "list", "-deps", "-json", bin)
	cmd.Dir = root
	// The default build: no tags from the caller's GOFLAGS, the module
	// graph as go.mod and go.sum say (no network), in the repository's
	// workspace (go.work, ADR 0028) even when the caller set GOWORK=off:
	// the binaries are built from the root, where the api, client and
	// tools modules are main modules, not dependencies.
	cmd.Env = append(os.Environ(), "GOOS="+goos, "GOARCH="+goarch, "GOFLAGS=-mod=readonly", "CGO_ENABLED=1",
		"GOWORK="+filepath.Join(root, "go.work"))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("gpucache/notices: go list %s (%s/%s): %w: %s", bin, goos, goarch, err, stderr.Bytes())
	}
	mods := make(map[string]Module)
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p listed
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			return nil, fmt.Errorf("gpucache/notices: go list output: %w", err)
		}
		if p.Standard || p.Module == nil || p.Module.Main {
			continue
		}
		m := Module{Path: p.Module.Path, Version: p.Module.Version, Dir: p.Module.Dir}
		if r := p.Module.Replace; r != nil {
			m.Version = strings.TrimSpace(fmt.Sprintf("%s => %s %s", p.Module.Version, r.Path, r.Version))
			m.Dir = r.Dir
		}
		if m.Dir == "" {
			return nil, fmt.Errorf("gpucache/notices: module %s@%s is not in the module cache (run go mod download)", m.Path, m.Version)
		}
		mods[m.Path] = m
	}
	return mods, nil
}

// Collect returns the modules linked into Binaries on Platforms, sorted by
// path, with their license files read and classified.
func Collect(ctx context.Context, root string) ([]Module, error) {
	all := make(map[string]Module)
	for _, bin := range Binaries {
		name := filepath.Base(bin)
		for _, pl := range Platforms {
			mods, err := goList(ctx, root, bin, pl[0], pl[1])
			if err != nil {
				return nil, err
			}
			for path, m := range mods {
				if have, ok := all[path]; ok {
					m = have
				}
				if !slices.Contains(m.Binaries, name) {
					m.Binaries = append(m.Binaries, name)
					slices.Sort(m.Binaries)
				}
				all[path] = m
			}
		}
	}
	var out []Module
	var unknown []string
	for _, m := range all {
		files, err := licenseFiles(m.Dir)
		if err != nil {
			return nil, err
		}
		m.Files = files
		m.License = classify(files)
		if m.License == "" {
			unknown = append(unknown, m.Path+"@"+m.Version)
		}
		out = append(out, m)
	}
	if len(unknown) > 0 {
		slices.Sort(unknown)
		return nil, fmt.Errorf("%w: %s", ErrUnknownLicense, strings.Join(unknown, ", "))
	}
	slices.SortFunc(out, func(a, b Module) int { return strings.Compare(a.Path, b.Path) })
	return out, nil
}

// licenseName matches the top-level files read as a module's license
// (LICENSE, LICENSE.txt, LICENSE-SIL, COPYING, ...) or notices (NOTICE,
// PATENTS).
var licenseName = regexp.MustCompile(`(?i)^(licen[cs]e|copying|unlicense|notice|patents)([-._].*)?$`)

// licenseFiles reads dir's license and notice files, and those of a
// top-level licenses/ directory (github.com/golang/freetype keeps the texts
// of its two licenses there).
func licenseFiles(dir string) ([]File, error) {
	var files []File
	add := func(rel string) error {
		b, err := os.ReadFile(filepath.Join(dir, rel))
		if err != nil {
			return fmt.Errorf("gpucache/notices: %w", err)
		}
		upper := strings.ToUpper(filepath.Base(rel))
		notice := strings.HasPrefix(upper, "NOTICE") || strings.HasPrefix(upper, "PATENTS")
		files = append(files, File{Name: filepath.ToSlash(rel), Notice: notice, Text: normalize(b)})
		return nil
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("gpucache/notices: %w", err)
	}
	for _, e := range ents {
		switch {
		case e.Type().IsRegular() && licenseName.MatchString(e.Name()):
			if err := add(e.Name()); err != nil {
				return nil, err
			}
		case e.IsDir() && strings.EqualFold(e.Name(), "licenses"):
			sub, err := os.ReadDir(filepath.Join(dir, e.Name()))
			if err != nil {
				return nil, fmt.Errorf("gpucache/notices: %w", err)
			}
			for _, s := range sub {
				if s.Type().IsRegular() {
					if err := add(filepath.Join(e.Name(), s.Name())); err != nil {
						return nil, err
					}
				}
			}
		}
	}
	slices.SortFunc(files, func(a, b File) int { return strings.Compare(a.Name, b.Name) })
	return files, nil
}

// normalize gives a text LF line ends and no trailing whitespace at its end,
// so the same license in two modules is one text.
func normalize(b []byte) string {
	s := strings.ReplaceAll(string(b), "\r\n", "\n")
	return strings.TrimRight(s, " \t\n") + "\n"
}

// rule recognizes one license by phrases its text always contains.
type rule struct {
	id  string
	all []string // every phrase must occur (case-insensitive)
	not []string // none may occur
}

// rules, most specific first. A choice ("X OR Y") decides the module's
// expression alone; otherwise every license found joins with AND.
var rules = []rule{
	{id: "FTL OR GPL-2.0-or-later", all: []string{"your choice of exactly one of the following two licenses", "FreeType License", "GNU General Public License (GPL), version 2 or later"}},
	{id: "Apache-2.0", all: []string{"Apache License", "Version 2.0, January 2004"}},
	// The OFL's grant starts with the same words as MIT's.
	{id: "MIT", all: []string{"Permission is hereby granted, free of charge, to any person obtaining a copy"}, not: []string{"SIL OPEN FONT LICENSE"}},
	{id: "BSD-3-Clause", all: []string{"Redistribution and use in source and binary forms", "endorse or promote products derived from this software"}},
	{id: "BSD-2-Clause", all: []string{"Redistribution and use in source and binary forms"}, not: []string{"endorse or promote products derived from this software"}},
	{id: "ISC", all: []string{"Permission to use, copy, modify, and", "distribute this software for any purpose with or without fee"}},
	{id: "MPL-2.0", all: []string{"Mozilla Public License Version 2.0"}},
	{id: "OFL-1.1", all: []string{"SIL OPEN FONT LICENSE Version 1.1"}},
	{id: "CC-BY-4.0", all: []string{"Creative Commons Attribution 4.0 International"}},
	{id: "FTL", all: []string{"The FreeType Project LICENSE"}},
	{id: "GPL-2.0", all: []string{"GNU GENERAL PUBLIC LICENSE", "Version 2, June 1991"}},
}

// Detect returns the licenses text is recognized as, in rules order. Case
// and line breaks do not matter.
func Detect(text string) []string {
	low := strings.ToLower(strings.Join(strings.Fields(text), " "))
	var ids []string
	for _, r := range rules {
		ok := true
		for _, p := range r.all {
			ok = ok && strings.Contains(low, strings.ToLower(p))
		}
		for _, p := range r.not {
			ok = ok && !strings.Contains(low, strings.ToLower(p))
		}
		if ok {
			ids = append(ids, r.id)
		}
	}
	return ids
}

// classify returns a module's license expression from its license files
// ("" when none is recognized).
func classify(files []File) string {
	var ids []string
	for _, f := range files {
		if f.Notice {
			continue
		}
		for _, id := range Detect(f.Text) {
			if strings.Contains(id, " OR ") {
				return id
			}
			if !slices.Contains(ids, id) {
				ids = append(ids, id)
			}
		}
	}
	slices.Sort(ids)
	return strings.Join(ids, " AND ")
}

// textID names a text by its content, so the same text is printed once.
func textID(s string) string {
	sum := sha256.Sum256([]byte(s))
	return fmt.Sprintf("%x", sum[:6])
}
