//go:build rdma_nixl

package transport

import (
	"fmt"
	"os"
	"strings"
)

const rdmaNIXLTag = true

// OpenNIXL, in the rdma_nixl build, probes cfg.DevicePath for RDMA devices
// and still refuses: libnixl is not linked, so nothing can be registered or
// posted. Without a device the error wraps ErrNoDevice and ErrNotLinked;
// with one it wraps ErrNotLinked and names the devices it saw. The Transport
// is always nil.
func OpenNIXL(cfg NIXLConfig) (Transport, error) {
	cfg = cfg.withDefaults()
	ents, err := os.ReadDir(cfg.DevicePath)
	if err != nil || len(ents) == 0 {
		why := "empty"
		if err != nil {
			why = err.Error()
		}
		return nil, fmt.Errorf("open nixl: %w under %s (%s): %w", ErrNoDevice, cfg.DevicePath, why, ErrNotLinked)
	}
	names := make([]string, len(ents))
	for i, e := range ents {
		names[i] = e.Name()
	}
	return nil, fmt.Errorf("open nixl: device %s under %s present, libnixl absent: %w",
		strings.Join(names, ","), cfg.DevicePath, ErrNotLinked)
}
