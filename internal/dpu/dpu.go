package dpu

import (
	"errors"
	"fmt"
)

// NotRunHardware labels every result that would need hardware nothing here
// has exercised (BlueField, DOCA, SPDK, an NVMe device). Such a result
// carries no measured number.
const NotRunHardware = "NOT_RUN_HARDWARE"

// Errors of the DPU path.
var (
	// ErrNotRunHardware: DOCA, SPDK and the NVMe device path are not
	// linked in this build, with or without the dpu_bf3 tag. Nothing was
	// opened, registered or posted.
	ErrNotRunHardware = errors.New("gpucache/dpu: DOCA, SPDK and NVMe device access are not linked in this build: " + NotRunHardware)
	// ErrNoDevice: the dpu_bf3 build found nothing at the probed path.
	ErrNoDevice = errors.New("gpucache/dpu: no device")
	// ErrConfig: a queue or agent setting is out of range.
	ErrConfig = errors.New("gpucache/dpu: invalid config")
	// ErrReactorMismatch: a queue was bound to a reactor other than its own.
	ErrReactorMismatch = errors.New("gpucache/dpu: reactor id mismatch")
	// ErrAttached: the queue already has a reactor.
	ErrAttached = errors.New("gpucache/dpu: queue already attached to a reactor")
	// ErrQueueFull: the rings hold Depth commands not yet reaped.
	ErrQueueFull = errors.New("gpucache/dpu: queue full")
	// ErrSlotBusy: a command in flight already names the slab slot.
	ErrSlotBusy = errors.New("gpucache/dpu: slab slot busy")
	// ErrBadCommand: a command's op, slot, block or length is out of range.
	ErrBadCommand = errors.New("gpucache/dpu: bad command")
	// ErrUnwritten: a read of a simulated block nothing wrote.
	ErrUnwritten = errors.New("gpucache/dpu: block not written")
	// ErrClosed: the queue or agent is closed.
	ErrClosed = errors.New("gpucache/dpu: closed")
)

// OpenConfig names the device paths the dpu_bf3 build probes. Without the
// tag nothing is probed.
type OpenConfig struct {
	// RDMAClass is the directory DOCA devices appear under. Default
	// "/sys/class/infiniband".
	RDMAClass string
	// VFIODir is the directory SPDK's user-space NVMe driver needs.
	// Default "/dev/vfio".
	VFIODir string
}

func (c OpenConfig) withDefaults() OpenConfig {
	if c.RDMAClass == "" {
		c.RDMAClass = "/sys/class/infiniband"
	}
	if c.VFIODir == "" {
		c.VFIODir = "/dev/vfio"
	}
	return c
}

// Handle is an open DPU resource. No build returns one.
type Handle interface {
	Close() error
}

// OpenDOCA refuses: DOCA is not linked. The error wraps ErrNotRunHardware
// (and, in the dpu_bf3 build, ErrNoDevice when the probe found nothing);
// the Handle is an untyped nil.
func OpenDOCA(cfg OpenConfig) (Handle, error) {
	cfg = cfg.withDefaults()
	return nil, refuse("doca", cfg.RDMAClass)
}

// OpenSPDK refuses: SPDK is not linked. As OpenDOCA, probing VFIODir.
func OpenSPDK(cfg OpenConfig) (Handle, error) {
	cfg = cfg.withDefaults()
	return nil, refuse("spdk", cfg.VFIODir)
}

// OpenNVMeDevice refuses: no NVMe driver is linked, so path (a block
// device such as /dev/nvme0n1) is never opened. As OpenDOCA; the dpu_bf3
// build stats path.
func OpenNVMeDevice(path string) (Handle, error) {
	if path == "" {
		return nil, fmt.Errorf("open nvme: %w: empty device path: %w", ErrConfig, ErrNotRunHardware)
	}
	return nil, refuse("nvme", path)
}

// refuse builds the refusal of one open: what the build's probe saw, then
// ErrNotRunHardware.
func refuse(what, path string) error {
	if !BuildTag {
		return fmt.Errorf("open %s (built without dpu_bf3): %w", what, ErrNotRunHardware)
	}
	if seen, err := probe(path); err != nil {
		return fmt.Errorf("open %s: %w at %s (%v): %w", what, ErrNoDevice, path, err, ErrNotRunHardware)
	} else {
		return fmt.Errorf("open %s: %s present at %s, nothing linked to drive it: %w", what, seen, path, ErrNotRunHardware)
	}
}
