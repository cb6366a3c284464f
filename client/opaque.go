package client

import (
	"context"
	"errors"
	"fmt"

	"github.com/gpucache/gpucache/api/identity"
	"github.com/gpucache/gpucache/api/wire"
)

// OpaqueKey is the key of the opaque-key block name under the namespace
// with digest ns (identity.OpaqueKey): a block named by the caller, such as
// a RESP key, rather than by a token chain. Get, Lookup and Delete take it
// like any other key.
func OpaqueKey(ns NamespaceDigest, name []byte) BlockKey { return identity.OpaqueKey(ns, name) }

// PutOpaque stores one opaque-key block: payload under name (1..1024
// bytes) in namespace ns, at key OpaqueKey(ns digest, name), which the
// server verifies. It returns StatusStored, StatusExists (the block is
// already stored; chunks are immutable, so its bytes stay), StatusTooLarge
// or StatusNoSpace. It needs protocol version 3 (PUT_OPAQUE): against an
// older server it fails with ErrUnsupported without sending anything.
// Errors are as for Put; on error the status is StatusMiss ("not known to
// be stored").
//
// Ownership: payload is written from the caller's slice without a copy;
// PutOpaque does not keep it after it returns.
func (c *Client) PutOpaque(ctx context.Context, ns Namespace, name, payload []byte) (Status, error) {
	key, err := opaqueKeyOf(ns, name)
	if err != nil {
		return StatusMiss, err
	}
	return c.putOpaque(ctx, ns, key, name, payload)
}

func opaqueKeyOf(ns Namespace, name []byte) (BlockKey, error) {
	if len(name) == 0 || len(name) > wire.MaxOpaqueName {
		return BlockKey{}, fmt.Errorf("%w: opaque name of %d bytes, want 1..%d", ErrInvalid, len(name), wire.MaxOpaqueName)
	}
	d, err := ns.Digest()
	if err != nil {
		return BlockKey{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return identity.OpaqueKey(d, name), nil
}

func (c *Client) putOpaque(ctx context.Context, ns Namespace, key BlockKey, name, payload []byte) (Status, error) {
	blob, err := c.nsBlob(ns)
	if err != nil {
		return StatusMiss, err
	}
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	lim := c.Limits()
	tableLen := 4 + len(blob) + 4 + wire.OpaqueBlockSize(len(name))
	if uint64(len(payload)) > uint64(lim.MaxPayload) || uint64(4+tableLen+len(payload)) > uint64(lim.MaxFrame) {
		return StatusTooLarge, nil
	}
	cn, err := c.pick(ctx)
	if err != nil {
		return StatusMiss, err
	}
	if cn.version < wire.Version3 {
		return StatusMiss, fmt.Errorf("%w: PUT_OPAQUE needs protocol version 3; %s speaks %d", ErrUnsupported, c.cfg.Addr, cn.version)
	}
	r := &request{}
	r.op = wire.OpPutOpaque
	r.payload, r.payloadLen = [][]byte{payload}, len(payload)
	table := &wire.PutOpaqueRequest{Namespace: blob,
		Blocks: []wire.OpaqueBlock{{Key: key, Name: name, Len: uint32(len(payload))}}}
	r.enc = func(b []byte) []byte { return wire.AppendTable(b, table) }
	c.exec(ctx, []*request{r}, cn)
	if errors.Is(r.err, &wire.Error{Code: wire.CodeUnknownOpcode}) {
		// The connection was redialed to a server of an older version.
		return StatusMiss, fmt.Errorf("%w: %w", ErrUnsupported, r.err)
	}
	st := make([]Status, 1)
	err = collectStatuses([]*request{r}, func(int) []int { return []int{0} }, st, nil)
	return st[0], err
}

// PutOpaque stores one opaque-key block on its owner, as Client.PutOpaque,
// re-routing once on WRONG_EPOCH. An owner that cannot be reached, refuses
// the block twice, or speaks a version older than 3 gives StatusNoSpace:
// not stored, and not an error. It fails only for an invalid namespace or
// name (ErrInvalid) or a closed Cluster.
func (c *Cluster) PutOpaque(ctx context.Context, ns Namespace, name, payload []byte) (Status, error) {
	key, err := opaqueKeyOf(ns, name)
	if err != nil {
		return StatusMiss, err
	}
	if err := c.check(ns); err != nil {
		return StatusMiss, err
	}
	status := StatusNoSpace
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	c.dispatch(ctx, []BlockKey{key}, batchOp{
		send: func(ctx context.Context, n *Client, idx []int, last bool) sent {
			var s sent
			st, err := n.putOpaque(ctx, ns, key, name, payload)
			status = st
			if err != nil {
				status = StatusNoSpace
				s.note(idx[0], err)
			}
			return s
		},
		fail: func(context.Context, []int, error) { status = StatusNoSpace },
	})
	return status, nil
}

// WithAlloc makes Get take each hit's payload buffer from alloc, called on
// the connection's reader with the payload's length n once the answer's
// table has been checked, instead of allocating it. alloc returns a slice
// of length n, or nil to refuse: the block is then a miss with
// ErrShortBuffer and its bytes are discarded. alloc must not block (it
// holds up the connection's other answers). A buffer alloc returned
// belongs to the caller even when the block ends as a miss (the answer was
// cut short, or the context expired): the caller releases what it handed
// out. It is ignored by GetInto.
func WithAlloc(alloc func(n int) []byte) GetOption {
	return func(o *getOptions) { o.alloc = alloc }
}
