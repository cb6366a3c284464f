package config

import (
	"fmt"

	"github.com/gpucache/gpucache/api/wire"
)

// Per-tenant shares of the hot tier, of the fill table and of the
// request buffers (docs/adr/0013-per-tenant-fair-share.md). What one tenant can hold back
// from the others is capped: hot-tier bytes in leases and PUTs in flight,
// live leases, fills in flight, and request-buffer bytes. Unless set, each cap is a
// fair share: the whole divided by the number of configured tenants, or by
// OpenModeShares in open mode (no tenants: any HELLO names its own tenant,
// so the split only stops one runaway client taking everything).

// OpenModeShares divides the node among tenants in open mode: each tenant
// name may hold at most half.
const OpenModeShares = 2

// FillSlots is the size of the node's fill table (the directory's
// MaxFills), which TenantFills shares.
const FillSlots = 65536

// TenantShares returns how many shares the fair share divides into: the
// configured tenants, or OpenModeShares without tenants.
func (c Config) TenantShares() int {
	if n := len(c.Tenants); n > 0 {
		return n
	}
	return OpenModeShares
}

// TenantHoldCap returns the hot-tier bytes one tenant may hold in leases
// and PUTs in flight: tenant_hold_bytes, or hot_capacity / TenantShares,
// but never less than one hot_max_class block (with more tenants than
// hot_capacity / hot_max_class the shares then overlap; the daemon warns).
func (c Config) TenantHoldCap() int64 {
	if c.TenantHoldBytes > 0 {
		return int64(c.TenantHoldBytes)
	}
	return max(int64(c.HotCapacity)/int64(c.TenantShares()), int64(c.HotMaxClass))
}

// TenantFillCap returns the fills one tenant may have in flight:
// tenant_fills, or FillSlots / TenantShares (at least 1).
func (c Config) TenantFillCap() int {
	if c.TenantFills > 0 {
		return c.TenantFills
	}
	return max(FillSlots/c.TenantShares(), 1)
}

// TenantLeaseCap returns the live leases one tenant may hold: a fair
// share of maxLeases (the hot tier's MaxLeases), at least 1.
func (c Config) TenantLeaseCap(maxLeases int) int {
	return max(maxLeases/c.TenantShares(), 1)
}

// PreSessionBuffers is the part of request_buffers kept for connections
// that have not completed HELLO: room for 4 of the largest bodies such a
// connection may send (a control body of maxBatch keys). It mirrors the
// server's pre-session bucket.
func PreSessionBuffers(maxBatch int) ByteSize {
	return ByteSize(4 * (4 + wire.MaxNamespaceLen + 8 + 4 + maxBatch*wire.KeySize + 64))
}

// TenantRequestBufferCap returns the request-buffer bytes one tenant's
// sessions may hold together: tenant_request_buffers, or what the
// pre-session bucket leaves of request_buffers divided by TenantShares,
// but never less than the largest request (MinRequestBuffers) nor more
// than request_buffers. It mirrors reqbuf.FairShare.
func (c Config) TenantRequestBufferCap() int64 {
	if c.TenantRequestBuffers > 0 {
		return int64(c.TenantRequestBuffers)
	}
	share := (int64(c.RequestBuffers) - int64(PreSessionBuffers(c.MaxBatch))) / int64(c.TenantShares())
	return min(max(share, int64(MinRequestBuffers(c.MaxBatch))), int64(c.RequestBuffers))
}

// validateTenantShares checks tenant_hold_bytes, tenant_fills and
// tenant_request_buffers.
func (c Config) validateTenantShares() error {
	if c.TenantHoldBytes != 0 && (c.TenantHoldBytes < c.HotMaxClass || c.TenantHoldBytes > c.HotCapacity) {
		return fmt.Errorf("%w: tenant_hold_bytes %s must be 0 (a fair share) or between hot_max_class %s and hot_capacity %s",
			ErrInvalid, c.TenantHoldBytes, c.HotMaxClass, c.HotCapacity)
	}
	if c.TenantFills < 0 || c.TenantFills > FillSlots {
		return fmt.Errorf("%w: tenant_fills %d must be 0 (a fair share) or 1..%d", ErrInvalid, c.TenantFills, FillSlots)
	}
	if min := MinRequestBuffers(c.MaxBatch); c.TenantRequestBuffers != 0 && (c.TenantRequestBuffers < min || c.TenantRequestBuffers > c.RequestBuffers) {
		return fmt.Errorf("%w: tenant_request_buffers %s must be 0 (a fair share) or between the largest request table's %s (%d bytes; max_batch %d) and request_buffers %s",
			ErrInvalid, c.TenantRequestBuffers, min.Human(), int64(min), c.MaxBatch, c.RequestBuffers)
	}
	for _, t := range c.Tenants {
		if q := t.DRAMQuota; q != 0 && (q < c.HotMaxClass || q > c.HotCapacity) {
			return fmt.Errorf("%w: tenant %q dram_quota %s must be 0 (none) or between hot_max_class %s and hot_capacity %s",
				ErrInvalid, t.Name, q, c.HotMaxClass, c.HotCapacity)
		}
		if err := c.validateColdQuota(t); err != nil {
			return err
		}
	}
	return nil
}

// validateColdQuota checks a tenant's cold_quota: 0 (none), or at least
// hot_max_class (below it every largest block would be dropped), and only
// with a cold tier.
func (c Config) validateColdQuota(t TenantConfig) error {
	switch q := t.ColdQuota; {
	case q == 0:
		return nil
	case q < c.HotMaxClass:
		return fmt.Errorf("%w: tenant %q cold_quota %s must be 0 (none) or at least hot_max_class %s",
			ErrInvalid, t.Name, q, c.HotMaxClass)
	case c.ColdStore == "off":
		return fmt.Errorf("%w: tenant %q cold_quota %s needs a cold tier, but cold_store is off", ErrInvalid, t.Name, q)
	}
	return nil
}

// TenantColdQuotas returns the tenants' cold-tier quotas in bytes, by
// tenant name; tenants without one are absent.
func (c Config) TenantColdQuotas() map[string]int64 {
	m := make(map[string]int64)
	for _, t := range c.Tenants {
		if t.ColdQuota > 0 {
			m[t.Name] = int64(t.ColdQuota)
		}
	}
	return m
}

// TenantDRAMQuotas returns the tenants' DRAM quotas in bytes, by tenant
// name; tenants without one are absent.
func (c Config) TenantDRAMQuotas() map[string]int64 {
	m := make(map[string]int64)
	for _, t := range c.Tenants {
		if t.DRAMQuota > 0 {
			m[t.Name] = int64(t.DRAMQuota)
		}
	}
	return m
}
