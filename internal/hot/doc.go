// Package hot is the hot tier of gpucache: KV-cache blocks in DRAM, in an
// off-heap slab arena with a pointer-free index, prefix-aware LRU eviction
// and leases.
//
// # Slab layout
//
// Payload bytes never live on the Go heap. They live in anonymous private
// mappings (mmap MAP_ANON|MAP_PRIVATE), the slabs. A slab holds slots of one
// power-of-two size class, MinClass..MaxClass (default 16 KiB..64 MiB, ADR 0015); a
// payload of n bytes takes a slot of the smallest class >= n (a zero-byte
// payload takes a MinClass slot). A slab is SlabBytes long (default 64 MiB),
// rounded down to whole slots, or one slot when the class is larger than
// SlabBytes.
//
// Slabs are mapped lazily, when a class needs a slot and has none free, and
// the bytes mapped (plus mappings in progress) never exceed CapacityBytes.
// When the budget is spent, ReserveBlock finds space in this order:
//
//  1. a free slot of the class;
//  2. a new slab, while the budget allows;
//  3. an empty slab of another class, handed over;
//  4. a slab of another class whose blocks, and their cached descendants,
//     are all evictable and older than the class's own candidate: they
//     are evicted (children first) and the slab changes class;
//  5. the LRU candidate of the class (with Config.Policy, the policy's
//     candidate; see Policies), evicted.
//
// When the first three find no room while another ReserveBlock is mapping
// or unmapping a slab with the lock dropped (its budget is taken but not
// yet slots), ReserveBlock waits for that remap to end and tries again
// before it evicts anything, so concurrent writers on a fresh store never
// fail, nor evict cached blocks, for want of the slab being mapped. When
// nothing can be evicted either, it returns ErrNoSpace. A slab that changes class is re-carved
// in place when the new class uses slabs of the same length (the common case,
// every class <= SlabBytes): no munmap, no new page faults. Otherwise it is
// munmapped and a slab of the right length is mapped once the budget allows.
// Step 4 keeps the eviction order close to a global LRU at slab granularity.
// A class never takes a slab holding anything more recent than what it would
// evict itself. The catch: under a steady mix of classes, each class keeps
// the share of slabs it has, as in memcached without slab automove.
//
// # The index holds no pointers
//
// Blocks are indexed by map[Key]uint32 into a []entry. An entry is a flat
// struct of fixed-size arrays and integers: key, namespace digest, parent
// key, slab and slot numbers, length, tokens, LRU links and child-list links
// as uint32 indices, child/pin/lease counts, state and generation. Free
// entries, free slots and slabs with free slots are []uint32 stacks.
// Children are tracked in map[kidKey]kidList, also pointer-free. None of
// these types holds a pointer (TestEntryHasNoPointers walks them with
// reflect), so their backing arrays are allocated noscan. The GC never scans
// work in proportion to cached blocks. The GC sees one slice header per slab
// and per lease, nothing per block. A ref (entry index + generation) names a
// slot in a Reservation or a View. Freeing an entry bumps its generation, so
// a stale Commit, Abort or Release (its entry freed since) is detected and
// ignored; a repeated one on a live entry only the invariants build tells
// (see Ownership).
//
// # Eviction
//
// Each size class has an LRU list, linked through the entries, that holds
// only eviction candidates: published blocks with no cached child. A block
// with a cached child (an entry whose Parent is its key, in the same
// namespace) is off the list, so it is never evicted before that child, and
// a scan never walks the interior of a long chain. When its last cached
// child goes, the parent returns to the list at the position its last touch
// earns. Counts are kept per entry and, in kids, per parent key, so a parent
// published after its children finds them. Commit drops a block whose parent
// chain would loop back to its own key, because a loop would never be
// evicted. Acquire and Lookup hits touch the LRU, and so does a ReserveBlock of
// a key already published under the same namespace: it fails with
// ErrExists, but a writer offering a cached block again is a use of it
// (each block of a request is inserted or touched). Pinned and leased
// candidates stay on the list, and the scan skips them, looking at most at
// EvictScan entries (default 1024) before it gives up; a leased block is
// off the list until its last lease ends, so leases, however many, never
// make a scan give up. In-flight slots are never on a list. Nothing
// pinned, leased or in flight is ever evicted, whether by LRU or by slab
// reclaim.
//
// # Policies
//
// Config.Policy (a policy.Policy from internal/policy, the same code
// the trace simulator runs) replaces the built-in order; nil keeps it, and
// then every hook below costs one nil check. With a policy:
//
//   - ReserveBlock offers the block to Policy.Admit (its parent's entry
//     index when the parent is published under the same namespace, its
//     position in the chain, its tokens, whether it is partial) before it
//     looks for space. A refusal stores nothing and returns ErrNotAdmitted
//     (counted in Stats.NotAdmitted and PutRejects). A block stored because
//     a reader asked for it (BlockMeta.Demand, the cold refill) skips
//     Admit.
//   - Publishing (Commit, CommitAcquire) calls Policy.Insert with the entry
//     index as the block's ID. Every use the built-in order counts (Acquire
//     and Lookup hits, a ReserveBlock of a published key) calls Policy.Touch.
//     Every removal (eviction, slab reclaim, Delete) calls Policy.Remove
//     before the index is freed and reused. Close calls nothing.
//   - Where the built-in order takes the LRU candidate of the size class,
//     the store takes the first block Policy.Victims yields that is
//     published, of that class and neither pinned nor leased, looking at
//     most at EvictScan*4 candidates. The prefix-aware rule is then the
//     policy's to apply, not the store's.
//
// The limitation: a policy orders blocks globally, but space is reclaimed
// per size class. With one block size (the usual case: one namespace's
// blocks are all the same size) the policy's order is exact. With mixed
// sizes it applies within each class, and the cross-class slab reclaim
// (step 4 above) still compares last-use ticks: a slab of another class
// moves when all its blocks were used before the policy's candidate.
// The built-in LRU lists are kept up to date either way; that walk is what
// step 4 uses.
//
// # Tenants
//
// Capacity is shared, but what a tenant can hold back from eviction is
// not: BlockMeta.Tenant names the tenant of a reservation and LookupFor the
// tenant of a lease, and each tenant's leases (the slot bytes of the
// blocks each one pins) plus its reservations in flight are capped at
// Config.TenantHoldBytes, its live leases at Config.TenantLeases. Over the
// cap, ReserveBlock returns ErrTenantQuota before it looks for space (so a
// tenant at its cap evicts nothing) and LookupFor reports the hits without
// a lease. The defaults are half of the store and of MaxLeases; the daemon
// sets capacity/N for N configured tenants (docs/adr/0013). So whatever
// one tenant leases or stalls, at least CapacityBytes - TenantHoldBytes of
// slot bytes stay evictable or free for the others. The guarantee is in
// slot bytes: with one block size (the usual case) it holds as stated;
// with mixed sizes a slab holding a leased block cannot change class, the
// limitation of slab reclaim described above. Cached, unleased blocks are
// ordinary LRU data whoever wrote them.
//
// # Identity
//
// Every entry stores the namespace digest it was written under and its
// parent key. Acquire, Lookup and Delete presenting another digest see a
// miss: no bytes, and for Acquire the miss counts in Misses and
// IdentityMismatches (LookupMismatches for Lookup).
//
// # Ownership
//
//   - Reservation: ReserveBlock hands the slot to the caller, who writes Buf
//     (without any lock held) and then calls Commit or Abort exactly once.
//     Until then the slot is in flight: its key is taken, readers miss, and
//     eviction skips it.
//   - View: Acquire pins the block. The caller reads Bytes and calls Release
//     exactly once; Bytes must not be used afterwards. A pinned block is never
//     evicted or deleted (Delete reports busy).
//   - Lease: Lookup with lease pins the leading run of hits for the caller,
//     who calls ReleaseLease after its reads. If it does not, the lease
//     expires after its TTL (DefaultLeaseTTL, capped at MaxLeaseTTL) by
//     the monotonic clock. ExpireLeases reclaims expired leases (the daemon
//     calls it before each stats snapshot); ReserveBlock and Lookup do so
//     lazily (a heap peek when nothing is due). At most MaxLeases leases
//     live at once, and at most TenantLeases per tenant (see Tenants).
//     Past that, Lookup grants none.
//   - Close unmaps every slab. The caller guarantees that no View or
//     Reservation is still in use.
//   - The invariants build (-tags invariants, or -race, which the test
//     script uses; invariants.go) checks these contracts. Each View and
//     Reservation carries a ticket, and a second Release, Commit or Abort
//     of one panics instead of acting: a release build cannot tell a
//     second Release from another reader's first, because both name the
//     same entry, and drops that reader's pin. checkInvariants, which the
//     tests call after each step, also matches every pin to a View handed
//     out and every in-flight slot to a Reservation. In a release build
//     (invariants_off.go) the tickets are empty and the checks are no-ops
//     the compiler removes.
//
// # Locking
//
// One mutex, Store.mu, guards every mutable field: the index, the LRU lists,
// the child lists, the slab table and free lists, the leases and the
// counters. Store.cfg, Store.cl and Store.base are immutable after New.
// Critical sections are short and copy no payload: ReserveBlock hands out a slot,
// the caller copies, Commit publishes. The lock is dropped around mmap and
// munmap, which take milliseconds on a populated 64 MiB slab. The budget is
// taken before the mmap and returned after the munmap, so concurrent growth
// never exceeds CapacityBytes. A ReserveBlock that finds no room while a remap is
// in progress waits on Store.room (a sync.Cond on mu), which every remap's
// end and Close signal. Two rare paths hold the lock for work bounded
// by the size of a slab: planning a cross-class slab reclaim and re-carving
// a slab.
//
// # Prefault
//
// First-touch page faults on fresh anonymous memory are slow, so slabs are
// faulted in when they are mapped. PrefaultPopulate (MAP_POPULATE, the
// default) pays for that when the slab is mapped. PrefaultHugePage advises
// MADV_HUGEPAGE and writes one byte per 4 KiB page, which faults one 2 MiB
// huge page per aligned range. PrefaultNone leaves the faults to the first
// Put and is there for comparison only. Measured on 2026-11-30, on 2 vCPUs
// of an "Intel(R) Xeon(R) Processor" (a shared VM, THP=madvise, kernel
// 6.18). Medians of 5 runs of BenchmarkSlabFill (map a 64 MiB slab, copy
// 64 MiB into it, unmap) and BenchmarkSlabMap (map and prefault only):
//
//	mode      fill (map+copy+unmap)    map+prefault+unmap
//	none      1.91 GB/s (35.2 ms)      0.005 ms (nothing faulted)
//	populate  2.69 GB/s (24.9 ms)      17.9 ms
//	hugepage  3.92 GB/s (17.1 ms)      8.3 ms
//	warm copy 8.46 GB/s (populate)     8.67 GB/s (hugepage)
//
// A Put copies into a slab faulted in long before, so its cost is the warm
// copy, and that is the same for both prefault modes. Hugepage is faster
// only in the one-time cost of creating a slab (about 2x). It depends on
// THP being enabled, and direct compaction can stall it under fragmentation.
// The default therefore stays PrefaultPopulate: its cost is paid once per
// slab, before any Put. docs/BENCHMARKS.md has the full figures. The issue
// that asked for this choice quoted 0.39 GB/s first-touch, 37 GB/s warm and
// 8.7 GB/s with MADV_HUGEPAGE from another measurement; the ranking here is
// the same. Re-measure on each new machine kind.
package hot
