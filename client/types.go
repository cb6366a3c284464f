package client

import (
	"context"
	"errors"
	"fmt"

	"github.com/gpucache/gpucache/api/wire"
	"github.com/gpucache/gpucache/internal/identity"
)

// Identity types, re-exported so that users of the client need import only
// this package. They are aliases: values convert freely.
type (
	// Namespace is every part of a block's identity shared by one token
	// chain: tenant, model, revisions, adapter, dtype, layout.
	Namespace = identity.Namespace
	// Layout describes how a block's KV tensors are laid out and sharded.
	Layout = identity.Layout
	// CacheIdentity is the full identity of one block.
	CacheIdentity = identity.CacheIdentity
	// BlockKey names one block: a SHA-256 chained over the namespace
	// digest, the parent key and the block's tokens.
	BlockKey = identity.BlockKey
	// NamespaceDigest is SHA-256 over a namespace's canonical encoding.
	NamespaceDigest = identity.NamespaceDigest
	// Status is the per-block outcome of a PUT or DELETE.
	Status = wire.Status
	// Limits are the limits a server announces in its HELLO response.
	Limits = wire.Limits
)

// Block statuses, re-exported from the wire package.
const (
	StatusHit      = wire.StatusHit
	StatusMiss     = wire.StatusMiss
	StatusStored   = wire.StatusStored
	StatusExists   = wire.StatusExists
	StatusTooLarge = wire.StatusTooLarge
	StatusNoSpace  = wire.StatusNoSpace
	StatusDeleted  = wire.StatusDeleted
	StatusBusy     = wire.StatusBusy
)

// Chain splits tokens into blocks of ns.Layout.BlockTokens (the last block
// may be shorter) and returns each block's key, chained to the one before.
func Chain(ns Namespace, tokens []uint32) ([]BlockKey, error) { return identity.Chain(ns, tokens) }

// KeyFor computes one block key from a namespace digest, the parent key
// (zero for the first block), the block's tokens and its valid length.
func KeyFor(ns NamespaceDigest, parent BlockKey, tokens []uint32, validLength uint32) BlockKey {
	return identity.KeyFor(ns, parent, tokens, validLength)
}

// DecodeNamespace parses a canonical namespace encoding.
func DecodeNamespace(b []byte) (Namespace, error) { return identity.DecodeNamespace(b) }

// LeaseID names a lease taken by Lookup. Zero means no lease.
type LeaseID uint64

// PutBlock is one block to store.
//
// Ownership: Put reads Data straight from the caller's slice onto the socket
// (a vectored write, no copy); the caller must not modify Data until Put
// returns. Put never retains Data after it returns.
type PutBlock struct {
	Key    BlockKey
	Parent BlockKey // key of the previous block in the chain; zero for the first
	Tokens uint32   // valid length in tokens
	Data   []byte
}

// GetResult is the outcome of reading one block. Exactly one of Hit and
// Reason is set: a hit carries the whole payload in Data; a miss carries no
// bytes and a Reason (ErrNotCached when the server simply does not hold the
// block; ErrTimeout, ErrUnavailable, ErrProtocol or ErrServer when the read
// failed). A partially received payload is never a hit.
type GetResult struct {
	Data   []byte
	Hit    bool
	Reason error
}

// Sentinel errors. Every error the client returns wraps one of them; test
// with errors.Is.
var (
	// ErrNotCached is the Reason of a plain miss: the server answered that it
	// does not hold the block (absent, evicted, or another identity).
	ErrNotCached = errors.New("gpucache/client: not cached")
	// ErrTimeout reports that the call's context expired (deadline or
	// cancellation) before the answer arrived. It also wraps ctx.Err().
	ErrTimeout = errors.New("gpucache/client: timeout")
	// ErrUnavailable reports that no connection to the server could be
	// made, or that the connection broke before the answer arrived.
	ErrUnavailable = errors.New("gpucache/client: server unavailable")
	// ErrProtocol reports a response that violates the wire protocol. The
	// connection it came on is closed.
	ErrProtocol = errors.New("gpucache/client: protocol violation")
	// ErrServer reports an error response; it wraps the *wire.Error, so
	// errors.As(err, new(*wire.Error)) yields the code.
	ErrServer = errors.New("gpucache/client: server error")
	// ErrShortBuffer is the Reason of a GetInto miss whose destination
	// buffer is smaller than the cached payload.
	ErrShortBuffer = errors.New("gpucache/client: destination buffer too small")
	// ErrClosed reports a call on a closed Client.
	ErrClosed = errors.New("gpucache/client: client closed")
	// ErrInvalid reports invalid arguments: a namespace that does not
	// validate, an empty key list, a bad config.
	ErrInvalid = errors.New("gpucache/client: invalid argument")
)

// serverError wraps a wire error response.
func serverError(we *wire.Error) error { return fmt.Errorf("%w: %w", ErrServer, we) }

// ctxError wraps the context's error as ErrTimeout.
func ctxError(ctx context.Context) error {
	err := context.Cause(ctx)
	if err == nil {
		err = context.DeadlineExceeded
	}
	return fmt.Errorf("%w: %w", ErrTimeout, err)
}

// missAll turns every result into a miss with reason: on the read path any
// failure degrades to misses.
func missAll(res []GetResult, reason error) {
	for i := range res {
		res[i] = GetResult{Reason: reason}
	}
}
