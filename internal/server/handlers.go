package server

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"time"

	"github.com/gpucache/gpucache/api/identity"
	"github.com/gpucache/gpucache/api/wire"
	"github.com/gpucache/gpucache/internal/hot"
	"github.com/gpucache/gpucache/internal/reqbuf"
	"github.com/gpucache/gpucache/internal/security/antireplay"
)

// controlBodyMax bounds the body of every request but PUT
// (reqbuf.ControlBodyMax).
func (c *conn) controlBodyMax() uint32 { return reqbuf.ControlBodyMax(c.s.cfg.Limits) }

// bodyMax bounds the body of op, one of the requests read whole.
func (c *conn) bodyMax(op wire.Opcode) uint32 {
	if op == wire.OpGetInto {
		return c.getIntoBodyMax()
	}
	return c.controlBodyMax()
}

// handle executes one request whose header passed CheckRequest and whose
// in-flight slot is taken. It returns an error only when the stream broke.
func (c *conn) handle(h wire.Header) error {
	c.s.stats.requests[h.Op].Add(1)
	c.startTiming(opLat[h.Op]) // ended when the response is handed to the writer (send)
	if hk := c.s.cfg.Hooks.Handling; hk != nil {
		hk(h.Op.String())
	}
	var stamp *antireplay.Stamp
	if h.Flags&wire.FlagStamped != 0 {
		// CheckRequest made sure the body holds the stamp.
		var sb [wire.StampSize]byte
		if _, err := io.ReadFull(c.br, sb[:]); err != nil {
			c.release()
			return err
		}
		h.BodyLen -= wire.StampSize
		st, err := antireplay.ParseStamp(sb[:])
		if err != nil {
			return c.skipThenError(h, int64(h.BodyLen), wire.Errorf(wire.CodeMalformed, "%v", err))
		}
		stamp = &st
	}
	if h.Op != wire.OpHello && h.Op != wire.OpPing {
		if !c.hello {
			return c.skipThenError(h, int64(h.BodyLen), wire.Errorf(wire.CodeHelloRequired, "%s before HELLO", h.Op))
		}
		if v := h.Op.Since(); v > c.version {
			// An operation of a later version than the session negotiated is
			// unknown to this session: the client could not have meant it.
			return c.skipThenError(h, int64(h.BodyLen), wire.Errorf(wire.CodeUnknownOpcode,
				"%s needs protocol version %d; this session speaks version %d", h.Op, v, c.version))
		}
		if err := c.admit(h.Op, stamp); err != nil {
			return c.skipThenError(h, int64(h.BodyLen), err)
		}
	}
	c.ownBuffers()
	switch h.Op {
	case wire.OpPut:
		return c.handlePut(h)
	case wire.OpFillCommit:
		return c.handleFillCommit(h)
	case wire.OpPutOpaque:
		return c.handlePutOpaque(h)
	case wire.OpPutFrom, wire.OpPutOpaqueFrom:
		return c.handlePutFrom(h)
	}
	if bodyMax := c.bodyMax(h.Op); h.BodyLen > bodyMax {
		c.dropRegisterFD(h)
		if err := c.skip(int64(h.BodyLen)); err != nil {
			c.release()
			return err
		}
		c.sendError(h, wire.Errorf(wire.CodeMalformed, "%s body of %d bytes exceeds %d", h.Op, h.BodyLen, bodyMax))
		return nil
	}
	body, err := c.readBody(h.BodyLen)
	if err != nil {
		if errors.As(err, new(*wire.Error)) {
			// No request-buffer budget: skip the rest, answer the error.
			return c.skipThenError(h, int64(h.BodyLen)-int64(len(body)), err)
		}
		c.release()
		return err
	}
	switch h.Op {
	case wire.OpHello:
		var closeConn bool
		if closeConn, err = c.handleHello(h, body); closeConn {
			c.sendError(h, err)
			return errTooManyAuthFailures
		}
	case wire.OpLookup:
		err = c.handleLookup(h, body)
	case wire.OpGet:
		err = c.handleGet(h, body)
	case wire.OpDelete:
		err = c.handleDelete(h, body)
	case wire.OpStat:
		err = c.handleStat(h, body)
	case wire.OpPing:
		err = c.handlePing(h, body)
	case wire.OpAcquire:
		err = c.handleAcquire(h, body)
	case wire.OpFillAbort:
		err = c.handleFillAbort(h, body)
	case wire.OpWait:
		err = c.handleWait(h, body)
	case wire.OpMembers:
		err = c.handleMembers(h, body)
	case wire.OpRegister:
		err = c.handleRegister(h, body)
	case wire.OpUnregister:
		err = c.handleUnregister(h, body)
	case wire.OpGetInto:
		err = c.handleGetInto(h, body)
	}
	if err != nil {
		c.sendError(h, err)
	}
	return nil
}

