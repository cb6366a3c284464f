package respserve

import (
	"bytes"
	"context"
	"fmt"

	"github.com/gpucache/gpucache/api/identity"
	"github.com/gpucache/gpucache/internal/resp"
	"github.com/gpucache/gpucache/internal/security/acl"
)

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

// block is the block of key k in the profile's namespace.
func (rc *respConn) block(k []byte) Block {
	return Block{Namespace: rc.ns, Digest: rc.nsDig, Name: k, Key: identity.OpaqueKey(rc.nsDig, k)}
}

// request builds the forward request of b.
func (rc *respConn) request(b Block) *ForwardRequest {
	return &ForwardRequest{Tenant: rc.tenant(), Secret: rc.secret, Namespace: rc.ns, Name: b.Name, Key: b.Key}
}

// remote reports whether the key is another member's (and there is a
// forwarder to reach it).
func (rc *respConn) remote(key identity.BlockKey) bool {
	f := rc.e.cfg.Forwarder
	return f != nil && f.Remote(key)
}

func (rc *respConn) forwardCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), rc.e.cfg.ForwardTimeout)
}

// set stores a value. The value is the pending last argument (read
// straight into the reserved slot) or, when short, args[1]. Every refusal
// leaves the value unread; the loop skips it.
func (rc *respConn) set(args [][]byte, pending int64) error {
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
		rc.errorf("ERR tenant %q lacks write on model %q", rc.tenant(), rc.ns.ModelID)
		return nil
	}
	if msg := rc.checkLength(pk, n); msg != "" {
		rc.errorf("%s", msg)
		return nil
	}
	if !rc.c.AllowBytes(n) {
		rc.dropped("rate limited")
		return nil
	}
	b := rc.block(k)
	if rc.remote(b.Key) {
		return rc.forwardSet(b, inline, n)
	}
	res, why, err := rc.c.Store(b, int(n), func(slot []byte) error {
		if inline != nil {
			copy(slot, inline)
			return nil
		}
		return rc.r.ReadPending(slot)
	})
	if err != nil {
		return err
	}
	switch res {
	case Stored:
		rc.reply(okReply)
	case Exists:
		// Chunks are immutable: the stored bytes stay.
		rc.e.stats.setExists.Add(1)
		rc.reply(okReply)
	case TooLarge:
		rc.errorf("ERR value of %d bytes is larger than the largest block (%d)", n, rc.e.cfg.MaxValue)
	default:
		rc.dropped(why)
	}
	return nil
}

// checkLength applies the profile's value rule: n bytes, 1..MaxPayload;
// chunk_bytes exactly unless variable_length; an in-process metadata
// value at most MaxMetadata.
func (rc *respConn) checkLength(pk resp.Key, n int64) string {
	p := rc.prof
	switch {
	case n == 0:
		return "ERR empty values are not stored"
	case pk.Suffix == resp.SuffixMetadata:
		if n > MaxMetadata {
			return fmt.Sprintf("ERR metadata value of %d bytes (at most %d)", n, MaxMetadata)
		}
	case !p.VariableLength && n != int64(p.ChunkBytes):
		return fmt.Sprintf("ERR value of %d bytes: this tenant's profile stores chunks of exactly %d bytes (chunk_bytes; variable_length is off)", n, p.ChunkBytes)
	}
	return ""
}

// forwardSet reads the value into a heap buffer charged to the
// request-buffer budget and stores it at the key's owner.
func (rc *respConn) forwardSet(b Block, inline []byte, n int64) error {
	buf := inline
	if buf == nil {
		tenant, bufs := rc.tenant(), rc.e.cfg.Buffers
		if ok, _ := bufs.Acquire(tenant, n, rc.e.cfg.BufferWait, rc.e.cfg.Done); !ok {
			bufs.Refused(false)
			// The value is skipped by the caller (SkipPending).
			rc.dropped("request buffers exhausted")
			return nil
		}
		defer bufs.Release(tenant, n)
		buf = make([]byte, n)
		if err := rc.r.ReadPending(buf); err != nil {
			return err
		}
	}
	rc.e.stats.forwarded.Add(1)
	rc.forwarded = true
	ctx, cancel := rc.forwardCtx()
	stored, existed, err := rc.e.cfg.Forwarder.Set(ctx, rc.request(b), buf)
	cancel()
	switch {
	case err != nil:
		rc.dropped("refused by the key's owner: " + err.Error())
	case existed:
		rc.e.stats.setExists.Add(1)
		rc.reply(okReply)
	case stored:
		rc.c.StoredRemote(n)
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
	rc.e.stats.setDropped.Add(1)
	rc.e.cfg.Logger.Debug("RESP SET not stored", "tenant", rc.tenant(), "reason", why)
	rc.reply(okReply)
}

// get answers a hit straight from the slab, or $-1 for a miss or any
// fault.
func (rc *respConn) get(k []byte) error {
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
		rc.errorf("ERR tenant %q lacks read on model %q", rc.tenant(), rc.ns.ModelID)
		return nil
	}
	b := rc.block(k)
	var werr error
	write := func(p []byte) error {
		werr = rc.writeVec(p)
		rc.c.Hit(len(p), werr == nil)
		return werr
	}
	if rc.remote(b.Key) {
		rc.e.stats.forwarded.Add(1)
		rc.forwarded = true
		ctx, cancel := rc.forwardCtx()
		defer cancel()
		hit, _ := rc.e.cfg.Forwarder.Get(ctx, rc.request(b), write)
		if werr != nil {
			return werr
		}
		if !hit {
			rc.miss()
		}
		return nil
	}
	found, err := rc.c.Load(b, write)
	if !found {
		rc.miss()
	}
	return err
}

func (rc *respConn) miss() {
	rc.c.Miss()
	rc.reply(resp.Nil)
}

// present reports whether the block of key k is stored: in DRAM, in the
// tiers below it, or at its owner.
func (rc *respConn) present(k []byte) bool {
	b := rc.block(k)
	if rc.remote(b.Key) {
		rc.e.stats.forwarded.Add(1)
		ctx, cancel := rc.forwardCtx()
		defer cancel()
		return rc.e.cfg.Forwarder.Exists(ctx, rc.request(b))
	}
	return rc.c.Present(b)
}

// exists counts the keys present; any fault counts as absent.
func (rc *respConn) exists(keys [][]byte) {
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
		rc.errorf("ERR tenant %q lacks read on model %q", rc.tenant(), rc.ns.ModelID)
		return
	}
	var n int64
	for _, k := range keys {
		if rc.present(k) {
			n++
		}
	}
	rc.int(n)
}

// del removes the keys from DRAM and hides them below it; it counts the
// keys that were present.
func (rc *respConn) del(keys [][]byte) {
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
		rc.errorf("ERR tenant %q lacks read and write on model %q", rc.tenant(), rc.ns.ModelID)
		return
	}
	var n int64
	for _, k := range keys {
		b := rc.block(k)
		if rc.remote(b.Key) {
			rc.e.stats.forwarded.Add(1)
			ctx, cancel := rc.forwardCtx()
			if rc.e.cfg.Forwarder.Del(ctx, rc.request(b)) {
				n++
			}
			cancel()
			continue
		}
		if rc.c.Delete(b) {
			n++
		}
	}
	rc.int(n)
}
