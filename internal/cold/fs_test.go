package cold_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gpucache/gpucache/internal/cold"
)

func TestFSLayoutAndReopen(t *testing.T) {
	dir := t.TempDir()
	s, err := cold.NewFS(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Put(t.Context(), "ns/objects/abc", []byte("payload"), cold.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(dir, "objects", "ns", "objects", "abc"))
	if err != nil || string(got) != "payload" {
		t.Fatalf("object file = %q, %v", got, err)
	}
	again, err := cold.NewFS(dir)
	if err != nil {
		t.Fatal(err)
	}
	if info, err := again.Head(t.Context(), "ns/objects/abc"); err != nil || info.Size != 7 {
		t.Fatalf("Head after reopen = %+v, %v", info, err)
	}
}

// A crash mid-Put leaves a temp file: it is never an object, and CleanTemp
// removes it.
func TestFSLeftoverTempIgnoredAndCleaned(t *testing.T) {
	ctx := t.Context()
	s := newFS(t)
	tmp := filepath.Join(s.Root(), "tmp", "put-12345")
	if err := os.WriteFile(tmp, []byte("half a bo"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := listKeys(t, s, ""); len(got) != 0 {
		t.Fatalf("List sees temp files: %q", got)
	}
	if n, err := s.CleanTemp(ctx, time.Hour); err != nil || n != 0 {
		t.Fatalf("CleanTemp(1h) of a fresh temp file = %d, %v; want 0 removed", n, err)
	}
	// Files in tmp/ that are not a Put's temp file are not ours: kept.
	foreign := filepath.Join(s.Root(), "tmp", "operator-notes.txt")
	if err := os.WriteFile(foreign, []byte("keep me"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(s.Root(), "tmp", "put-dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	if n, err := s.CleanTemp(ctx, 0); err != nil || n != 1 {
		t.Fatalf("CleanTemp(0) = %d, %v; want 1 removed", n, err)
	}
	if _, err := os.Stat(tmp); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("temp file still there: %v", err)
	}
	for _, keep := range []string{foreign, filepath.Join(s.Root(), "tmp", "put-dir")} {
		if _, err := os.Stat(keep); err != nil {
			t.Fatalf("CleanTemp removed %s, which is not a Put's temp file: %v", keep, err)
		}
	}
}

func TestFSNoTempLeftAfterPuts(t *testing.T) {
	ctx := t.Context()
	s := newFS(t)
	_ = s.Put(ctx, "k", []byte("1"), cold.PutOptions{})
	_ = s.Put(ctx, "k", []byte("2"), cold.PutOptions{IfNoneMatch: true}) // refused
	_ = s.Put(ctx, "k2", []byte("3"), cold.PutOptions{IfNoneMatch: true})
	entries, err := os.ReadDir(filepath.Join(s.Root(), "tmp"))
	if err != nil || len(entries) != 0 {
		t.Fatalf("tmp/ holds %d entries (%v) after Puts", len(entries), err)
	}
}

// A key cannot be both an object and a directory prefix of another key.
func TestFSKeyDirectoryConflict(t *testing.T) {
	ctx := t.Context()
	s := newFS(t)
	if err := s.Put(ctx, "a/b", []byte("ab"), cold.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, opts := range []cold.PutOptions{{}, {IfNoneMatch: true}} {
		if err := s.Put(ctx, "a", []byte("a"), opts); !errors.Is(err, cold.ErrInvalidKey) || errors.Is(err, cold.ErrExists) {
			t.Fatalf("Put(a, %+v) over directory a/: %v, want ErrInvalidKey", opts, err)
		}
		if err := s.Put(ctx, "a/b/c", []byte("abc"), opts); !errors.Is(err, cold.ErrInvalidKey) {
			t.Fatalf("Put(a/b/c, %+v) under object a/b: %v, want ErrInvalidKey", opts, err)
		}
	}
	if _, err := s.Head(ctx, "a"); !errors.Is(err, cold.ErrNotFound) {
		t.Fatalf("Head(a) of a directory: %v, want ErrNotFound", err)
	}
	if err := s.RangeGet(ctx, "a", 0, nil); !errors.Is(err, cold.ErrNotFound) {
		t.Fatalf("RangeGet(a) of a directory: %v, want ErrNotFound", err)
	}
	if err := s.Delete(ctx, "a"); err != nil {
		t.Fatalf("Delete(a) of a directory: %v", err)
	}
	if got := listKeys(t, s, ""); strings.Join(got, ",") != "a/b" {
		t.Fatalf("after conflicts List = %q, want [a/b]", got)
	}
	// Deleting a/b removes the empty directory a/, so a is free again.
	if err := s.Delete(ctx, "a/b"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(s.Root(), "objects", "a")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Delete left the empty directory a/: %v", err)
	}
	if err := s.Put(ctx, "a", []byte("a"), cold.PutOptions{IfNoneMatch: true}); err != nil {
		t.Fatalf("Put(a) after its directory emptied: %v", err)
	}
}

func TestFSSegmentTooLong(t *testing.T) {
	s := newFS(t)
	key := "ns/" + strings.Repeat("x", 256)
	if err := s.Put(t.Context(), key, nil, cold.PutOptions{}); !errors.Is(err, cold.ErrInvalidKey) {
		t.Fatalf("Put with a 256-byte segment: %v, want ErrInvalidKey", err)
	}
}

// Put and Delete race on one directory: Delete's empty-directory cleanup
// must never make a Put fail.
func TestFSPutDeleteSameDirectory(t *testing.T) {
	ctx := t.Context()
	s := newFS(t)
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for _, key := range []string{"r/q/x", "r/q/y", "r/z"} {
		wg.Go(func() {
			for range 200 {
				if err := s.Put(ctx, key, []byte(key), cold.PutOptions{}); err != nil {
					errs <- err
					return
				}
				if err := s.Delete(ctx, key); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// A full disk surfaces as ErrUnavailable wrapping ENOSPC, leaves no object
// and no temp file. It needs a tiny tmpfs, so root; skipped otherwise.
func TestFSDiskFull(t *testing.T) {
	dir := t.TempDir()
	if os.Geteuid() != 0 {
		t.Skip("NOT_RUN: the ENOSPC test mounts a 64 KiB tmpfs and needs root")
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=64k"); err != nil {
		t.Skipf("NOT_RUN: the ENOSPC test cannot mount a tmpfs: %v", err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, 0); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	s, err := cold.NewFS(dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if err := s.Put(ctx, "small", []byte("fits"), cold.PutOptions{}); err != nil {
		t.Fatalf("small Put: %v", err)
	}
	err = s.Put(ctx, "big", bytes.Repeat([]byte{1}, 1<<20), cold.PutOptions{})
	if !errors.Is(err, syscall.ENOSPC) || !errors.Is(err, cold.ErrUnavailable) || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("Put of 1 MiB into 64 KiB: %v, want disk full wrapping ErrUnavailable and ENOSPC", err)
	}
	t.Logf("full-disk error: %v", err)
	if _, err := s.Head(ctx, "big"); !errors.Is(err, cold.ErrNotFound) {
		t.Fatalf("Head(big) after ENOSPC: %v, want ErrNotFound", err)
	}
	if entries, _ := os.ReadDir(filepath.Join(dir, "tmp")); len(entries) != 0 {
		t.Fatalf("ENOSPC left %d temp files", len(entries))
	}
	dst := make([]byte, 4)
	if err := s.RangeGet(ctx, "small", 0, dst); err != nil || string(dst) != "fits" {
		t.Fatalf("earlier object after ENOSPC: %q, %v", dst, err)
	}
}

func listKeys(t *testing.T, s cold.Store, prefix string) []string {
	t.Helper()
	var keys []string
	if err := s.List(t.Context(), prefix, func(info cold.ObjectInfo) error {
		keys = append(keys, info.Key)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return keys
}
