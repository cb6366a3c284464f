package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gpucache/gpucache/api/identity"
	"github.com/gpucache/gpucache/api/wire"
)

// Identity types, re-exported so that users of the client need import only
// this package. They are aliases of the public types of package
// github.com/gpucache/gpucache/api/identity (whose go doc has the
// validation rules and the canonical encoding): values are the same type.
// Their fields are listed here too, since go doc does not follow an alias
// (TestAliasDocsListEveryField keeps the lists whole).
type (
	// Namespace is every part of a block's identity shared by one token
	// chain: who owns the bytes and how they were computed. All strings
	// are required except Adapter. Fields:
	//
	//	Tenant            string // owning tenant
	//	TrustDomain       string // trust domain of the producer
	//	ModelID           string // model id
	//	ConfigRevision    string // model config revision
	//	TokenizerRevision string // tokenizer revision
	//	Adapter           string // LoRA/adapter id; "" means the base model
	//	RoPE              string // position encoding scheme and parameters
	//	DType             string // KV element type, e.g. "fp16"
	//	Quantization      string // KV quantization, "none" when unquantized
	//	Layout            Layout
	Namespace = identity.Namespace
	// Layout describes how a block's KV tensors are laid out and sharded.
	// Fields:
	//
	//	Format      string // tensor layout name, e.g. "vllm-nhd" (required)
	//	TPRank      uint32 // tensor-parallel rank, < TPSize
	//	TPSize      uint32 // tensor-parallel world size, >= 1
	//	PPRank      uint32 // pipeline-parallel rank, < PPSize
	//	PPSize      uint32 // pipeline-parallel world size, >= 1
	//	LayerStart  uint32 // first layer held in the block
	//	LayerCount  uint32 // number of layers held, >= 1
	//	KVHeads     uint32 // KV heads held by this shard, >= 1
	//	HeadDim     uint32 // head dimension, >= 1
	//	BlockTokens uint32 // tokens per full block, 1..65536
	Layout = identity.Layout
	// CacheIdentity is the full identity of one block: its namespace plus
	// the prefix it extends. Fields:
	//
	//	Namespace            // embedded
	//	Parent      BlockKey // key of the previous block; zero for the first block
	//	Position    uint64   // token offset of the block's first token
	//	Tokens      []uint32 // the block's token ids, 1..BlockTokens of them
	//	ValidLength uint32   // tokens whose KV the payload holds, 1..len(Tokens)
	//	Opaque      []byte   // an opaque-key block's name (then Parent..ValidLength are zero)
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
	// StatusKeyMismatch: a PUT block's key does not derive from its
	// identity; nothing was stored.
	StatusKeyMismatch = wire.StatusKeyMismatch
	// StatusReadOnly: the node's control plane is unreachable (read-only
	// or unknown mode), so it stores nothing new; nothing was stored. Only
	// a session of protocol version 4 or later gets it: an older server
	// answers StatusNoSpace in the same case.
	StatusReadOnly = wire.StatusReadOnly
)

// Chain splits tokens into blocks of ns.Layout.BlockTokens (the last block
// may be shorter) and returns each block's key, chained to the one before.
func Chain(ns Namespace, tokens []uint32) ([]BlockKey, error) { return identity.Chain(ns, tokens) }

// Identities splits tokens into blocks like Chain and returns each block's
// full identity (namespace, parent, position, tokens, valid length); the
// key of identity i is Chain's key i. Tokens alias the tokens argument.
func Identities(ns Namespace, tokens []uint32) ([]CacheIdentity, error) {
	return identity.Identities(ns, tokens)
}

// KeyFor computes one block key from a namespace digest, the parent key
// (zero for the first block), the block's tokens and its valid length.
func KeyFor(ns NamespaceDigest, parent BlockKey, tokens []uint32, validLength uint32) BlockKey {
	return identity.KeyFor(ns, parent, tokens, validLength)
}

// DecodeNamespace parses a canonical namespace encoding.
func DecodeNamespace(b []byte) (Namespace, error) { return identity.DecodeNamespace(b) }

