package server

import (
	"github.com/gpucache/gpucache/api/identity"
	"github.com/gpucache/gpucache/api/wire"
	"github.com/gpucache/gpucache/internal/hot"
)

// handlePutOpaque serves PUT_OPAQUE (protocol version 3): opaque-key
// blocks, named by up to wire.MaxOpaqueName bytes (a RESP key) under the
// request's namespace, whose key the server verifies as
// identity.OpaqueKey(namespace digest, name). Everything else is PUT's:
// the table is read and bounded first, then each payload goes straight
// into a reserved slab slot; a block that cannot be stored has its bytes
// discarded, so the stream stays in sync. A cluster forwards RESP SETs to
// their owner with it (forward.go).
func (c *conn) handlePutOpaque(h wire.Header) error {
	table, rest, ok, err := c.readTable(h, c.putOpaqueTableMax())
	if !ok {
		return err
	}
	req := new(wire.PutOpaqueRequest)
	total, err := req.Decode(table, c.s.cfg.Limits.MaxBatch)
	if err == nil {
		err = wire.CheckPayload(total, h.BodyLen, uint32(len(table)))
	}
	var ns identity.NamespaceDigest
	var st *clusterState
	if err == nil {
		ns, st, err = c.resolve(h.Op, req.Namespace, len(req.Blocks), func(i int) wire.Key { return req.Blocks[i].Key })
	}
	if err == nil {
		err = c.allowBytes(total)
	}
	if err != nil {
		return c.skipThenError(h, rest, err)
	}
	if st.storesNothing() {
		return c.refusePut(h, rest, len(req.Blocks))
	}
	resp, err := c.putEach(len(req.Blocks), func(i int) (wire.Status, uint32, error) {
		st, err := c.putOpaqueOne(ns, &req.Blocks[i])
		return st, req.Blocks[i].Len, err
	})
	if err != nil {
		c.release()
		return err
	}
	c.reply(h, &resp)
	return nil
}

// putOpaqueOne stores one opaque-key block whose payload is next on the
// stream, once its key is verified against its name.
func (c *conn) putOpaqueOne(ns identity.NamespaceDigest, ob *wire.OpaqueBlock) (wire.Status, error) {
	key := ob.Key
	if identity.OpaqueKey(ns, ob.Name) != key {
		c.s.stats.keyMismatch.Add(1)
		return wire.StatusKeyMismatch, c.skip(int64(ob.Len))
	}
	if ob.Len > c.s.cfg.Limits.MaxPayload {
		return wire.StatusTooLarge, c.skip(int64(ob.Len))
	}
	// An opaque block has no chain: no parent, position 0, no tokens.
	res, st, err := c.reserveAndRead(ns, key, identity.BlockKey{}, hot.BlockMeta{Tenant: c.tenant}, ob.Len)
	if st != wire.StatusStored || err != nil {
		return st, err
	}
	c.s.store.Commit(res)
	c.s.stored(identity.CacheIdentity{Namespace: c.ns, Opaque: ob.Name}, ns, key)
	return wire.StatusStored, nil
}

// putOpaqueTableMax bounds a PUT_OPAQUE table: MaxBatch entries with the
// longest names.
func (c *conn) putOpaqueTableMax() uint32 {
	return 4 + wire.MaxNamespaceLen + 4 + c.s.cfg.Limits.MaxBatch*uint32(wire.OpaqueBlockSize(wire.MaxOpaqueName))
}
