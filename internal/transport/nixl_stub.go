//go:build !rdma_nixl

package transport

import "fmt"

const rdmaNIXLTag = false

// OpenNIXL refuses: this build has no NIXL/RDMA transport. The error wraps
// ErrNotLinked; the Transport is nil (an untyped nil, so a caller's
// `rdma != nil` check is honest).
func OpenNIXL(cfg NIXLConfig) (Transport, error) {
	_ = cfg.withDefaults()
	return nil, fmt.Errorf("open nixl (built without rdma_nixl): %w", ErrNotLinked)
}
