package hot

// This file fixes the exported API of the hot tier. The server and the
// benchmarks code against it; keep the signatures stable.

import (
	"errors"
	"time"

	"github.com/gpucache/gpucache/api/identity"
	"github.com/gpucache/gpucache/internal/policy"
)

// Sentinel errors.
var (
	ErrExists   = errors.New("gpucache/hot: key already cached")
	ErrTooLarge = errors.New("gpucache/hot: payload larger than the largest size class")
	ErrNoSpace  = errors.New("gpucache/hot: no evictable space")
	ErrClosed   = errors.New("gpucache/hot: store closed")
	ErrConfig   = errors.New("gpucache/hot: invalid config")
	// ErrNotAdmitted: Config.Policy refused the block (Policy.Admit); nothing
	// was stored.
	ErrNotAdmitted = errors.New("gpucache/hot: block not admitted by the policy")
	// ErrTenantQuota: the block's tenant already holds its share of the
	// store (Config.TenantHoldBytes, leased plus reserved); nothing was
	// stored and nothing was evicted. It clears when the tenant's own leases
	// or reservations end.
	ErrTenantQuota = errors.New("gpucache/hot: tenant holds its share of the store")
)

// Prefault selects how fresh slab memory is faulted in before use.
type Prefault string

const (
	// PrefaultPopulate maps slabs with MAP_POPULATE (default; see doc.go for
	// the measurement behind the choice).
	PrefaultPopulate Prefault = "populate"
	// PrefaultHugePage advises MADV_HUGEPAGE and touches every 2 MiB page.
	PrefaultHugePage Prefault = "hugepage"
	// PrefaultNone leaves faulting to first touch (for comparison only).
	PrefaultNone Prefault = "none"
)

// Config configures a Store.
type Config struct {
	// CapacityBytes is the byte budget for slab memory. Default 1 GiB.
	CapacityBytes int64
	// MinClass is the smallest slot size class in bytes, a power of two.
	// Default 16 KiB.
	MinClass int
	// MaxClass is the largest slot size class in bytes, a power of two.
	// Default 64 MiB (at most the largest power of two within
	// CapacityBytes). A payload larger than MaxClass gets ErrTooLarge.
	MaxClass int
	// SlabBytes is the size of one mmap'd slab (it holds slots of a single
	// class; a class larger than SlabBytes gets one slot per slab). Default
	// 64 MiB.
	SlabBytes int
	// Prefault selects how slab pages are faulted in. Default PrefaultPopulate.
	Prefault Prefault
	// DefaultLeaseTTL is the TTL of a lease when the caller asks for 0.
	// Default 5s.
	DefaultLeaseTTL time.Duration
	// MaxLeaseTTL caps a requested lease TTL. Default 30s.
	MaxLeaseTTL time.Duration
	// MaxLeases bounds live leases; Lookup beyond it grants no lease.
	// Default 65536.
	MaxLeases int
	// TenantHoldBytes caps, per tenant, the slot bytes the tenant holds:
	// the blocks its live leases pin (a block in two leases counts twice)
	// plus its reservations in flight. Beyond it ReserveBlock returns
	// ErrTenantQuota and LookupFor grants no lease, so one tenant can never
	// pin or reserve more than this, whatever it does (see "Tenants" in the
	// package comment). Default max(CapacityBytes/2, MaxClass); the daemon
	// sets a fair share. At least MaxClass.
	TenantHoldBytes int64
	// TenantLeases caps live leases per tenant; LookupFor beyond it grants
	// no lease. Default max(MaxLeases/2, 1).
	TenantLeases int
	// EvictScan bounds how many LRU candidates one eviction inspects (and
	// skips, when pinned or leased) before giving up with ErrNoSpace.
	// Default 1024.
	EvictScan int
	// OnEvict, if set, is called for every block evicted for space, with the
	// store's lock held, just before its slot is freed. payload aliases slab
	// memory and is valid only during the call: copy what you keep. It must
	// be fast and must not call back into the Store (the cold tier's
	// write-behind copies into a bounded buffer or drops the block).
	// Blocks removed by Delete or Close are not reported.
	// It reports whether a tier below kept the block (lower.Tier.Evicted);
	// the store does not act on the answer.
	OnEvict func(ns Namespace, key, parent Key, tokens uint32, payload []byte) bool
	// TagSize, when positive, gives every block a tag of this many bytes,
	// set with SetTag before Commit and read with Tag (the server keeps
	// each block's integrity seal there). Zero: no tags, no memory for
	// them. At most 64.
	TagSize int
	// Policy, if set, decides admission and the eviction order within a
	// size class (see "Policies" in the package comment). It is called
	// with the store's lock held and must not call back into the Store. A
	// policy instance serves one Store. Nil: the built-in prefix-aware LRU
	// order.
	Policy policy.Policy
}

