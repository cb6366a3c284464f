// Package lower is the seam between the DRAM tier and the storage below
// it: the local flash tier (internal/flash) and the cold tier
// (internal/cold/tier). The server reaches everything below DRAM through
// one Tier, and Chain composes several, upper first:
//
//	DRAM miss ──► Chain.Refill ──► flash.Refill ──hit──► slot
//	                         └──miss──► cold.Refill ──hit──► slot
//
// The single-flight of concurrent misses on one block is the server's
// (internal/server, refillMiss through the fill directory): a Tier is asked
// once per block however many sessions missed on it.
//
// Every method is safe for concurrent use. A Tier never returns bytes it
// cannot bind to the block's identity: a record of another namespace, a
// torn or corrupt one, or one it cannot read is a miss.
package lower

import (
	"context"
	"errors"

	"github.com/gpucache/gpucache/api/identity"
	"github.com/gpucache/gpucache/api/wire"
)

// Alloc reserves the DRAM slot a refill reads into, once the tier knows the
// payload's length n; false means there is no slot (the refill misses). A
// Tier calls it at most once per Refill.
type Alloc func(n int) ([]byte, bool)

// Tier is one store below DRAM, or a chain of them.
type Tier interface {
	// Refill reads the block (ns, key), whose namespace digest is d, into
	// the buffer alloc returns and reports its length, or false for a miss.
	// A hit's payload is whole and verified; on a miss the buffer (if one
	// was reserved) may hold anything and the caller must not publish it.
	Refill(ctx context.Context, ns identity.Namespace, d identity.NamespaceDigest, key identity.BlockKey, alloc Alloc) (n int, hit bool)
	// Present reports, from memory, whether the tier holds the block. A
	// true answer may be stale (a Refill may still miss); false is never
	// wrong for a block the tier has acknowledged and not dropped.
	Present(d identity.NamespaceDigest, key identity.BlockKey) bool
	// Delete hides the block: a Refill after it misses, and nothing the
	// tier had queued brings it back. known reports that the tier held or
	// had queued the block. An error means the tier could not confirm the
	// delete (the block may remain).
	Delete(ctx context.Context, ns identity.Namespace, d identity.NamespaceDigest, key identity.BlockKey) (known bool, err error)
	// Stored tells the tier that a block with identity id (digest d, key)
	// entered DRAM, so it can write it behind when DRAM evicts it. id's
	// slices alias the caller's buffers: copy what you keep. It must not
	// block.
	Stored(id identity.CacheIdentity, d identity.NamespaceDigest, key identity.BlockKey)
	// Evicted offers a block DRAM is evicting (the hot store's OnEvict,
	// called under its lock): payload is valid only during the call, so the
	// tier copies what it keeps into a bounded buffer or declines. It
	// reports whether the tier took the block. It must be fast and never
	// block on I/O.
	Evicted(d identity.NamespaceDigest, key, parent identity.BlockKey, tokens uint32, payload []byte) bool
	// TenantStats returns tenant's own usage of the tier (bytes, quota) as
	// STAT entries, for that tenant's sessions.
	TenantStats(tenant string) []wire.StatEntry
	// Stats returns the tier's STAT entries.
	Stats() []wire.StatEntry
}

// ErrNotFound is not returned by a Tier: a miss is (0, false). It is the
// error of the helpers that read a whole block (ReadAll).
var ErrNotFound = errors.New("gpucache/lower: block not found")

// ReadAll refills (ns, key) into a buffer of its own and returns it; for
// tests, tools and the conformance suite, never the hot path.
func ReadAll(ctx context.Context, t Tier, ns identity.Namespace, d identity.NamespaceDigest, key identity.BlockKey) ([]byte, error) {
	var buf []byte
	n, ok := t.Refill(ctx, ns, d, key, func(n int) ([]byte, bool) {
		buf = make([]byte, n)
		return buf, true
	})
	if !ok || n != len(buf) {
		return nil, ErrNotFound
	}
	return buf, nil
}

// Local is implemented by a tier on this host (the flash tier): its reads
// take about as long as a network round trip, so a LOOKUP that asks for a
// lease reads its blocks into DRAM first and the lease holds them. The
// cold tier is not local: a lease never waits for S3.
type Local interface {
	Local() bool
}

// IsLocal reports whether t is a local tier (Local, and says so).
func IsLocal(t Tier) bool {
	l, ok := t.(Local)
	return ok && l.Local()
}

// RefillFrom refills (ns, key) through t, as t.Refill does, and reports
// which tier served it: t itself, or for a Chain the chain's tier that
// hit (never a Chain); nil on a miss. The server labels its latency
// metrics with it: a local tier (IsLocal) is the flash tier, any other
// the cold tier.
func RefillFrom(ctx context.Context, t Tier, ns identity.Namespace, d identity.NamespaceDigest, key identity.BlockKey, alloc Alloc) (n int, by Tier) {
	if c, ok := t.(*Chain); ok {
		return c.refillFrom(ctx, ns, d, key, alloc)
	}
	n, hit := t.Refill(ctx, ns, d, key, alloc)
	if !hit {
		return 0, nil
	}
	return n, t
}

// PresentLocal reports whether a local tier of t (t itself, or one of a
// chain's) holds the block.
func PresentLocal(t Tier, d identity.NamespaceDigest, key identity.BlockKey) bool {
	if c, ok := t.(*Chain); ok {
		for _, u := range c.tiers {
			if PresentLocal(u, d, key) {
				return true
			}
		}
		return false
	}
	return IsLocal(t) && t.Present(d, key)
}