// errTooManyAuthFailures closes a connection after maxAuthFailures failed
// HELLOs.
var errTooManyAuthFailures = errors.New("gpucache/server: too many failed HELLOs; connection closed")

// handleHello authenticates the session. The tenant comes from the
// credential (or, in open mode, from HELLO); a connection cannot change
// tenant. It reports whether the connection must close.
func (c *conn) handleHello(h wire.Header, body []byte) (closeConn bool, err error) {
	var req wire.HelloRequest
	if err := req.Decode(body); err != nil {
		return false, err
	}
	// The session speaks the highest version both sides speak; the server
	// speaks every version from 1 to its MaxVersion.
	v := min(req.MaxVersion, c.s.cfg.MaxVersion)
	if v < wire.Version1 || v < req.MinVersion {
		return false, wire.Errorf(wire.CodeUnsupportedVersion, "client speaks versions %d..%d, server speaks %d..%d",
			req.MinVersion, req.MaxVersion, wire.Version1, c.s.cfg.MaxVersion)
	}
	if !req.HasAuth && req.Tenant == "" {
		return false, wire.Errorf(wire.CodeMalformed, "HELLO without a tenant")
	}
	s, err := c.helloSession(&req)
	if err != nil {
		we, closeConn := c.authFailed(&req, err)
		return closeConn, we
	}
	if c.hello && s.Tenant != c.tenant {
		return false, wire.Errorf(wire.CodeTenantMismatch, "session tenant is %q; a connection cannot change tenant", c.tenant)
	}
	c.hello, c.tenant, c.version = true, s.Tenant, v
	c.s.authenticated(c)
	c.sess.Session, c.sess.epoch, c.sess.authFails = s, c.s.guard.Epoch(), 0
	c.sess.counters = c.s.tenants.get(s.Tenant)
	c.nsBlob = nil
	resp := wire.HelloResponse{Version: v, Server: c.s.cfg.Name, Limits: c.s.cfg.Limits}
	if req.HasAuth {
		resp.HasSession, resp.Tenant = true, s.Tenant
		if !c.s.guard.Policy().Open() {
			resp.Session |= wire.SessionStampRequired
		}
	}
	c.reply(h, &resp)
	return false, nil
}

func (c *conn) handleLookup(h wire.Header, body []byte) error {
	req := &c.lookupReq
	if err := req.Decode(body, c.s.cfg.Limits.MaxBatch); err != nil {
		return err
	}
	ns, st, err := c.resolveKeys(h.Op, req.Namespace, req.Keys)
	if err != nil {
		return err
	}
	if st.unknown() {
		// No owner is known: nothing is a hit, so nothing is leased.
		c.s.stats.modeRefused.Add(uint64(len(req.Keys)))
		c.reply(h, &wire.LookupResponse{})
		return nil
	}
	keys := req.Keys
	ttl := time.Duration(req.LeaseTTLMillis) * time.Millisecond
	// The lease is charged to the session's tenant: past its share of the
	// hot tier (hot.Config.TenantHoldBytes, TenantLeases) the hits are
	// answered without a lease (LeaseID 0), as when MaxLeases are live.
	if req.LeaseTTLMillis > 0 {
		c.promoteLocal(ns, keys) // below.go: flash blocks of the run into DRAM, so the lease holds them
	}
	hits, id, granted := c.s.store.LookupFor(c.tenant, ns, keys, ttl, req.LeaseTTLMillis > 0)
	if id != 0 {
		c.s.addLease(id, c.tenant, granted)
	}
	// Blocks after the DRAM run that a tier below holds count as hits
	// too (the lease covers the DRAM run only): below.go.
	hits = c.coldRun(ns, keys, hits)
	resp := wire.LookupResponse{Hits: uint32(hits), LeaseID: uint64(id), LeaseTTLMillis: uint32(granted / time.Millisecond)}
	c.reply(h, &resp)
	return nil
}

