package lower

import (
	"context"

	"github.com/gpucache/gpucache/api/identity"
	"github.com/gpucache/gpucache/api/wire"
)

// Chain is tiers composed upper first (flash, then cold). A refill tries
// each in order; presence is any tier's; a delete reaches every tier.
//
// Where an evicted block goes is the chain's WriteThrough: with it, every
// tier is offered the block (the flash tier keeps it for fast refills, the
// cold tier writes it behind at once); without it, the first tier that
// takes the block has it, and it goes further down only when that tier
// reclaims it (flash.Config.OnReclaim). Either way a block the upper tier
// declines (full, failing) is offered to the next, so nothing is lost to
// an upper tier's fault that the lower one could keep.
type Chain struct {
	tiers        []Tier
	writeThrough bool
}

// NewChain composes tiers, upper first; nil tiers are skipped. With one
// tier it is that tier.
func NewChain(writeThrough bool, tiers ...Tier) Tier {
	var ts []Tier
	for _, t := range tiers {
		if t != nil {
			ts = append(ts, t)
		}
	}
	switch len(ts) {
	case 0:
		return nil
	case 1:
		return ts[0]
	}
	return &Chain{tiers: ts, writeThrough: writeThrough}
}

// Tiers returns the chain's tiers, upper first.
func (c *Chain) Tiers() []Tier { return c.tiers }

// Refill tries each tier in order. A tier that misses after reserving the
// slot leaves it to the next: alloc is offered again with the same slot,
// so one Refill reserves at most one slot whichever tier hits.
func (c *Chain) Refill(ctx context.Context, ns identity.Namespace, d identity.NamespaceDigest, key identity.BlockKey, alloc Alloc) (int, bool) {
	n, by := c.refillFrom(ctx, ns, d, key, alloc)
	return n, by != nil
}

// refillFrom is Refill that reports the tier that hit (a leaf: a nested
// chain reports its own tier that hit), nil on a miss.
func (c *Chain) refillFrom(ctx context.Context, ns identity.Namespace, d identity.NamespaceDigest, key identity.BlockKey, alloc Alloc) (int, Tier) {
	var slot []byte
	asked, reserved := false, false
	once := func(n int) ([]byte, bool) {
		if reserved {
			if n != len(slot) {
				return nil, false // the slot is sized for an upper tier's record
			}
			return slot, true
		}
		asked = true
		b, ok := alloc(n)
		if ok {
			slot, reserved = b, true
		}
		return b, ok
	}
	for _, t := range c.tiers {
		if ctx.Err() != nil || (asked && !reserved) {
			return 0, nil // no slot: no lower tier can do better
		}
		if n, by := RefillFrom(ctx, t, ns, d, key, once); by != nil {
			return n, by
		}
	}
	return 0, nil
}

// Present reports whether any tier holds the block.
func (c *Chain) Present(d identity.NamespaceDigest, key identity.BlockKey) bool {
	for _, t := range c.tiers {
		if t.Present(d, key) {
			return true
		}
	}
	return false
}

// Delete hides the block in every tier; known if any held it, and the
// first error.
func (c *Chain) Delete(ctx context.Context, ns identity.Namespace, d identity.NamespaceDigest, key identity.BlockKey) (bool, error) {
	var known bool
	var first error
	for _, t := range c.tiers {
		k, err := t.Delete(ctx, ns, d, key)
		known = known || k
		if err != nil && first == nil {
			first = err
		}
	}
	return known, first
}

// Stored tells every tier.
func (c *Chain) Stored(id identity.CacheIdentity, d identity.NamespaceDigest, key identity.BlockKey) {
	for _, t := range c.tiers {
		t.Stored(id, d, key)
	}
}

// Evicted offers the block down the chain: to every tier with
// WriteThrough, else until one takes it.
func (c *Chain) Evicted(d identity.NamespaceDigest, key, parent identity.BlockKey, tokens uint32, payload []byte) bool {
	took := false
	for _, t := range c.tiers {
		if t.Evicted(d, key, parent, tokens, payload) {
			took = true
			if !c.writeThrough {
				return true
			}
		}
	}
	return took
}

// TenantStats joins every tier's.
func (c *Chain) TenantStats(tenant string) []wire.StatEntry {
	var e []wire.StatEntry
	for _, t := range c.tiers {
		e = append(e, t.TenantStats(tenant)...)
	}
	return e
}

// Stats joins every tier's, upper first.
func (c *Chain) Stats() []wire.StatEntry {
	var e []wire.StatEntry
	for _, t := range c.tiers {
		e = append(e, t.Stats()...)
	}
	return e
}
