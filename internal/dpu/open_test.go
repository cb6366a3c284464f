package dpu

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// mkdirFile creates dir and an empty file name in it.
func mkdirFile(t *testing.T, dir, name string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), nil, 0o644); err != nil {
		t.Fatal(err)
	}
}

// Every open refuses, in this build whichever it is: the error wraps
// ErrNotRunHardware, names NOT_RUN_HARDWARE, and the Handle is an untyped
// nil. The paths point at a directory that exists, at one that does not,
// and at a file, so the dpu_bf3 probe sees each case.
func TestEveryOpenRefuses(t *testing.T) {
	dir := t.TempDir()
	present := filepath.Join(dir, "present")
	mkdirFile(t, present, "mlx5_0")
	file := filepath.Join(present, "mlx5_0")
	missing := filepath.Join(dir, "missing")
	for _, devs := range []OpenConfig{{}, {RDMAClass: present, VFIODir: present}, {RDMAClass: missing, VFIODir: missing}} {
		opens := map[string]func() (Handle, error){
			"doca": func() (Handle, error) { return OpenDOCA(devs) },
			"spdk": func() (Handle, error) { return OpenSPDK(devs) },
		}
		for _, p := range []string{file, missing, "/dev/nvme0n1", ""} {
			opens["nvme "+p] = func() (Handle, error) { return OpenNVMeDevice(p) }
		}
		for name, open := range opens {
			h, err := open()
			if h != nil {
				t.Fatalf("%s %+v returned a handle", name, devs)
			}
			if !errors.Is(err, ErrNotRunHardware) || !strings.HasSuffix(err.Error(), NotRunHardware) {
				t.Fatalf("%s %+v: %v", name, devs, err)
			}
		}
	}
}