func (c *conn) handleGet(h wire.Header, body []byte) error {
	req := &c.getReq // reused: decoding allocates nothing in steady state
	if err := req.Decode(body, c.s.cfg.Limits.MaxBatch); err != nil {
		return err
	}
	ns, st, err := c.resolveKeys(h.Op, req.Namespace, req.Keys)
	if err != nil {
		return err
	}
	// The response's table and vectors grow with the key count and wait
	// for the writer: a large one is paid from the request-buffer budget.
	charged, err := c.chargeResponse(len(req.Keys))
	if err != nil {
		return err
	}
	unknown := st.unknown()
	if unknown {
		c.s.stats.modeRefused.Add(uint64(len(req.Keys)))
	}
	r := newResponse(h.Op)
	r.charged = charged
	// The lease is released even when the mode makes every key a miss.
	if req.LeaseID != 0 && c.s.takeLease(hot.LeaseID(req.LeaseID), c.tenant) {
		r.lease = hot.LeaseID(req.LeaseID)
	}
	// Table: u32 table length | u32 n | n × (u8 status, u32 len).
	tableLen := 4 + 5*len(req.Keys)
	r.meta = binary.LittleEndian.AppendUint32(r.meta, uint32(tableLen))
	r.meta = binary.LittleEndian.AppendUint32(r.meta, uint32(len(req.Keys)))
	// Hits that would push the frame past MaxFrame are answered MISS, so a
	// response always fits the limit the client was promised.
	budget := uint64(c.s.cfg.Limits.MaxFrame) - uint64(len(r.meta)) - 5*uint64(len(req.Keys))
	var payload, hits uint64
	for i := range req.Keys {
		if unknown {
			r.meta = append(r.meta, byte(wire.StatusMiss), 0, 0, 0, 0)
			continue
		}
		v, ok := c.acquireVerified(ns, req.Keys[i])
		if ok && payload+uint64(len(v.Bytes)) > budget {
			c.s.store.Release(v)
			ok = false
		}
		if !ok {
			r.meta = append(r.meta, byte(wire.StatusMiss), 0, 0, 0, 0)
			continue
		}
		n := len(v.Bytes)
		r.meta = binary.LittleEndian.AppendUint32(append(r.meta, byte(wire.StatusHit)), uint32(n))
		r.views = append(r.views, v)
		payload += uint64(n)
		hits++
	}
	c.s.stats.blocksHit.Add(hits)
	c.s.stats.blocksMiss.Add(uint64(len(req.Keys)) - hits)
	c.sess.counters.blocksHit.Add(hits)
	c.sess.counters.blocksMiss.Add(uint64(len(req.Keys)) - hits)
	c.sess.counters.bytesOut.Add(payload)
	c.chargeBytes(payload)
	r.finish(h, 0, payload)
	for _, v := range r.views {
		r.bufs = append(r.bufs, v.Bytes)
	}
	c.send(r)
	return nil
}

// handlePut reads the PUT table, then each payload straight into a reserved
// slab slot. A block that cannot be stored has its bytes discarded, so the
// stream stays in sync.
func (c *conn) handlePut(h wire.Header) error {
	table, rest, ok, err := c.readTable(h, c.putTableMax())
	if !ok {
		return err
	}
	req := &c.putReq
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
		st, err := c.putOne(ns, &req.Blocks[i])
		if err == nil && (st == wire.StatusStored || st == wire.StatusExists) {
			// The block is in the hot tier: a fill of it (led by another
			// session of the tenant, say an engine's scheduler while its
			// worker writes the bytes) is done, and its waiters read it.
			c.s.dir.Publish(c.tenant, ns, req.Blocks[i].Key)
		}
		return st, req.Blocks[i].Len, err
	})
	if err != nil {
		c.release()
		return err
	}
	r := newResponse(h.Op)
	r.meta = resp.AppendTo(r.meta)
	r.finish(h, 0, 0)
	c.send(r)
	return nil
}

// putEach stores a request's n blocks in order, one(i) storing block i
// (its payload next on the stream) and reporting its status and payload
// length; it counts the bytes stored. An error means the stream broke.
func (c *conn) putEach(n int, one func(i int) (wire.Status, uint32, error)) (wire.StatusResponse, error) {
	resp := wire.StatusResponse{Statuses: c.statuses[:0]}
	resp.Statuses = append(resp.Statuses, make([]wire.Status, n)...)
	c.statuses = resp.Statuses
	var stored uint64
	for i := range n {
		st, l, err := one(i)
		if err != nil {
			return resp, err
		}
		resp.Statuses[i] = st
		if st == wire.StatusStored {
			stored += uint64(l)
		}
	}
	c.s.stats.bytesIn.Add(stored)
	c.sess.counters.bytesIn.Add(stored)
	return resp, nil
}

