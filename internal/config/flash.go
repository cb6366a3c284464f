package config

import (
	"fmt"
	"slices"
)

// The local flash tier (ADR 0027; internal/flash).
//
// flash_dir turns on a tier between DRAM and the cold tier: blocks evicted
// from DRAM are appended to log-structured segment files there, indexed in
// memory, read back straight into a DRAM slot on a DRAM miss, and found
// again after a restart (SIGTERM or kill -9). Segments are reclaimed
// whole. A full or failing disk turns the tier off (counted, logged,
// retried); the node keeps serving from DRAM and the cold tier.

// Values of flash_cold and flash_reclaim.
const (
	FlashColdThrough   = "through"
	FlashColdReclaim   = "reclaim"
	FlashReclaimOldest = "oldest"
	FlashReclaimLive   = "fewest-live"
)

// minFlashSegment is the smallest flash_segment accepted.
const minFlashSegment = 1 << 20

// flashFields lists the flash tier's flags.
func (c *Config) flashFields() []field {
	return []field{
		{"flash_dir", `local flash tier directory, on NVMe ("off" disables)`, (*strVal)(&c.FlashDir)},
		{"flash_capacity", "flash tier's segment files in total (at least two segments)", &c.FlashCapacity},
		{"flash_segment", "size of one flash segment file (reclaimed whole)", &c.FlashSegment},
		{"flash_write_buffer", "evicted blocks queued in memory for the flash writer (more skip flash)", &c.FlashWriteBuffer},
		{"flash_cold", "when a block goes to the cold tier: through (on DRAM eviction) or reclaim (when flash reclaims it)", (*strVal)(&c.FlashCold)},
		{"flash_reclaim", "flash segment reclaimed when full: oldest or fewest-live", (*strVal)(&c.FlashReclaim)},
		{"flash_direct", "O_DIRECT for flash I/O: auto, on or off", (*strVal)(&c.FlashDirect)},
	}
}

// FlashEnabled reports whether flash_dir is set.
func (c Config) FlashEnabled() bool { return c.FlashDir != "" && c.FlashDir != "off" }

// validateFlash checks the flash tier's settings and the tenants' flash
// quotas.
func (c Config) validateFlash() error {
	if !slices.Contains([]string{FlashColdThrough, FlashColdReclaim}, c.FlashCold) {
		return invalidf("flash_cold %q: want %s or %s", c.FlashCold, FlashColdThrough, FlashColdReclaim)
	}
	if !slices.Contains([]string{FlashReclaimOldest, FlashReclaimLive}, c.FlashReclaim) {
		return invalidf("flash_reclaim %q: want %s or %s", c.FlashReclaim, FlashReclaimOldest, FlashReclaimLive)
	}
	if !slices.Contains([]string{"auto", "on", "off"}, c.FlashDirect) {
		return invalidf("flash_direct %q: want auto, on or off", c.FlashDirect)
	}
	if !c.FlashEnabled() {
		for _, t := range c.Tenants {
			if t.FlashQuota != 0 {
				return invalidf("tenant %q has flash_quota %s but flash_dir is off", t.Name, t.FlashQuota)
			}
		}
		return nil
	}
	if c.FlashSegment < minFlashSegment {
		return invalidf("flash_segment %s is below %s", c.FlashSegment, ByteSize(minFlashSegment))
	}
	if c.FlashSegment < 2*c.HotMaxClass {
		return invalidf("flash_segment %s cannot hold two hot_max_class blocks (%s each): set flash_segment to at least %s", c.FlashSegment, c.HotMaxClass, 2*c.HotMaxClass)
	}
	if c.FlashCapacity < 2*c.FlashSegment {
		return invalidf("flash_capacity %s must hold at least two flash_segment files (%s each)", c.FlashCapacity, c.FlashSegment)
	}
	if c.FlashWriteBuffer < c.HotMaxClass {
		return invalidf("flash_write_buffer %s cannot hold one hot_max_class block (%s)", c.FlashWriteBuffer, c.HotMaxClass)
	}
	if c.FlashCold == FlashColdReclaim && (c.ColdStore == "off" || !c.ColdWriteBehind) {
		return invalidf("flash_cold: reclaim writes blocks to the cold tier when flash reclaims them; it needs cold_store and cold_write_behind")
	}
	for _, t := range c.Tenants {
		if q := t.FlashQuota; q != 0 && (q < c.HotMaxClass || q > c.FlashCapacity) {
			return fmt.Errorf("%w: tenant %q flash_quota %s must be 0 (none) or between hot_max_class %s and flash_capacity %s",
				ErrInvalid, t.Name, q, c.HotMaxClass, c.FlashCapacity)
		}
	}
	return nil
}

// TenantFlashQuotas returns the tenants' flash quotas in bytes, by tenant
// name; tenants without one are absent.
func (c Config) TenantFlashQuotas() map[string]int64 {
	m := make(map[string]int64)
	for _, t := range c.Tenants {
		if t.FlashQuota > 0 {
			m[t.Name] = int64(t.FlashQuota)
		}
	}
	return m
}
