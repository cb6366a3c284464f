//go:build rdma_nixl

package transport

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The rdma_nixl build still refuses: without a device it reports
// ErrNoDevice and ErrNotLinked; with one it sees the device and refuses
// with ErrNotLinked, since libnixl is not linked.
func TestNIXLOpenRefusesWithTag(t *testing.T) {
	if !RDMA().BuildTag {
		t.Fatal("built with rdma_nixl but RDMA().BuildTag is false")
	}
	dir := t.TempDir()
	tr, err := OpenNIXL(NIXLConfig{DevicePath: filepath.Join(dir, "absent")})
	if tr != nil || !errors.Is(err, ErrNoDevice) || !errors.Is(err, ErrNotLinked) {
		t.Fatalf("no device: %v, %v", tr, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "uverbs0"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	tr, err = OpenNIXL(NIXLConfig{DevicePath: dir})
	if tr != nil || !errors.Is(err, ErrNotLinked) || errors.Is(err, ErrNoDevice) {
		t.Fatalf("device present: %v, %v", tr, err)
	}
	if !strings.Contains(err.Error(), "uverbs0") || !strings.Contains(err.Error(), NotRunHardware) {
		t.Fatalf("error should name the device and %s: %v", NotRunHardware, err)
	}
}
