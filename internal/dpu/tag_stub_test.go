//go:build !dpu_bf3

package dpu

import (
	"errors"
	"strings"
	"testing"
)

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
