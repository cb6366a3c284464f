package transport

import "errors"

// NIXL/RDMA errors.
var (
	// ErrNotLinked: the NIXL/RDMA transport is not linked into this build,
	// with or without the rdma_nixl build tag. Nothing was opened or posted.
	ErrNotLinked = errors.New("gpucache/transport: NIXL/RDMA not linked in this build: " + NotRunHardware)
	// ErrNoDevice: the rdma_nixl build found no RDMA device to open.
	ErrNoDevice = errors.New("gpucache/transport: no RDMA device")
)

// NIXLConfig configures OpenNIXL.
type NIXLConfig struct {
	// DevicePath is the directory the rdma_nixl build probes for RDMA
	// devices. Default "/dev/infiniband".
	DevicePath string
}

func (c NIXLConfig) withDefaults() NIXLConfig {
	if c.DevicePath == "" {
		c.DevicePath = "/dev/infiniband"
	}
	return c
}

// RDMAStatus is this build's RDMA/NIXL capability. `gpucache doctor`
// (internal/doctor) reads it: the rdma check reports BuildTag beside the
// RDMA devices it finds, and the rlimit_memlock check warns about a limit
// below hot_capacity only when Linked.
type RDMAStatus struct {
	// BuildTag reports whether the build used the rdma_nixl tag.
	BuildTag bool
	// Linked reports whether libnixl is linked: always false.
	Linked bool
	// Label is NotRunHardware: no RDMA path has run on hardware.
	Label string
}

// RDMA reports this build's RDMA/NIXL capability. It probes nothing.
func RDMA() RDMAStatus {
	return RDMAStatus{BuildTag: rdmaNIXLTag, Linked: false, Label: NotRunHardware}
}
