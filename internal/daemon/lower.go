package daemon

import (
	"github.com/gpucache/gpucache/api/identity"
	"github.com/gpucache/gpucache/api/wire"
	"github.com/gpucache/gpucache/internal/cold/tier"
	"github.com/gpucache/gpucache/internal/config"
	"github.com/gpucache/gpucache/internal/lower"
)

// lowerTiers composes the storage below DRAM, upper first: the flash tier
// (flash.go), then the cold tier (cold.go); nil when there is neither. A DRAM eviction is offered to it
// (the hot store's OnEvict), a DRAM miss refills from it (the server's
// Config.Lower).
func (n *Node) lowerTiers() lower.Tier {
	var tiers []lower.Tier
	if n.flash != nil {
		tiers = append(tiers, n.flash)
	}
	if ct := n.cold.tier; ct != nil {
		b := tier.Below{Tier: ct, StatsFunc: n.coldStats}
		if n.cfg.ColdWriteBehind {
			tiers = append(tiers, b)
		} else {
			tiers = append(tiers, readOnly{b})
		}
	}
	// flash_cold: through offers every eviction to the cold tier too;
	// reclaim leaves it to flash, which hands a reclaimed segment's
	// blocks down (flash.Config.OnReclaim, startFlash).
	return lower.NewChain(n.cfg.FlashCold != config.FlashColdReclaim, tiers...)
}

// coldStats are the cold tier's STAT entries: the store's state and
// write-behind (coldNode.stats), the lifecycle's counters, the presence
// index's and the quota ledger's.
func (n *Node) coldStats() []wire.StatEntry {
	e := n.life.withStats(n.cold.stats)()
	e = append(e, indexStats(n.cold.tier.Stats())...)
	return append(e, coldQuotaStats(n.cold.tier)...)
}

// readOnly is a tier that is read, never written behind
// (cold_write_behind: false): a block stored or evicted is not offered to
// it. Delete still reaches it: a delete must hide every copy.
type readOnly struct{ lower.Tier }

func (readOnly) Stored(identity.CacheIdentity, identity.NamespaceDigest, identity.BlockKey) {}

func (readOnly) Evicted(identity.NamespaceDigest, identity.BlockKey, identity.BlockKey, uint32, []byte) bool {
	return false
}
