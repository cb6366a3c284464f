package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The committed THIRD_PARTY_NOTICES is what the module graph gives now: a
// go.mod or go.sum change that links another module or version fails here
// until the file is regenerated (go run ./tools/internal/notices).
func TestNoticesUpToDate(t *testing.T) {
	ctx := context.Background()
	root, err := moduleRoot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want, err := Generate(ctx, root)
	if err != nil {
		t.Fatal(err)
	}
	have, err := os.ReadFile(filepath.Join(root, FileName))
	if err != nil {
		t.Fatalf("%v (generate it: go run ./tools/internal/notices)", err)
	}
	if !bytes.Equal(have, want) {
		hl, wl := strings.Split(string(have), "\n"), strings.Split(string(want), "\n")
		for i := range max(len(hl), len(wl)) {
			h, w := line(hl, i), line(wl, i)
			if h != w {
				t.Fatalf("%s is out of date with the module graph (regenerate: go run ./tools/internal/notices); first difference at line %d:\ncommitted: %q\ngenerated: %q", FileName, i+1, h, w)
			}
		}
	}
	// What the issue asks the file to say.
	for _, s := range []string{"gonum.org/v1/plot", "OFL-1.1", "CC-BY-4.0", "github.com/ajstarks/svgo", "std (the Go standard library and runtime)"} {
		if !bytes.Contains(want, []byte(s)) {
			t.Errorf("notices do not mention %q", s)
		}
	}
}

func line(ls []string, i int) string {
	if i < len(ls) {
		return ls[i]
	}
	return "<end of file>"
}

func TestDetect(t *testing.T) {
	for _, c := range []struct {
		name, text string
		want       []string
	}{
		{"mit, rewrapped", "Copyright (c) X\n\nPermission is hereby granted, free of\ncharge, to any person obtaining a copy of this software", []string{"MIT"}},
		{"bsd-3", "Redistribution and use in source and binary forms ... Neither the name of X nor the names of its contributors may be used to endorse or promote products derived from this software", []string{"BSD-3-Clause"}},
		{"bsd-2", "Redistribution and use in source and binary forms, with or without modification", []string{"BSD-2-Clause"}},
		{"apache", "Apache License\n Version 2.0, January 2004\n http://www.apache.org/licenses/", []string{"Apache-2.0"}},
		{"ofl is not mit", "SIL OPEN FONT LICENSE Version 1.1 ... Permission is hereby granted, free of charge, to any person obtaining a copy of the Font Software", []string{"OFL-1.1"}},
		{"cc-by", "Creative Commons Attribution 4.0 International Public License", []string{"CC-BY-4.0"}},
		{"unknown", "All rights reserved. Ask us.", nil},
	} {
		if got := Detect(c.text); !slices.Equal(got, c.want) {
			t.Errorf("%s: Detect = %q, want %q", c.name, got, c.want)
		}
	}
}

// A module whose license files say nothing recognizable has no license
// expression; Collect then refuses (ErrUnknownLicense) rather than write
// a notice that guesses.
func TestClassifyFiles(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("README.md", "Permission is hereby granted, free of charge, to any person obtaining a copy")
	write("LICENSE.txt", "All rights reserved.\r\n\r\n")
	files, err := licenseFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 1 || files[0].Name != "LICENSE.txt" || files[0].Text != "All rights reserved.\n" {
		t.Fatalf("files %+v, want LICENSE.txt only, normalized", files)
	}
	if got := classify(files); got != "" {
		t.Fatalf("classify = %q, want none", got)
	}

	write("NOTICE", "This product includes software developed at X.")
	write("licenses/ftl.txt", "The FreeType Project LICENSE")
	write("licenses/gpl.txt", "GNU GENERAL PUBLIC LICENSE Version 2, June 1991")
	write("LICENSE.txt", "subject to your choice of exactly one of the following two licenses: The FreeType License, or the GNU General Public License (GPL), version 2 or later")
	files, err = licenseFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range files {
		names = append(names, f.Name)
	}
	if !slices.Equal(names, []string{"LICENSE.txt", "NOTICE", "licenses/ftl.txt", "licenses/gpl.txt"}) {
		t.Fatalf("files %q", names)
	}
	if got := classify(files); got != "FTL OR GPL-2.0-or-later" {
		t.Fatalf("classify = %q, want the choice", got)
	}
}

// Render lists every module and prints each distinct text once; another
// module, or another version, changes the output (what the up-to-date test
// catches).
func TestRender(t *testing.T) {
	apache := File{Name: "LICENSE", Text: "Apache License\nVersion 2.0, January 2004\n"}
	mods := []Module{
		{Path: "example.com/a", Version: "v1.0.0", Binaries: []string{"gpucached"}, License: "Apache-2.0", Files: []File{apache}},
		{Path: "example.com/b", Version: "v0.2.0", Binaries: []string{"gpucache", "gpucached"}, License: "Apache-2.0", Files: []File{apache, {Name: "NOTICE", Notice: true, Text: "b notice\n"}}},
	}
	std := []File{{Name: "LICENSE", Text: "Redistribution and use in source and binary forms\n"}}
	render := func(mods []Module) string {
		var b bytes.Buffer
		if err := Render(&b, mods, std); err != nil {
			t.Fatal(err)
		}
		return b.String()
	}
	out := render(mods)
	if n := strings.Count(out, "Version 2.0, January 2004"); n != 1 {
		t.Errorf("the shared Apache text is printed %d times, want once", n)
	}
	for _, s := range []string{"example.com/a", "example.com/b", "v0.2.0", "b notice", "(notice), NOTICE of: example.com/b", "of: example.com/a, example.com/b", "2 modules."} {
		if !strings.Contains(out, s) {
			t.Errorf("output lacks %q:\n%s", s, out)
		}
	}
	bumped := slices.Clone(mods)
	bumped[1].Version = "v0.3.0"
	if render(bumped) == out {
		t.Error("a version change did not change the notices")
	}
	if strings.Contains(out, "gonum.org/v1/plot:") {
		t.Error("a note for a module that is not linked was printed")
	}
}
