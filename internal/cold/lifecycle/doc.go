// Package lifecycle manages cold-tier objects after publication (G4):
// reference-safe reclaim, retention, per-tenant inventory and purge, and a
// byte-budgeted backfill. It works on the key layout of package pack
// (packs/<ns>/, manifests/<ns>/, index/<ns>/) through cold.Store only.
//
// # References
//
// A pointer references the manifest it names; a v3 manifest references its
// pack. Publication writes pack, then manifest, then pointers, so removal
// runs the other way: pointers (Expire, Purge), then manifests, then packs.
// A reader therefore finds at worst a miss, never a pointer whose manifest
// is gone while the pointer is kept by us.
//
// # Reclaim
//
// Reclaim lists the namespace once, reads every pointer and manifest, and
// deletes (1) v3 manifests that no pointer names and (2) packs that no
// remaining manifest names, each only when older than Options.Grace by
// ObjectInfo.Modified and the injected clock. The grace period covers a
// publication in flight (a pack not yet named by its manifest, a manifest
// not yet named by its pointers).
//
// It is conservative where it cannot know:
//
//   - A manifest that does not decode as v3 (corrupt, unknown version, or a
//     legacy v1/v2 manifest, whose body this code does not interpret) might
//     name any pack. Its presence pins every pack of the namespace: no pack
//     is deleted in that pass (counted as KeptPinned).
//   - Likewise a pointer that cannot be read or decoded pins every manifest.
//   - Legacy and undecodable manifests are never deleted or rewritten by
//     Reclaim or Expire. Legacy ones are clean misses for refill (the block
//     is recomputed and repacked under v3); they are counted in
//     Report.Legacy. Purge removes them with the rest of a namespace.
//   - A listing or a read error other than "not found" aborts the pass
//     before any delete (listing) or pins the dependent kind (read).
//
// Right before each delete the references are checked again: a fresh List
// of the referencing prefix, re-reading only what may have changed
// (manifests are content-addressed, so a decoded key is cached for the
// pass; a pointer is re-read when its Modified or size changed or when it is
// young), and a Head of the candidate, which must still exist and still be
// older than the grace period. The remaining window (a pointer rewritten to
// an old manifest between the re-check and the delete, e.g. by a long
// delayed retry) yields a miss, not wrong bytes: a reader verifies the
// manifest digest and the payload checksum.
//
// # Verified deletes
//
// Every delete is followed by a Head. ErrNotFound verifies it. If the object
// is still there, the key is reported in Unverified and not retried (a
// store that acknowledges deletes it does not perform needs an operator, not
// a loop). Any other Head error counts as an error.
//
// # Retention
//
// Expire deletes pointers last written before a cutoff (their blocks become
// misses), re-checking each pointer's Modified with a Head first so a
// rewritten pointer survives, then runs Reclaim.
//
// # Tenant lifecycle
//
// The namespace digest covers the tenant, so a tenant is a set of
// namespaces. List counts objects and bytes per kind from a listing alone.
// Purge deletes everything under the namespace's prefixes in the order
// pointers, manifests, packs; it moves to the next kind only when a re-list
// of the current one is empty, so a failed pointer delete never leaves a
// pointer to a removed manifest. New objects that appear during a phase get
// one more round (three in all); a key already attempted is not retried.
// The admin's tenant purge (internal/admin) runs Purge over each of a
// tenant's namespaces.
//
// # Backfill
//
// BackfillWith walks a namespace's pointers in key order and delivers verified
// blocks (pointer, manifest digest and decode, payload SHA-256) to a
// callback. Every byte it downloads counts against the budget, and each read
// is sized before it is issued: it stops as soon as the next read would
// exceed the budget, so it never downloads more than budget bytes. Decoded
// manifests are cached for the call, so blocks of one pack pay for their
// manifest once. Legacy, corrupt and missing entries are skipped and
// counted. A sealed manifest is never read unchecked: without a keyring
// BackfillWith skips blocks of sealed manifests; given one it delivers only
// blocks of manifests whose seal verifies (pack/doc.go, "Manifest seal").
//
// Reclaim and Expire read manifests only to find references; they do not
// verify seals (a forged manifest can only keep objects alive).
//
// # Not here
//
// A background scheduler for Reclaim (the "async" part of G4) is left to
// the caller: Reclaim is safe to run from a goroutine or a periodic job, and
// takes a context. Reclaim does not delete corrupt pointers.
package lifecycle