// identityOf returns the full identity a PUT or FILL_COMMIT block claims,
// and whether its key derives from it: the identity must be valid (token
// count within block_tokens, valid length in 1..len(tokens), position a
// multiple of block_tokens, parent zero exactly at position 0) and
// KeyFor(namespace digest, parent, tokens, valid length) must equal the key.
// id.Tokens aliases pb.TokenIDs.
func (c *conn) identityOf(ns identity.NamespaceDigest, pb *wire.PutBlock) (id identity.CacheIdentity, ok bool) {
	id = identity.CacheIdentity{Namespace: c.ns, Parent: pb.Parent, Position: pb.Position,
		Tokens: pb.TokenIDs, ValidLength: pb.ValidLength}
	if id.Validate() != nil {
		return id, false
	}
	return id, identity.KeyFor(ns, id.Parent, id.Tokens, id.ValidLength) == pb.Key
}

// putOne stores one block whose payload is next on the stream, once its key
// is verified against its identity.
func (c *conn) putOne(ns identity.NamespaceDigest, pb *wire.PutBlock) (wire.Status, error) {
	id, ok := c.identityOf(ns, pb)
	if !ok {
		c.s.stats.keyMismatch.Add(1)
		return wire.StatusKeyMismatch, c.skip(int64(pb.Len))
	}
	if pb.Len > c.s.cfg.Limits.MaxPayload {
		return wire.StatusTooLarge, c.skip(int64(pb.Len))
	}
	res, st, err := c.reserveAndRead(ns, pb.Key, pb.Parent, c.blockMeta(pb), pb.Len)
	if st != wire.StatusStored || err != nil {
		return st, err
	}
	c.s.store.Commit(res)
	c.s.stored(id, ns, pb.Key)
	return wire.StatusStored, nil
}

// reserveAndRead reserves a hot-tier slot for a block whose n payload bytes
// are next on the stream, reads them straight into it (one host copy: the
// kernel writes into the slot; only what the read buffer already holds is
// copied from it) and seals it. StatusStored means res is ready to Commit;
// any other status means the block is not stored and its bytes were
// skipped, so the stream stays in sync. An error means the stream broke.
func (c *conn) reserveAndRead(ns identity.NamespaceDigest, key, parent identity.BlockKey, meta hot.BlockMeta, n uint32) (hot.Reservation, wire.Status, error) {
	res, err := c.s.store.ReserveBlock(ns, key, parent, meta, int(n))
	if h := c.s.cfg.Hooks.Reserved; h != nil {
		h(c.tenant, err)
	}
	if err != nil {
		return hot.Reservation{}, reserveStatus(err), c.skip(int64(n))
	}
	if err := c.readInto(res.Buf); err != nil {
		c.s.store.Abort(res)
		return hot.Reservation{}, 0, err
	}
	if st := c.sealReserved(res, ns, key); st != wire.StatusStored {
		return hot.Reservation{}, st, nil
	}
	return res, wire.StatusStored, nil
}

// reserveStatus is the answer for a block whose reservation failed with
// err: EXISTS, TOO_LARGE, or NO_SPACE. NO_SPACE covers hot.ErrNotAdmitted
// (the policy refused it) and hot.ErrTenantQuota (the tenant holds its
// share of the tier in leases and PUTs in flight) too: the block is not
// stored, nothing else changes, and the client recomputes or retries
// later. Chunks are immutable: on EXISTS the stored bytes stay.
func reserveStatus(err error) wire.Status {
	switch {
	case errors.Is(err, hot.ErrExists):
		return wire.StatusExists
	case errors.Is(err, hot.ErrTooLarge):
		return wire.StatusTooLarge
	}
	return wire.StatusNoSpace
}

// sealReserved seals a filled reservation from its own slab bytes when the
// hot tier is sealed. Anything but StatusStored means it was aborted.
func (c *conn) sealReserved(res hot.Reservation, ns identity.NamespaceDigest, key identity.BlockKey) wire.Status {
	if c.s.sealer != nil {
		if err := c.s.sealer.tag(c.s.store, res, ns, key); err != nil {
			c.s.store.Abort(res)
			c.s.log.Error("cannot seal a block; not stored", "err", err)
			return wire.StatusNoSpace
		}
	}
	return wire.StatusStored
}

