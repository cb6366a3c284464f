package secretfile

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestReadRegularAndSymlink(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "key")
	if err := os.WriteFile(p, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link") // as Kubernetes mounts a secret
	if err := os.Symlink(p, link); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{p, link} {
		if b, err := Read(path, 7); err != nil || string(b) != "s3cret\n" {
			t.Errorf("%s: %q %v", path, b, err)
		}
	}
	empty := filepath.Join(dir, "empty")
	os.WriteFile(empty, nil, 0o600)
	if b, err := Read(empty, 7); err != nil || len(b) != 0 {
		t.Errorf("empty file: %q %v", b, err)
	}
}

// TestReadRefusesWhatIsNotARegularFile: a FIFO (whose open used to wait
// for a writer forever), a directory, a device and a symbolic link to a
// FIFO are refused at once, naming the file.
func TestReadRefusesWhatIsNotARegularFile(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link-to-fifo")
	if err := os.Symlink(fifo, link); err != nil {
		t.Fatal(err)
	}
	cases := map[string]string{fifo: "named pipe", link: "named pipe", dir: "directory"}
	if _, err := os.Stat("/dev/null"); err == nil {
		cases["/dev/null"] = "character device"
	}
	for path, kind := range cases {
		_, err := Read(path, 1<<10)
		var pe *fs.PathError
		if !errors.Is(err, ErrNotRegular) || !errors.As(err, &pe) || pe.Path != path || !strings.Contains(err.Error(), kind) {
			t.Errorf("%s: %v, want ErrNotRegular naming it, a %s", path, err, kind)
		}
	}
}

func TestReadIsBounded(t *testing.T) {
	p := filepath.Join(t.TempDir(), "big")
	if err := os.WriteFile(p, []byte("0123456789"), 0o600); err != nil {
		t.Fatal(err)
	}
	if b, err := Read(p, 10); err != nil || len(b) != 10 {
		t.Fatalf("at the bound: %q %v", b, err)
	}
	_, err := Read(p, 9)
	var pe *fs.PathError
	if !errors.Is(err, ErrTooLarge) || !errors.As(err, &pe) || pe.Path != p {
		t.Fatalf("over the bound: %v", err)
	}
	// A file whose size says less than it holds (as /proc's do) is still
	// read no further than the bound.
	if fi, err := os.Stat("/proc/self/status"); err == nil && fi.Size() == 0 {
		if _, err := Read("/proc/self/status", 16); !errors.Is(err, ErrTooLarge) {
			t.Fatalf("/proc/self/status: %v", err)
		}
	}
	if _, err := Read(filepath.Join(t.TempDir(), "missing"), 9); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing file: %v", err)
	}
}
