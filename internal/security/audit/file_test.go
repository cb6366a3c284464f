package audit

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func readOr(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(name)
	if errors.Is(err, os.ErrNotExist) {
		return "<none>"
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestFileRotates: a record that would take the file past maxBytes moves
// audit.log to audit.log.1 (and .1 to .2, ...); the oldest beyond
// maxFiles is dropped; maxFiles 0 starts the one file again.
func TestFileRotates(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.log")
	f, err := OpenFile(path, 10, 2)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if _, err := fmt.Fprintf(f, "line%d-\n", i); err != nil { // 7 bytes: one per file
			t.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	got := []string{readOr(t, path), readOr(t, path+".1"), readOr(t, path+".2"), readOr(t, path+".3")}
	want := []string{"line4-\n", "line3-\n", "line2-\n", "<none>"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("files %q, want %q", got, want)
	}
	if f.Rotations() != 4 || f.Errors() != 0 {
		t.Fatalf("rotations %d errors %d", f.Rotations(), f.Errors())
	}
	if _, err := f.Write([]byte("late\n")); err == nil || f.Errors() != 1 {
		t.Fatalf("write after Close: %v, errors %d", err, f.Errors())
	}

	zero := filepath.Join(dir, "zero.log")
	z, err := OpenFile(zero, 10, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer z.Close()
	for _, s := range []string{"aaaa\n", "bbbb\n", "cccc\n"} {
		if _, err := z.Write([]byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	if got := readOr(t, zero); got != "cccc\n" || readOr(t, zero+".1") != "<none>" || z.Size() != 5 {
		t.Fatalf("maxFiles 0: %q, .1 %q, size %d", got, readOr(t, zero+".1"), z.Size())
	}
}

// TestFileBadInput: a record larger than the bound is refused and
// counted, nothing else is lost; a file left over-size (an older
// unbounded log) rotates before the next record; invalid bounds are
// refused.
func TestFileBadInput(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.log")
	if err := os.WriteFile(path, []byte(strings.Repeat("old\n", 100)), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := OpenFile(path, 64, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write([]byte(strings.Repeat("x", 65))); !errors.Is(err, ErrRecordTooLarge) || f.Errors() != 1 {
		t.Fatalf("oversized record: %v, errors %d", err, f.Errors())
	}
	if _, err := f.Write([]byte("new\n")); err != nil {
		t.Fatal(err)
	}
	if readOr(t, path) != "new\n" || !strings.HasPrefix(readOr(t, path+".1"), "old\n") {
		t.Fatalf("the over-size file was not rotated first: %q", readOr(t, path))
	}
	for _, b := range [][2]int{{0, 1}, {-1, 1}, {1, -1}} {
		if _, err := OpenFile(filepath.Join(dir, "x"), int64(b[0]), b[1]); err == nil {
			t.Errorf("OpenFile(maxBytes %d, maxFiles %d) accepted", b[0], b[1])
		}
	}
	if _, err := OpenFile(filepath.Join(dir, "no", "such", "dir"), 1<<20, 1); err == nil {
		t.Error("a file in a missing directory opened")
	}
}

// TestFileRotationFailure: when audit.log cannot be moved aside (here
// audit.log.1 is a directory) the record is lost and counted, the file
// never grows past its bound, and writing resumes once rotation works.
func TestFileRotationFailure(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.log")
	if err := os.MkdirAll(filepath.Join(path+".1", "blocker"), 0o700); err != nil {
		t.Fatal(err)
	}
	f, err := OpenFile(path, 10, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write([]byte("first-\n")); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("second\n")); err == nil {
		t.Fatal("a write that needed a failing rotation succeeded")
	}
	if f.Errors() != 1 || readOr(t, path) != "first-\n" {
		t.Fatalf("errors %d, file %q", f.Errors(), readOr(t, path))
	}
	if err := os.RemoveAll(path + ".1"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("third-\n")); err != nil {
		t.Fatal(err)
	}
	if readOr(t, path) != "third-\n" || readOr(t, path+".1") != "first-\n" {
		t.Fatalf("after recovery: %q, .1 %q", readOr(t, path), readOr(t, path+".1"))
	}
}

// TestFullDiskLosesAndCounts: on a full disk (/dev/full answers every
// write with ENOSPC) events are lost and counted, never returned to or
// panicking the caller, and the throttle goes on counting.
func TestFullDiskLosesAndCounts(t *testing.T) {
	if _, err := os.Stat("/dev/full"); err != nil {
		t.Skip("no /dev/full:", err)
	}
	f, err := OpenFile("/dev/full", 1<<20, 1)
	if err != nil {
		t.Skip("cannot open /dev/full:", err)
	}
	defer f.Close()
	l := NewWithOptions(f, Options{File: f, AuthFailures: Throttle{Lines: 2, Interval: time.Hour}})
	defer l.Close()
	for range 5 {
		l.AuthFailure("", "no_credential", "192.0.2.1:1")
	}
	l.Denied("acme", "m", "read", "GET")
	st := l.Stats()
	if st.WriteErrors != 3 || st.AuthFailures != 5 || st.Suppressed != 3 || f.Errors() != 3 {
		t.Fatalf("stats %+v, file errors %d", st, f.Errors())
	}
}
