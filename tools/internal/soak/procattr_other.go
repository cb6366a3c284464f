//go:build !linux

package soak

import "os/exec"

// setDeathSignal does nothing off Linux: teardown still kills every child.
func setDeathSignal(*exec.Cmd) {}

// diskUsed is not measured off Linux (the tmpfs is Linux only).
func diskUsed(string) (int64, error) { return 0, nil }
