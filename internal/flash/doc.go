// Package flash is the local flash tier: a log-structured store of the
// blocks DRAM evicts, on local disk (NVMe), below the hot tier and above
// the cold one. It implements lower.Tier and passes lowertest.Run.
//
//	hot OnEvict ──► Evicted ──copy──► write buffer ──writer──► seg-…N.flash
//	DRAM miss   ──► Refill ──index──► one pread into the slot ──CRC──► hit
//	restart     ──► Open ──scan record headers──► index
//
// # Write path
//
// Evicted runs under the hot store's lock: it copies the payload into a
// buffer of its own, bounded in total by Config.WriteBuffer, and returns
// true, or declines (false, so the block goes to the next tier) when the
// tier is degraded, the buffer is full, the block is larger than a
// segment holds or than its tenant's quota, or its namespace's tenant is
// unknown (the tier learns tenants from Stored, Refill and its own
// records, at most 65536 namespaces). A block the tier already holds is
// taken without a write, so a block refilled from flash and evicted
// again costs nothing. A taken block is visible to Refill and Present at
// once (served from the buffer until it is written). The copy is made
// outside the tier's lock. One writer goroutine appends queued records to
// the open segment in gathering writes (pwritev, up to 8 MiB or 1024
// records, O_DIRECT straight from the buffers), syncs (fdatasync) when
// its queue empties or a Flush waits, and starts the next segment
// (sequence + 1) when a record does not fit.
//
// # Segment format (version 1)
//
// A segment is a file named seg-<16 lower-case hex digits of its
// sequence number>.flash. All integers are little endian; every record
// start and every payload start is a multiple of 4096, so a payload can
// be read with O_DIRECT straight into a DRAM slot.
//
// Segment header, one 4096-byte block at offset 0:
//
//	0   [8]  magic "GPCFLSEG"
//	8   u32  format version (1)
//	12  u32  alignment (4096)
//	16  u64  sequence number (the same as in the name)
//	24  u64  SegmentBytes when it was created (informational)
//	32  u32  CRC-32C of bytes [0, 32)
//	36  …    zero to 4096
//
// Then records, back to back. A record is a 4096-byte header block, then
// (for a block) the payload, zero-padded to a multiple of 4096:
//
//	0   [4]   magic "GCFR"
//	4   u16   format version (1)
//	6   u8    kind: 1 block, 2 tombstone
//	7   u8    tenant length (1..255 for a block)
//	8   [32]  namespace digest
//	40  [32]  block key
//	72  [32]  parent key (zero for a tombstone)
//	104 u32   token count (zero for a tombstone)
//	108 u32   reserved, zero
//	112 u64   payload length (zero for a tombstone)
//	120 u64   tombstone: the sequence number of the segment holding the
//	          record it kills (0: it was never on flash); zero for a block
//	128 u32   payload checksum (zero for a tombstone)
//	132 u32   reserved, zero
//	136 [255] tenant, zero padded
//	508 u32   header checksum: CRC-32C of bytes [0, 508)
//	512 …     zero to 4096 (not covered by the checksum)
//
// The payload checksum is CRC-32C over the identity fields, in this
// order: digest, key, parent, token count (u32), payload length (u64),
// tenant length (u8), tenant; and then the payload. A payload therefore
// never verifies under an identity other than the one it was written
// with: a read checks the identity the index holds (the one the caller
// asked for) against the bytes that arrived in the slot.
//
// A segment or record of another format version is refused (ErrVersion,
// with the file's path): such a segment is logged, counted
// (flash_segments_skipped), not counted against Capacity, never
// reclaimed and never deleted; its sequence number is not reused.
//
// # Crash contract
//
// A record that was written completely and verifies is served byte for
// byte; every other record is absent. Open scans the segments in
// sequence order reading record headers only, stops scanning a segment
// at the first header that does not verify or whose record passes the
// end of the file (a torn tail: the rest of that segment is ignored),
// applies later records and tombstones over earlier ones, and rebuilds
// the per-tenant live bytes. Payloads are verified when they are read:
// a payload that does not verify (torn, flipped, or read under another
// identity) is a miss, and the record leaves the index (flash_corrupt,
// flash_read_errors). A segment whose own header does not verify holds
// no records and is reclaimed in its turn. The highest segment is never
// appended to after a restart: writing starts a new one. Files in Dir
// that are not segments are logged once and left alone.
//
// What Flush (and Close) returned for is durable: the records are
// synced, and so is the directory entry of each new segment and each
// reclaimed one's removal.
//
// # Deletes and tombstones
//
// Whenever the tier itself drops a block it wrote (Delete, a Stored
// opaque key whose value may have changed, a tenant's quota, a record
// that did not read back), it appends a tombstone, so a restart agrees
// with the index. A tombstone kills the key's earlier records; a block
// written after it is live again. A tombstone protects its target
// segment's record only while that segment exists, so a segment holding
// a tombstone whose target still exists is not reclaimed (see Reclaim);
// a segment file lost by hand has its protecting tombstones written
// again. A block dropped while still queued never reaches flash.
//
// # Reclaim
//
// Segments are reclaimed whole, by the reclaimer goroutine, when the
// next segment would take the files past Capacity. With "oldest" the
// segment with the lowest sequence number goes; with "fewest-live" the
// sealed segment with the fewest live payload bytes (the oldest of
// equals) among those free to go: a segment is free to go when none of
// its tombstones targets a segment that still exists (the oldest segment
// is always free). Reclaiming offers each live block, read back and
// verified, to Config.OnReclaim (the daemon points it at the cold tier),
// then drops the segment's blocks from the index and deletes the file.
//
// Each tenant's live bytes are the payload bytes of its blocks; a tenant
// over its quota (Config.TenantQuotas, SetTenantQuotas) loses its own
// oldest blocks, never another tenant's.
//
// # Stored and opaque keys
//
// Stored of an opaque-key block the tier holds drops it with a tombstone
// (the new value may differ). A token-chain key names its bytes, so its
// copy on flash stays: Stored of it (a refill that enters DRAM again)
// costs nothing, and its next eviction is taken without a write. The
// daemon may call Stored on PUTs and on refills alike.
//
// # Faults
//
// A full disk (ENOSPC) or three write errors in a row degrade the tier:
// Evicted declines, reads of what is indexed still work, flash_degraded
// is 1, and it is counted and logged once. The reclaimer retries after
// Config.RetryAfter (Retry tries at once): a fresh segment that can be
// created and synced ends the degradation. The failpoint flash_io_error
// (degrade.FlashIOError) fails reads (a miss, counted) and writes (which
// degrade). A segment file deleted by hand is found by its link count
// (CheckSegments, every Config.CheckEvery and after a failed read): its
// blocks leave the index (flash_segments_lost), nothing is served from
// it.
package flash