// BlockMeta is what ReserveBlock knows about a block beyond its key: the
// signals a Config.Policy sees (policy.Block). Without a policy only Tokens
// is kept.
type BlockMeta struct {
	// Tokens is the number of valid tokens in the block (kept for callers'
	// stats and passed to OnEvict).
	Tokens uint32
	// Position is the index of the block in its token chain (0 = first).
	Position uint32
	// Partial: the block holds fewer tokens than its namespace's block size.
	Partial bool
	// Demand marks a block stored because a reader asked for it (a cold
	// tier refill): its reuse is proven, so Policy.Admit is not asked.
	Demand bool
	// Tenant is charged for the reservation until Commit or Abort
	// (Config.TenantHoldBytes). Empty: nobody is charged (in-process
	// callers); the server always names the session's tenant.
	Tenant string
}

// LeaseID names a lease. Zero means "no lease".
type LeaseID uint64

// Stats is a snapshot of the store's counters.
type Stats struct {
	Hits               uint64 // reads that returned bytes
	Misses             uint64 // reads of absent keys
	IdentityMismatches uint64 // reads of present keys under another namespace (also counted as misses)
	Puts               uint64 // blocks published
	PutRejects         uint64 // reservations refused (exists, too large, no space, not admitted)
	Evictions          uint64 // blocks evicted for space
	Deletes            uint64 // blocks removed by Delete
	Blocks             uint64 // blocks cached now
	BytesCached        uint64 // payload bytes cached now
	BytesReserved      uint64 // slot bytes in use (cached + in flight), by size class
	BytesMapped        uint64 // slab bytes mmap'd now (<= CapacityBytes)
	CapacityBytes      uint64 // the budget
	LeasesActive       uint64 // live leases
	LeasesGranted      uint64 // leases granted since start
	LeasesExpired      uint64 // leases reclaimed by expiry
	Pinned             uint64 // blocks pinned by a reader or a lease now

	// Added by the implementation.
	InFlight         uint64 // reservations not yet committed or aborted
	Lookups          uint64 // Lookup calls
	LookupHits       uint64 // blocks matched by the leading runs of Lookups
	LookupMismatches uint64 // Lookup runs ended by a present key under another namespace
	Slabs            uint64 // slabs mapped now
	SlabReclaims     uint64 // slabs emptied and handed to another size class
	NotAdmitted      uint64 // reservations refused by Config.Policy (also counted in PutRejects)
	TenantRejects    uint64 // reservations refused by the tenant's share (ErrTenantQuota; also in PutRejects)
	QuotaEvictions   uint64 // blocks evicted because their own tenant was at its DRAM quota (SetTenantQuotas)
	LeasesRefused    uint64 // Lookups that asked for a lease over hits and got none (MaxLeases or the tenant's share)
}

// Reservation is a slot being filled by a Put. Buf is slab memory of exactly
// the requested size; the caller writes the payload into it and then calls
// Commit or Abort exactly once. Until then the slot is in flight: it is not
// visible to readers and never evicted.
type Reservation struct {
	Buf []byte
	tk  ticket // empty but in the invariants build; not last, so it adds no padding
	ref ref
}

// View is a pinned, published block. Bytes aliases slab memory and stays
// valid until Release; the caller must call Release exactly once and must not
// keep Bytes after it.
type View struct {
	Bytes []byte
	tk    ticket // empty but in the invariants build; not last, so it adds no padding
	ref   ref
}

// ref names an index entry and its generation, so a stale ref is detected.
type ref struct {
	idx uint32
	gen uint32
}

// Key and digest types, re-exported for brevity.
type (
	Key       = identity.BlockKey
	Namespace = identity.NamespaceDigest
)
