package server

import (
	"context"
	"time"

	"github.com/gpucache/gpucache/api/identity"
	"github.com/gpucache/gpucache/api/wire"
	"github.com/gpucache/gpucache/internal/lower"
)

// coldDeleteTimeout bounds the part below DRAM of one DELETE request, all
// its keys together: keys it does not reach answer BUSY.
const coldDeleteTimeout = 2 * time.Second

// coldRun extends a LOOKUP's leading run of DRAM hits (keys[:hits]) with
// the blocks that follow it and are in DRAM or, by Config.Lower's
// presence, in a tier below (flash or cold), and returns the new run
// length. The lease stays on the DRAM run only: a block below DRAM is
// refilled by the GET, it cannot be leased.
// A namespace without a tenant is never refilled (refillMiss), so it gets
// no cold hits either.
func (c *conn) coldRun(d identity.NamespaceDigest, keys []identity.BlockKey, hits int) int {
	lo := c.s.cfg.Lower
	if lo == nil || c.ns.Tenant == "" {
		return hits
	}
	for hits < len(keys) {
		k := keys[hits]
		if !lo.Present(d, k) {
			if n, _, _ := c.s.store.Lookup(d, keys[hits:hits+1], 0, false); n != 1 {
				break
			}
		}
		hits++
	}
	return hits
}

// promoteLocal reads into DRAM the blocks of keys' leading run that DRAM
// misses and a local tier below it (flash: lower.Local) holds, through the
// same single-flight as a GET (refillMiss), so that the lease a LOOKUP
// asks for holds them too. It stops at the first block neither DRAM nor a
// local tier holds: a cold block is refilled by the GET, never by a
// LOOKUP. A block that cannot be read (or is evicted again at once) just
// ends the leased run early; coldRun still counts it as present.
func (c *conn) promoteLocal(d identity.NamespaceDigest, keys []identity.BlockKey) {
	lo := c.s.cfg.Lower
	if lo == nil || c.ns.Tenant == "" {
		return
	}
	for i := range keys {
		if n, _, _ := c.s.store.Lookup(d, keys[i:i+1], 0, false); n == 1 {
			continue
		}
		if !lower.PresentLocal(lo, d, keys[i]) {
			return
		}
		v, ok := c.refillMiss(d, keys[i])
		if !ok {
			return
		}
		c.s.store.Release(v)
		c.s.stats.promoted.Add(1)
	}
}

// coldDelete hides key below DRAM (flash and cold) once its DRAM copy is
// gone (or was never there) and returns the key's DELETE status: DELETED
// if DRAM or a tier below held it, MISS if none did, BUSY if a tier below
// could not confirm the delete (the DRAM copy is gone; a lower copy may
// remain, so the client should retry).
func (c *conn) coldDelete(ctx context.Context, d identity.NamespaceDigest, key identity.BlockKey, dramDeleted bool) wire.Status {
	st := wire.StatusMiss
	if dramDeleted {
		st = wire.StatusDeleted
	}
	lo := c.s.cfg.Lower
	if lo == nil || c.ns.Tenant == "" {
		return st
	}
	if lo.Present(d, key) {
		st = wire.StatusDeleted
	}
	known, err := lo.Delete(ctx, c.ns, d, key)
	if err != nil {
		c.s.log.Warn("DELETE: the copy below DRAM could not be hidden; answered BUSY (the DRAM copy is gone)",
			"tenant", c.tenant, "block", key.String(), "err", err)
		return wire.StatusBusy
	}
	if known {
		st = wire.StatusDeleted
	}
	return st
}
