//go:build !dpu_bf3

package dpu

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func mkdirFile(t *testing.T, dir, name string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), nil, 0o644); err != nil {
		t.Fatal(err)
	}
}

// Without the tag nothing is probed: the refusal says so and never claims
// a device was or was not found.
func TestUntaggedBuildProbesNothing(t *testing.T) {
	if BuildTag {
		t.Fatal("BuildTag true without dpu_bf3")
	}
	_, err := OpenDOCA(OpenConfig{RDMAClass: t.TempDir()})
	if !strings.Contains(err.Error(), "built without dpu_bf3") || errors.Is(err, ErrNoDevice) {
		t.Fatalf("untagged refusal: %v", err)
	}
}
