package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/gpucache/gpucache/api/identity"
	"github.com/gpucache/gpucache/internal/hot"
	"github.com/gpucache/gpucache/internal/resp"
	"github.com/gpucache/gpucache/internal/security/acl"
)

// respForwardTimeout bounds one forwarded RESP operation (and so the time
// a dead owner can hold a command before it becomes a miss).
const respForwardTimeout = coldTimeout

// checkKey validates a key against the profile: 1..MaxOpaqueLen bytes,
// and with key_format lmcache an LMCache key whose model is the
// profile's. It returns the parsed key (Kind 0 for an opaque key) or a
// reply-ready error message.
func (rc *respConn) checkKey(k []byte) (resp.Key, string) {
	if len(k) == 0 || len(k) > identity.MaxOpaqueLen {
		return resp.Key{}, fmt.Sprintf("ERR key of %d bytes: keys are 1..%d bytes", len(k), identity.MaxOpaqueLen)
	}
	if rc.prof.AnyKey && bytes.IndexByte(k, '@') < 0 {
		return resp.Key{}, "" // cannot be an LMCache key: nothing to check
	}
	pk, err := resp.ParseKey(k)
	if err != nil {
		if rc.prof.AnyKey {
			return resp.Key{}, ""
		}
		return resp.Key{}, fmt.Sprintf("ERR key %q is not an LMCache key (this tenant's profile has key_format lmcache): %s",
			printable(k), trimKeyErr(err))
	}
	if string(pk.Model) != rc.ns.ModelID {
		return resp.Key{}, fmt.Sprintf("ERR key model %q contradicts the profile's model %q", printable(pk.Model), rc.ns.ModelID)
	}
	return pk, ""
}

func trimKeyErr(err error) string {
	m := err.Error()
	const p = "gpucache/resp: not an LMCache key: "
	if len(m) > len(p) && m[:len(p)] == p {
		return m[len(p):]
	}
	return m
}

// request builds the forward request of key k.
func (rc *respConn) request(k []byte, key identity.BlockKey) *ForwardRequest {
	return &ForwardRequest{Tenant: rc.c.tenant, Secret: rc.secret, Namespace: rc.ns, Name: k, Key: key}
}

// remote reports whether the key is another member's (and there is a
// forwarder to reach it).
func (rc *respConn) remote(key identity.BlockKey) bool {
	f := rc.c.s.cfg.Forwarder
	return f != nil && f.Remote(key)
}

func forwardCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), respForwardTimeout)
}

// set stores a value. The value is the pending last argument (read
// straight into the reserved slot) or, when short, args[1]. Every refusal
// leaves the value unread; the loop skips it.
func (rc *respConn) set(args [][]byte, pending int64) error {
	c := rc.c
	nargs := len(args)
	if pending >= 0 {
		nargs++ // the value, or an option after it, still on the stream
	}
	if nargs != 2 {
		if nargs > 2 {
			rc.errorf("ERR SET options are not supported")
		} else {
			rc.errorf("ERR wrong number of arguments for 'set' command")
		}
		return nil
	}
	k := args[0]
	var inline []byte
	n := pending
	if pending < 0 {
		inline = args[1]
		n = int64(len(inline))
	}
	if msg, limited := rc.admit(); limited {
		rc.dropped("rate limited")
		return nil
	} else if msg != "" {
		rc.errorf("%s", msg)
		return nil
	}
	pk, msg := rc.checkKey(k)
	if msg != "" {
		rc.errorf("%s", msg)
		return nil
	}
	if !rc.allowed("SET", acl.Write) {
		rc.errorf("ERR tenant %q lacks write on model %q", c.tenant, rc.ns.ModelID)
		return nil
	}
	if msg := rc.checkLength(pk, n); msg != "" {
		rc.errorf("%s", msg)
		return nil
	}
	if p := c.s.guard.Policy(); p.Limiter != nil && n > 1 {
		if ok, wait := p.Limiter.Allow(c.tenant, 0, n-1); !ok {
			c.limited(wait)
			rc.dropped("rate limited")
			return nil
		}
	}
	key := identity.OpaqueKey(rc.nsDig, k)
	if rc.remote(key) {
		return rc.forwardSet(k, key, inline, n)
	}
	if st := c.clusterState(); st.storesNothing() {
		c.s.stats.modeRefused.Add(1)
		rc.dropped("control mode " + st.mode.String())
		return nil
	}
	res, err := c.s.store.ReserveBlock(rc.nsDig, key, identity.BlockKey{}, hot.BlockMeta{Tenant: c.tenant}, int(n))
	if h := c.s.cfg.Hooks.Reserved; h != nil {
		h(c.tenant, err)
	}
	if err != nil {
		switch {
		case errors.Is(err, hot.ErrExists):
			// Chunks are immutable: the stored bytes stay.
			c.s.stats.resp.setExists.Add(1)
			rc.reply(okReply)
		case errors.Is(err, hot.ErrTooLarge):
			rc.errorf("ERR value of %d bytes is larger than the largest block (%d)", n, c.s.cfg.Limits.MaxPayload)
		case errors.Is(err, hot.ErrTenantQuota):
			rc.dropped("tenant share of the hot tier")
		default:
			rc.dropped("no space in the hot tier")
		}
		return nil
	}
	if inline != nil {
		copy(res.Buf, inline)
	} else if err := rc.r.ReadPending(res.Buf); err != nil {
		c.s.store.Abort(res)
		return err
	}
	if c.s.sealer != nil {
		if err := c.s.sealer.tag(c.s.store, res, rc.nsDig, key); err != nil {
			c.s.store.Abort(res)
			c.s.log.Error("cannot seal a block; not stored", "err", err)
			rc.dropped("sealing failed")
			return nil
		}
	}
	c.s.store.Commit(res)
	c.s.stored(identity.CacheIdentity{Namespace: rc.ns, Opaque: k}, rc.nsDig, key)
	c.s.stats.bytesIn.Add(uint64(n))
	c.sess.counters.bytesIn.Add(uint64(n))
	rc.reply(okReply)
	return nil
}

