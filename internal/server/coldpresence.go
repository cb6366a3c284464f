package server

import (
	"context"
	"time"

	"github.com/gpucache/gpucache/api/identity"
	"github.com/gpucache/gpucache/api/wire"
)

// coldDeleteTimeout bounds the cold-tier part of one DELETE request, all
// its keys together: keys it does not reach answer BUSY.
const coldDeleteTimeout = 2 * time.Second

// coldRun extends a LOOKUP's leading run of DRAM hits (keys[:hits]) with
// the blocks that follow it and are in DRAM or, by Config.ColdPresent, in
// the cold tier, and returns the new run length. The lease stays on the
// DRAM run only: a cold block is refilled by the GET, it cannot be leased.
// A namespace without a tenant is never refilled (refillMiss), so it gets
// no cold hits either.
func (c *conn) coldRun(d identity.NamespaceDigest, keys []identity.BlockKey, hits int) int {
	present := c.s.cfg.ColdPresent
	if present == nil || c.ns.Tenant == "" {
		return hits
	}
	for hits < len(keys) {
		k := keys[hits]
		if !present(d, k) {
			if n, _, _ := c.s.store.Lookup(d, keys[hits:hits+1], 0, false); n != 1 {
				break
			}
		}
		hits++
	}
	return hits
}

// coldDelete hides key in the cold tier once its DRAM copy is gone (or was
// never there) and returns the key's DELETE status: DELETED if DRAM or the
// cold tier held it, MISS if neither did, BUSY if the cold tier could not
// confirm the delete (the DRAM copy is gone; the cold copy may remain, so
// the client should retry).
func (c *conn) coldDelete(ctx context.Context, d identity.NamespaceDigest, key identity.BlockKey, dramDeleted bool) wire.Status {
	st := wire.StatusMiss
	if dramDeleted {
		st = wire.StatusDeleted
	}
	del := c.s.cfg.ColdDelete
	if del == nil || c.ns.Tenant == "" {
		return st
	}
	if present := c.s.cfg.ColdPresent; present != nil && present(d, key) {
		st = wire.StatusDeleted
	}
	if err := del(ctx, c.ns, d, key); err != nil {
		c.s.log.Warn("DELETE: the cold copy could not be hidden; answered BUSY (the DRAM copy is gone)",
			"tenant", c.tenant, "block", key.String(), "err", err)
		return wire.StatusBusy
	}
	return st
}