// LeaseID names a lease taken by Lookup. Zero means no lease.
type LeaseID uint64

// PutBlock is one block to store: its key, the identity the server derives
// the key from (with the namespace of the Put: Parent, Position, TokenIDs
// and the valid length), and its payload. The server refuses, with
// StatusKeyMismatch, a key that does not derive from that identity; build
// blocks with BlocksOf to get it right.
//
// Ownership: Put reads Data straight from the caller's slice onto the socket
// (a vectored write, no copy); the caller must not modify Data until Put
// returns. Put never retains Data or TokenIDs after it returns.
type PutBlock struct {
	Key    BlockKey
	Parent BlockKey // key of the previous block in the chain; zero for the first
	// ValidLength is the number of leading token ids whose KV Data holds
	// (CacheIdentity.ValidLength); 0 means len(TokenIDs).
	ValidLength uint32
	Position    uint64   // token offset of the block's first token
	TokenIDs    []uint32 // the block's token ids, 1..Layout.BlockTokens of them
	Data        []byte
}

// validLength is the valid length Put sends.
func (b *PutBlock) validLength() uint32 {
	if b.ValidLength == 0 {
		return uint32(len(b.TokenIDs))
	}
	return b.ValidLength
}

// BlocksOf pairs identities (from Identities) with their payloads into
// PutBlocks, computing each key. It panics if the lengths differ; an
// invalid identity gets a zero key, which the server refuses
// (StatusKeyMismatch). TokenIDs alias ids[i].Tokens and Data aliases
// payloads[i].
func BlocksOf(ids []CacheIdentity, payloads [][]byte) []PutBlock {
	if len(ids) != len(payloads) {
		panic(fmt.Sprintf("client.BlocksOf: %d identities, %d payloads", len(ids), len(payloads)))
	}
	blocks := make([]PutBlock, len(ids))
	var dig NamespaceDigest
	var digOf *Namespace
	for i := range ids {
		id := &ids[i]
		b := PutBlock{Parent: id.Parent, ValidLength: id.ValidLength, Position: id.Position, TokenIDs: id.Tokens, Data: payloads[i]}
		if digOf == nil || *digOf != id.Namespace {
			if d, err := id.Namespace.Digest(); err == nil {
				dig, digOf = d, &id.Namespace
			} else {
				digOf = nil
			}
		}
		if digOf != nil && id.Validate() == nil {
			b.Key = identity.KeyFor(dig, id.Parent, id.Tokens, id.ValidLength)
		}
		blocks[i] = b
	}
	return blocks
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
	// ErrNotDataPort reports a peer that answered HELLO in another
	// protocol: HTTP, from a node's admin listener (usually :9401) rather
	// than its data port (usually :9400). Dialing it again will not help.
	ErrNotDataPort = errors.New("gpucache/client: not a gpucache data port")
	// ErrUnsupported reports an operation the session's protocol version
	// does not have (MEMBERS on a version-1 server).
	ErrUnsupported = errors.New("gpucache/client: not supported by the server's protocol version")
)

// RetryAfter reports how long the server asked to wait before retrying, for
// an error that wraps a RATE_LIMITED answer.
func RetryAfter(err error) (time.Duration, bool) {
	var we *wire.Error
	if errors.As(err, &we) && we.Code == wire.CodeRateLimited {
		return we.RetryAfter, true
	}
	return 0, false
}

// WrongEpoch reports the epoch a cluster node gave when it refused a
// request for a key it does not own under that epoch (WRONG_EPOCH), for an
// error, or a GetResult.Reason, that wraps such an answer. The caller's
// view of the cluster is older than (or disagrees with) the node's: fetch
// the view again (Members) and send the request to the new owner; Cluster
// does this itself.
func WrongEpoch(err error) (epoch uint64, ok bool) {
	var we *wire.Error
	if errors.As(err, &we) && we.Code == wire.CodeWrongEpoch {
		return we.Epoch, true
	}
	return 0, false
}

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
