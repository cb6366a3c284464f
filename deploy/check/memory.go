package check

import "github.com/gpucache/gpucache/internal/config"

const (
	kib = int64(1) << 10
	mib = int64(1) << 20
)

// MemoryBound is the daemon's resident memory bound for cfg, term by term
// as docs/OPERATIONS.md ("Memory bound") gives it:
//
//	M_base + hot_capacity + M_index + G × M_policy + G × M_heap
//
// with G = 2 (GOGC 100), plus the heap floor gpucached keeps (1% of
// hot_capacity, at most 64 MiB; "GC pauses") and, with the flash tier,
// its write buffer on the heap (× G) and its index at about 200 B a block
// (ADR 0027) when every block is of the smallest class.
func MemoryBound(cfg config.Config) int64 {
	hot := int64(cfg.HotCapacity)
	minClass := int64(cfg.HotMinClass)
	index := hot / minClass * 256
	var policy int64 // M_policy: 0 with builtin (no per-block policy state)
	if cfg.HotPolicy != config.BuiltinHotPolicy {
		policy = hot / minClass * 530
	}
	conn := 144*kib + int64(cfg.MaxInFlight)*5*kib
	if cfg.TLSEnabled() {
		conn += 48 * kib
	}
	heap := int64(cfg.RequestBuffers) + int64(cfg.MaxConns)*conn + int64(cfg.ReplayMaxNonces)*128
	if cfg.AdminListen != "off" {
		heap += int64(cfg.AdminMaxConns) * 64 * kib
	}
	if cfg.ColdStore != "off" {
		heap += int64(cfg.ColdPending) + 64*mib + 32*mib + 32*mib + 160*mib + int64(cfg.ColdIndexMax)*64
	}
	if cfg.Clustered() {
		heap += 256 * mib
	}
	var flash int64
	if cfg.FlashEnabled() {
		heap += int64(cfg.FlashWriteBuffer)
		flash = int64(cfg.FlashCapacity) / minClass * 200
	}
	floor := min(hot/100, 64*mib)
	return 64*mib + hot + index + 2*policy + 2*heap + floor + flash
}

// ChartMemory is the chart's sizing rule (deploy/helm/gpucache
// _helpers.tpl, gpucache.memoryMi) computed from the loaded config:
// hot_capacity + hot_capacity × 256 / hot_min_class + overhead, plus
// hot_capacity × 1060 / hot_min_class with any hot_policy but builtin
// (G × M_policy: adaptive's state, 530 B a slot, doubled by the GC's
// headroom), plus with flash flash_capacity × 200 / hot_min_class + 2 ×
// flash_write_buffer; rounded up to MiB.
func ChartMemory(cfg config.Config, overhead int64) int64 {
	hot, minClass := int64(cfg.HotCapacity), int64(cfg.HotMinClass)
	total := hot + hot*256/minClass + overhead
	if cfg.HotPolicy != config.BuiltinHotPolicy {
		total += hot * 1060 / minClass
	}
	if cfg.FlashEnabled() {
		total += int64(cfg.FlashCapacity)*200/minClass + 2*int64(cfg.FlashWriteBuffer)
	}
	return (total + mib - 1) / mib * mib
}
