//go:build dpu_bf3

package dpu

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
)

// The tagged build probes the path and names what it saw, and still
// refuses: a device present is not a device driven.
func TestTaggedBuildProbesAndStillRefuses(t *testing.T) {
	if !BuildTag {
		t.Fatal("BuildTag false with dpu_bf3")
	}
	dir := t.TempDir()
	mkdirFile(t, dir, "mlx5_0")
	_, err := OpenDOCA(OpenConfig{RDMAClass: dir})
	if !errors.Is(err, ErrNotRunHardware) || errors.Is(err, ErrNoDevice) || !strings.Contains(err.Error(), "mlx5_0 present") {
		t.Fatalf("device present: %v", err)
	}
	_, err = OpenSPDK(OpenConfig{VFIODir: filepath.Join(dir, "none")})
	if !errors.Is(err, ErrNotRunHardware) || !errors.Is(err, ErrNoDevice) {
		t.Fatalf("device absent: %v", err)
	}
	_, err = OpenDOCA(OpenConfig{RDMAClass: t.TempDir()})
	if !errors.Is(err, ErrNoDevice) || !strings.Contains(err.Error(), "empty") {
		t.Fatalf("empty class dir: %v", err)
	}
}