// checkLength applies the profile's value rule: n bytes, 1..MaxPayload;
// chunk_bytes exactly unless variable_length; an in-process metadata
// value at most MaxRESPMetadata.
func (rc *respConn) checkLength(pk resp.Key, n int64) string {
	p := rc.prof
	switch {
	case n == 0:
		return "ERR empty values are not stored"
	case pk.Suffix == resp.SuffixMetadata:
		if n > MaxRESPMetadata {
			return fmt.Sprintf("ERR metadata value of %d bytes (at most %d)", n, MaxRESPMetadata)
		}
	case !p.VariableLength && n != int64(p.ChunkBytes):
		return fmt.Sprintf("ERR value of %d bytes: this tenant's profile stores chunks of exactly %d bytes (chunk_bytes; variable_length is off)", n, p.ChunkBytes)
	}
	return ""
}

// forwardSet reads the value into a heap buffer charged to the
// request-buffer budget and stores it at the key's owner.
func (rc *respConn) forwardSet(k []byte, key identity.BlockKey, inline []byte, n int64) error {
	c := rc.c
	buf := inline
	if buf == nil {
		if ok, _ := c.s.bufs.Acquire(c.tenant, n, c.s.cfg.BufferWait, c.s.done); !ok {
			c.s.bufs.Refused(false)
			// The value is skipped by the caller (SkipPending).
			rc.dropped("request buffers exhausted")
			return nil
		}
		defer c.s.bufs.Release(c.tenant, n)
		buf = make([]byte, n)
		if err := rc.r.ReadPending(buf); err != nil {
			return err
		}
	}
	c.s.stats.resp.forwarded.Add(1)
	ctx, cancel := forwardCtx()
	stored, existed, err := c.s.cfg.Forwarder.Set(ctx, rc.request(k, key), buf)
	cancel()
	switch {
	case err != nil:
		rc.dropped("refused by the key's owner: " + err.Error())
	case existed:
		c.s.stats.resp.setExists.Add(1)
		rc.reply(okReply)
	case stored:
		c.sess.counters.bytesIn.Add(uint64(n))
		rc.reply(okReply)
	default:
		rc.dropped("the key's owner did not answer")
	}
	return nil
}

// dropped answers a SET that a transient fault kept from being stored
// (no space, the tenant's share or rate, request buffers, the control
// mode, the owner unreachable): +OK, as for a chunk evicted at once, so a
// later GET misses and the engine recomputes. LMCache's MP-mode C++ client
// reads exactly the five bytes of +OK and never resynchronises after any
// other reply, so an error here would break its connection for good;
// refusals a client must fix (a wrong length, a key of another model,
// no write right) stay -ERR. Counted in resp_set_dropped, logged at debug.
func (rc *respConn) dropped(why string) {
	rc.c.s.stats.resp.setDropped.Add(1)
	rc.c.s.log.Debug("RESP SET not stored", "tenant", rc.c.tenant, "reason", why)
	rc.reply(okReply)
}

