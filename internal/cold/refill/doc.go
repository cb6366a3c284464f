// Package refill reads blocks of KV cache back from the cold tier (G4),
// safely: a refill returns exactly the block the authenticated request
// expects, or a miss with no payload bytes.
//
// # Entry points
//
// Every public entry point takes the expected identity from the
// authenticated request; there is no tenant-free or key-only path:
//
//	RefillBlock      one block by its full identity (the seed's refill_generation)
//	RefillMatching   the leading run of a chain of full identities
//	RefillDegraded   RefillBlock with the smaller DegradedBudget, for a hot tier under pressure
//	RefillForTenant  RefillBlock that first asserts the session's tenant is expected.Tenant
//	RefillKey        one block by (namespace, key), for a server whose GET carries keys only
//	RefillKeyInto    RefillKey into a buffer the caller allocates once the length is known
//
// Identity matching does not authenticate the caller or prove how the bytes
// were computed; upstream authentication and authorization remain required.
// Raw cold.Store access remains a trusted internal capability.
//
// # Order of checks
//
// Each block goes through these steps, and a miss at any step ends it
// before the next; the payload range is read only at step 6:
//
//  0. (no store call) RefillForTenant: session tenant = expected tenant.
//     The expected identity validates; a chain links parent to key. The
//     breaker admits the call.
//  1. Pointer: one ranged read of PointerLen bytes at
//     index/<ns digest>/<block key>, both derived from the expected
//     identity; it must decode and name that namespace and block.
//  2. Manifest: if the pointer's manifest size exceeds Config.ManifestMax,
//     OverBudget without downloading; else one ranged read of that size.
//  3. pack.OpenManifest: a v1/v2 header is Legacy; the key's digest must be
//     SHA-256 of the bytes; then the full v3 decode (pack/doc.go). Any
//     failure is Corrupt. Then the seal (Manifest.VerifySeal): with
//     Config.Keyring the manifest must carry a kind-1 HMAC-SHA256 seal that
//     verifies now; without one it must be unsealed (a sealed manifest is
//     never read unchecked). A failure is Corrupt. The seal is verified on
//     every refill call, also for a manifest from the manifest cache, so a
//     key that expires after the manifest was cached stops verifying.
//  4. The manifest's namespace must equal the expected namespace, and the
//     block's range must carry the expected full canonical identity byte for
//     byte: any single differing field is IdentityMismatch.
//  5. The payload length must fit what is left of the call's budget
//     (OverBudget) and dst (ShortBuffer).
//  6. One ranged read of the payload, straight into dst, hashed as it
//     streams in (see "Payload checksum").
//  7. SHA-256 of dst[:length] must equal the manifest's checksum; a corrupt
//     payload or another object substituted under the pack key is Corrupt,
//     and dst[:length] is zeroed.
//
// A refill never writes or deletes: a legacy or corrupt entry is left as it
// is for the repack and reclaim paths.
//
// # Integrity
//
// The SHA-256 digests (manifest key, payload checksums) catch accidental
// damage; they do not stop anyone who can write the bucket from rewriting a
// manifest consistently (another identity or checksum, a recomputed digest
// and key, a re-pointed pointer). The manifest seal does: with
// Config.Keyring set, such a manifest is a miss before any payload read.
//
// Every miss that points at corruption or tampering calls
// Config.OnIntegrity once with an IntegrityEvent (kind, namespace digest,
// block key, seal key id, error; nothing secret): seal_missing,
// seal_invalid, manifest_corrupt, pointer_corrupt, payload_checksum,
// identity_mismatch. Ordinary absence (NotFound), Legacy, budgets, short
// buffers, the breaker and store outages do not. A miss is a clean miss
// whatever the kind: n is 0, dst holds no payload byte (a payload that was
// read and failed its checksum is zeroed), and nothing is cached as good.
//
// # Payload checksum
//
// A plain (unencrypted, uncompressed) payload is read with
// cold.RangeGetTee: a store that is a cold.Teer (s3store, fs, and the
// degrade decorator over either) hands each piece of the body, at most
// cold.TeeChunk bytes, to the SHA-256 as soon as it is in dst, so the
// checksum runs while the rest of the body is still arriving and reads
// each piece while it is in the CPU's cache: one pass over the bytes, no
// extra buffer. Other stores are hashed after the read, as before. Either
// way step 7 decides: the bytes already in dst are not the caller's until
// the digest matches, and a mismatch zeroes them.
//
// An encrypted or compressed payload is not streamed: AES-GCM must
// authenticate the whole block before any plaintext is used, and the
// checksum is over the plaintext, so it reads the stored bytes into a
// buffer of their own, opens them, then hashes (Manifest.OpenRange).
//
// # Budgets
//
// Config.Budget bounds the payload bytes one call requests (a chain shares
// it); RefillDegraded uses Config.DegradedBudget. Config.ManifestMax bounds a
// manifest download. Pointers are fixed-size. These bound the bodies a
// refill asks the store for, not the store backend's own wire or memory use.
//
// # Breaker
//
// A slow or unavailable store gives Missing without calling the store. Each
// call runs under Config.Timeout. A call that hits ErrUnavailable, an
// unexpected store error or its own timeout is a failure; any answer from
// the store (a hit, not found, a legacy or corrupt object) is a success; a
// call whose caller's context ended first is neither. After
// Config.BreakerFailures consecutive failures the breaker opens: for
// Config.BreakerCooldown every refill returns Missing(BreakerOpen) with no
// store call. Then it is half-open: one probe call reaches the store while
// the others still get BreakerOpen; a successful probe closes it, a failed
// one reopens it. The clock is Config.Now.
//
// # Buffers
//
// The caller owns dst before, during and after the call. A hit writes
// exactly dst[:n]. A miss leaves no payload byte in dst: a failed or
// mismatching payload read zeroes dst[:length]; nothing past the payload's
// length is touched. A Refiller keeps no payload memory; manifests and
// pointers are read into buffers it allocates per call and drops.
//
// RefillKeyInto takes no buffer: after step 5's budget check it asks the
// caller's alloc for one of the payload's length, so a server can reserve a
// hot-tier slot and have the payload read straight into slab memory, with
// no payload-sized buffer on the Go heap (blocks of up to 64 MiB). A
// refused alloc is Missing(NoDestination), before any payload read; the
// caller discards an allocated buffer on any miss (it is zeroed).
//
// # Results and errors
//
// The Result decides hit or miss; callers fall back to recompute on any
// miss. The error only explains a miss, for logs and metrics: it wraps
// cold.ErrCorrupt for Corrupt, the store's or context's error for
// Unavailable, ErrInvalidRequest, or ErrShortBuffer, and is nil for the
// clean misses (NotFound, Legacy, IdentityMismatch, OverBudget, BreakerOpen,
// TenantMismatch) and for hits.
package refill