// blockMeta is what the hot tier's policy learns about a verified block of
// the session namespace c.ns: its index in the chain (token position over
// block_tokens) and whether it is partial (fewer valid tokens than
// block_tokens); and the tenant its reservation is charged to.
func (c *conn) blockMeta(pb *wire.PutBlock) hot.BlockMeta {
	bt := uint64(max(c.ns.Layout.BlockTokens, 1)) // >= 1 once identityOf validated it
	return hot.BlockMeta{
		Tokens:   pb.ValidLength,
		Position: uint32(min(pb.Position/bt, math.MaxUint32)),
		Partial:  pb.ValidLength < c.ns.Layout.BlockTokens,
		Tenant:   c.tenant, // the reservation counts against the tenant's share
	}
}

// putTableMax bounds a PUT table: MaxBatch entries of one token id each,
// plus the request's token ids (at most wire.MaxRequestTokens).
func (c *conn) putTableMax() uint32 {
	return 4 + wire.MaxNamespaceLen + 4 + c.s.cfg.Limits.MaxBatch*uint32(wire.PutBlockSize(0)) + 4*wire.MaxRequestTokens
}

// skipThenError drops a request: it skips the n bytes left of its body and
// answers err. What the request's buffers hold is not needed any more, so
// their budget is given back first: skipping lasts as long as the client
// takes to send the rest (a slow one, up to the read timeout).
func (c *conn) skipThenError(h wire.Header, n int64, err error) error {
	c.dropRegisterFD(h)
	c.shrink()
	if serr := c.skip(n); serr != nil {
		c.release()
		return serr
	}
	c.sendError(h, err)
	return nil
}

func (c *conn) handleDelete(h wire.Header, body []byte) error {
	var req wire.DeleteRequest
	if err := req.Decode(body, c.s.cfg.Limits.MaxBatch); err != nil {
		return err
	}
	// DELETE is served in every control mode (the state's mode is not
	// consulted): removing a block can never make a stale node serve it.
	ns, _, err := c.resolveKeys(h.Op, req.Namespace, req.Keys)
	if err != nil {
		return err
	}
	resp := wire.StatusResponse{Statuses: make([]wire.Status, len(req.Keys))}
	// The cold copy is hidden too (coldpresence.go), within one deadline
	// for the whole request.
	ctx, cancel := context.WithTimeout(context.Background(), coldDeleteTimeout)
	defer cancel()
	for i, k := range req.Keys {
		// A block still being written to a reader (its View not yet
		// released: a client's DELETE right after its own GET) is waited
		// for within the request's deadline; a leased one is BUSY at once.
		deleted, busy := c.s.store.DeleteWait(ctx, ns, k)
		if busy {
			resp.Statuses[i] = wire.StatusBusy // not deleted anywhere: retry
			continue
		}
		resp.Statuses[i] = c.coldDelete(ctx, ns, k, deleted)
	}
	c.reply(h, &resp)
	return nil
}

func (c *conn) handleStat(h wire.Header, body []byte) error {
	if len(body) != 0 {
		return wire.Errorf(wire.CodeMalformed, "STAT takes no body")
	}
	// Server-wide counters reveal other tenants' traffic: only an admin
	// (or open mode) sees them; anyone else sees their own tenant's.
	resp := wire.StatResponse{Entries: c.sess.counters.entries()}
	if c.s.guard.Policy().IsAdmin(c.tenant) {
		resp.Entries = c.s.Stats()
	}
	// The session's own tenant's DRAM usage and quota, never another's.
	if c.tenant != "" {
		u := c.s.cfg.Store.TenantDRAMUsage(c.tenant)
		resp.Entries = append(resp.Entries,
			wire.StatEntry{Name: "tenant_dram_bytes", Value: uint64(u.Bytes)},
			wire.StatEntry{Name: "tenant_dram_quota_bytes", Value: uint64(u.Quota)})
		_, _, regionBytes := c.s.RegionUsage(c.tenant)
		resp.Entries = append(resp.Entries,
			wire.StatEntry{Name: "tenant_region_bytes", Value: uint64(max(regionBytes, 0))},
			wire.StatEntry{Name: "tenant_region_quota_bytes", Value: uint64(c.s.cfg.TenantRegionBytes)})
		if lo := c.s.cfg.Lower; lo != nil {
			resp.Entries = append(resp.Entries, lo.TenantStats(c.tenant)...)
		}
	}
	c.reply(h, &resp)
	return nil
}

func (c *conn) handlePing(h wire.Header, body []byte) error {
	if len(body) > wire.MaxPingLen {
		return wire.Errorf(wire.CodeMalformed, "PING body of %d bytes exceeds %d", len(body), wire.MaxPingLen)
	}
	r := newResponse(h.Op)
	r.meta = append(r.meta, body...)
	r.finish(h, 0, 0)
	c.send(r)
	return nil
}
