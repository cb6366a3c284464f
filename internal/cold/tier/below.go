package tier

import (
	"context"

	"github.com/gpucache/gpucache/api/identity"
	"github.com/gpucache/gpucache/api/wire"
	"github.com/gpucache/gpucache/internal/lower"
)

// Below is the cold tier as the server sees it, a lower.Tier: refills read
// straight into the DRAM slot (RefillInto), presence is the pointer index,
// Stored remembers the identity that Evicted needs to build a manifest.
// StatsFunc, when set, gives its STAT entries (the daemon's, which know
// whether the store answered); TenantStats gives the tenant's cold bytes
// and quota.
type Below struct {
	*Tier
	StatsFunc func() []wire.StatEntry
}

var _ lower.Tier = Below{}

// Refill implements lower.Tier.
func (b Below) Refill(ctx context.Context, ns identity.Namespace, _ identity.NamespaceDigest, key identity.BlockKey, alloc lower.Alloc) (int, bool) {
	n, res, _ := b.RefillInto(ctx, ns, key, alloc)
	return n, res.Hit
}

// Stored implements lower.Tier.
func (b Below) Stored(id identity.CacheIdentity, d identity.NamespaceDigest, key identity.BlockKey) {
	b.RememberKeyed(id, d, key)
}

// TenantStats implements lower.Tier: the tenant's cold bytes and quota.
func (b Below) TenantStats(tenant string) []wire.StatEntry {
	u := b.TenantColdUsage(tenant)
	return []wire.StatEntry{
		{Name: "tenant_cold_bytes", Value: uint64(max(u.Bytes, 0))},
		{Name: "tenant_cold_quota_bytes", Value: uint64(max(u.Quota, 0))},
	}
}

// Stats implements lower.Tier.
func (b Below) Stats() []wire.StatEntry {
	if b.StatsFunc == nil {
		return nil
	}
	return b.StatsFunc()
}
