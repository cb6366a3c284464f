package server

import (
	"context"
	"time"

	"github.com/gpucache/gpucache/api/identity"
	"github.com/gpucache/gpucache/internal/directory"
	"github.com/gpucache/gpucache/internal/hot"
	"github.com/gpucache/gpucache/internal/lower"
)

// coldTimeout bounds one refill from below DRAM (flash, then the cold
// tier) on a hot miss.
const coldTimeout = 2 * time.Second

// acquireOrRefill pins the block (d, key) from DRAM or, on a miss, refills
// it from the tiers below (refillMiss). It is the read path of GET,
// GET_INTO and RESP GET:
//
//	hot.Store.Acquire ─hit─► View
//	      └─miss─► refillMiss ─► directory (single-flight) ─► Config.Lower.Refill
//	                                        (flash, then cold) into a reserved slot ─► CommitAcquire
func (c *conn) acquireOrRefill(d identity.NamespaceDigest, key identity.BlockKey) (hot.View, bool) {
	if v, ok := c.s.store.Acquire(d, key); ok {
		c.served(tierDRAM)
		return v, true
	}
	return c.refillMiss(d, key)
}

// refillMiss tries the tiers below DRAM for a block DRAM does not have,
// through the directory's single-flight: the first session to miss leads the
// refill, the others wait for its notice. A hit is inserted into DRAM
// and returned pinned; any failure is a miss.
func (c *conn) refillMiss(d identity.NamespaceDigest, key identity.BlockKey) (hot.View, bool) {
	lo := c.s.cfg.Lower
	if lo == nil || c.ns.Tenant == "" {
		return hot.View{}, false
	}
	one := []identity.BlockKey{key}
	res := c.s.dir.Acquire(directory.Request{Key: key, Namespace: d, Tenant: c.tenant, Owner: c.id},
		func() bool { hits, _, _ := c.s.store.Lookup(d, one, 0, false); return hits == 1 })
	switch res.Outcome {
	case directory.Hit:
		v, ok := c.s.store.Acquire(d, key)
		if ok {
			c.served(tierDRAM)
		}
		return v, ok
	case directory.Joined:
		if h := c.s.cfg.Hooks.Joined; h != nil {
			h()
		}
		start := time.Now()
		t := time.NewTimer(coldTimeout)
		defer t.Stop()
		select {
		case n := <-res.Waiter.C():
			c.s.lat.fillWait(fillRefill, noticeOutcome(n.Kind), time.Since(start))
			if n.Kind == directory.Finished {
				v, ok := c.s.store.Acquire(d, key)
				if ok {
					// Another session's refill brought it: labelled by
					// where it is below DRAM.
					c.served(c.belowTier(d, key))
				}
				return v, ok
			}
			if n.Kind == directory.Promoted {
				c.s.dir.Fail(n.Token) // let the next waiter try; this GET answers miss
			}
		case <-t.C:
			c.s.lat.fillWait(fillRefill, fillTimeout, time.Since(start))
			res.Waiter.Cancel()
		}
		return hot.View{}, false
	case directory.Lead:
	default:
		return hot.View{}, false
	}
	tok := res.Token
	// The refill reads the payload straight into a hot-tier slot: it
	// learns the length from the flash index or the cold manifest, then alloc reserves the slot
	// (charged to the tenant like a PUT), so no payload-sized buffer is
	// ever on the Go heap, whatever MaxPayload is (ADR 0015). The parent,
	// position and token count are not known here (a GET carries keys
	// only); they only guide eviction order. A reader asked for the block,
	// so the hot tier's admission policy is not consulted.
	var r hot.Reservation
	reserved := false
	alloc := func(n int) ([]byte, bool) {
		if reserved {
			return nil, false // one slot per refill
		}
		var err error
		r, err = c.s.store.ReserveBlock(d, key, identity.BlockKey{}, hot.BlockMeta{Demand: true, Tenant: c.tenant}, n)
		if err != nil {
			return nil, false
		}
		reserved = true
		return r.Buf, true
	}
	ctx, cancel := context.WithTimeout(context.Background(), coldTimeout)
	n, by := lower.RefillFrom(ctx, lo, c.ns, d, key, alloc)
	ok := by != nil
	cancel()
	if !ok || !reserved || n != len(r.Buf) {
		if reserved {
			c.s.store.Abort(r) // the slot may hold part of a failed read: never published
		}
		c.s.dir.Fail(tok)
		c.s.stats.coldMisses.Add(1)
		return hot.View{}, false
	}
	// The hot seal (seal_hot_reads, off by default) is a second pass over
	// the slot: the refill hashes the payload checksum as the body streams
	// in, but the seal is computed here, once the block is whole.
	if c.s.sealer != nil {
		if err := c.s.sealer.tag(c.s.store, r, d, key); err != nil {
			c.s.store.Abort(r)
			c.s.dir.Fail(tok)
			return hot.View{}, false
		}
	}
	// Publish and pin at once: a concurrent refill on another connection
	// must not evict the block before this GET serves it.
	v, ok := c.s.store.CommitAcquire(r)
	c.s.dir.Finish(tok)
	if ok {
		c.s.stats.coldHits.Add(1)
		c.served(tierOf(by))
	}
	return v, ok
}

// tierOf is the latency label of the tier below DRAM that served a
// refill: a local tier is flash, any other the cold tier.
func tierOf(by lower.Tier) latTier {
	if lower.IsLocal(by) {
		return tierFlash
	}
	return tierCold
}

// belowTier is the latency label of a block another session refilled:
// flash when a local tier holds it, else cold.
func (c *conn) belowTier(d identity.NamespaceDigest, key identity.BlockKey) latTier {
	if lower.PresentLocal(c.s.cfg.Lower, d, key) {
		return tierFlash
	}
	return tierCold
}

// stored announces a block committed to DRAM to the tiers below, so they
// can write it behind when DRAM evicts it. id's slices alias connection
// buffers; the tiers copy what they keep.
func (s *Server) stored(id identity.CacheIdentity, d identity.NamespaceDigest, key identity.BlockKey) {
	if s.cfg.Lower != nil {
		s.cfg.Lower.Stored(id, d, key)
	}
}