// get answers a hit straight from the slab, or $-1 for a miss or any
// fault.
func (rc *respConn) get(k []byte) error {
	c := rc.c
	msg, limited := rc.admit()
	if limited {
		rc.miss()
		return nil
	}
	if msg != "" {
		rc.errorf("%s", msg)
		return nil
	}
	if _, msg := rc.checkKey(k); msg != "" {
		rc.errorf("%s", msg)
		return nil
	}
	if !rc.allowed("GET", acl.Read) {
		rc.errorf("ERR tenant %q lacks read on model %q", c.tenant, rc.ns.ModelID)
		return nil
	}
	key := identity.OpaqueKey(rc.nsDig, k)
	if rc.remote(key) {
		c.s.stats.resp.forwarded.Add(1)
		ctx, cancel := forwardCtx()
		defer cancel()
		var werr error
		hit, _ := c.s.cfg.Forwarder.Get(ctx, rc.request(k, key), func(p []byte) error {
			werr = rc.writeBulk(p)
			rc.hit(len(p))
			return werr
		})
		if werr != nil {
			return werr
		}
		if !hit {
			rc.miss()
		}
		return nil
	}
	if st := c.clusterState(); st.unknown() {
		c.s.stats.modeRefused.Add(1)
		rc.miss()
		return nil
	}
	v, ok := c.acquireOrRefill(rc.nsDig, key)
	if ok && c.s.sealer != nil {
		if id, err := c.s.sealer.verify(c.s.store, v, rc.nsDig, key); err != nil {
			c.sealFailed(v, rc.nsDig, key, id, err)
			ok = false
		}
	}
	if !ok {
		rc.miss()
		return nil
	}
	err := rc.writeBulk(v.Bytes)
	c.s.store.Release(v)
	rc.hit(len(v.Bytes))
	return err
}

func (rc *respConn) miss() {
	rc.c.s.stats.blocksMiss.Add(1)
	rc.c.sess.counters.blocksMiss.Add(1)
	rc.reply(resp.Nil)
}

func (rc *respConn) hit(n int) {
	c := rc.c
	c.s.stats.blocksHit.Add(1)
	c.sess.counters.blocksHit.Add(1)
	c.sess.counters.bytesOut.Add(uint64(n))
	c.chargeBytes(uint64(n))
}

// present reports whether the block of key k is stored: in DRAM, in the
// tiers below it (Config.Lower), or at its owner.
func (rc *respConn) present(k []byte, key identity.BlockKey) bool {
	c := rc.c
	if rc.remote(key) {
		c.s.stats.resp.forwarded.Add(1)
		ctx, cancel := forwardCtx()
		defer cancel()
		return c.s.cfg.Forwarder.Exists(ctx, rc.request(k, key))
	}
	if c.clusterState().unknown() {
		return false
	}
	one := [1]identity.BlockKey{key}
	if hits, _, _ := c.s.store.Lookup(rc.nsDig, one[:], 0, false); hits == 1 {
		return true
	}
	return c.s.cfg.Lower != nil && c.s.cfg.Lower.Present(rc.nsDig, key)
}

// exists counts the keys present; any fault counts as absent.
func (rc *respConn) exists(keys [][]byte) {
	c := rc.c
	msg, limited := rc.admit()
	if limited {
		rc.reply(resp.Zero)
		return
	}
	if msg != "" {
		rc.errorf("%s", msg)
		return
	}
	for _, k := range keys {
		if _, msg := rc.checkKey(k); msg != "" {
			rc.errorf("%s", msg)
			return
		}
	}
	if !rc.allowed("EXISTS", acl.Read) {
		rc.errorf("ERR tenant %q lacks read on model %q", c.tenant, rc.ns.ModelID)
		return
	}
	var n int64
	for _, k := range keys {
		if rc.present(k, identity.OpaqueKey(rc.nsDig, k)) {
			n++
		}
	}
	rc.int(n)
}

// del removes the keys from DRAM and hides them in the cold tier; it
// counts the keys that were present.
func (rc *respConn) del(keys [][]byte) {
	c := rc.c
	if msg, _ := rc.admit(); msg != "" {
		rc.errorf("%s", msg)
		return
	}
	for _, k := range keys {
		if _, msg := rc.checkKey(k); msg != "" {
			rc.errorf("%s", msg)
			return
		}
	}
	if !rc.allowed("DEL", acl.Read|acl.Write) {
		rc.errorf("ERR tenant %q lacks read and write on model %q", c.tenant, rc.ns.ModelID)
		return
	}
	var n int64
	for _, k := range keys {
		key := identity.OpaqueKey(rc.nsDig, k)
		if rc.remote(key) {
			c.s.stats.resp.forwarded.Add(1)
			ctx, cancel := forwardCtx()
			if c.s.cfg.Forwarder.Del(ctx, rc.request(k, key)) {
				n++
			}
			cancel()
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), coldTimeout)
		deleted, _ := c.s.store.DeleteWait(ctx, rc.nsDig, key) // a block being written to a reader
		cancel()
		if lo := c.s.cfg.Lower; lo != nil {
			ctx, cancel := context.WithTimeout(context.Background(), coldTimeout)
			known, err := lo.Delete(ctx, rc.ns, rc.nsDig, key)
			cancel()
			if err != nil {
				c.s.log.Warn("RESP DEL: cannot hide the block below DRAM", "err", err)
			}
			deleted = deleted || known
		}
		if deleted {
			n++
		}
	}
	rc.int(n)
}
