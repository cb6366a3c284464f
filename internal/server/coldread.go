package server

import (
	"context"
	"sync"
	"time"

	"github.com/gpucache/gpucache/internal/directory"
	"github.com/gpucache/gpucache/internal/hot"
	"github.com/gpucache/gpucache/internal/identity"
)

// coldTimeout bounds one refill from the cold tier on a hot miss.
const coldTimeout = 2 * time.Second

// coldBufs holds MaxPayload-sized buffers for refills (a refill learns the
// block's size from its manifest, after the read has to start).
var coldBufs sync.Pool

// refillMiss tries the cold tier for a block the hot tier does not have,
// through the directory's single-flight: the first session to miss leads the
// refill, the others wait for its notice. A hit is inserted into the hot tier
// and returned pinned; any failure is a miss.
func (c *conn) refillMiss(d identity.NamespaceDigest, key identity.BlockKey) (hot.View, bool) {
	refill := c.s.cfg.ColdRefill
	if refill == nil || c.ns.Tenant == "" {
		return hot.View{}, false
	}
	one := []identity.BlockKey{key}
	res := c.s.dir.Acquire(directory.Request{Key: key, Namespace: d, Tenant: c.tenant, Owner: c.id},
		func() bool { hits, _, _ := c.s.store.Lookup(d, one, 0, false); return hits == 1 })
	switch res.Outcome {
	case directory.Hit:
		return c.s.store.Acquire(d, key)
	case directory.Joined:
		t := time.NewTimer(coldTimeout)
		defer t.Stop()
		select {
		case n := <-res.Waiter.C():
			if n.Kind == directory.Finished {
				return c.s.store.Acquire(d, key)
			}
			if n.Kind == directory.Promoted {
				c.s.dir.Fail(n.Token) // let the next waiter try; this GET answers miss
			}
		case <-t.C:
			res.Waiter.Cancel()
		}
		return hot.View{}, false
	case directory.Lead:
	default:
		return hot.View{}, false
	}
	tok := res.Token
	bp, _ := coldBufs.Get().(*[]byte)
	if bp == nil || len(*bp) < int(c.s.cfg.Limits.MaxPayload) {
		b := make([]byte, c.s.cfg.Limits.MaxPayload)
		bp = &b
	}
	defer coldBufs.Put(bp)
	ctx, cancel := context.WithTimeout(context.Background(), coldTimeout)
	n, ok := refill(ctx, c.ns, key, *bp)
	cancel()
	if !ok {
		c.s.dir.Fail(tok)
		c.s.stats.coldMisses.Add(1)
		return hot.View{}, false
	}
	// The parent, position and token count are not known here (a GET
	// carries keys only); they only guide eviction order. A reader asked
	// for the block, so the hot tier's admission policy is not consulted.
	r, err := c.s.store.ReserveBlock(d, key, identity.BlockKey{}, hot.BlockMeta{Demand: true, Tenant: c.tenant}, n)
	if err != nil {
		c.s.dir.Fail(tok)
		return hot.View{}, false
	}
	copy(r.Buf, (*bp)[:n])
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
	}
	return v, ok
}
