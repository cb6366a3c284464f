// Package cold is the cold tier's storage boundary: the Store interface
// (store.go), its in-memory and local-directory backends, and the key rules
// every backend shares. Packing, manifests, the sink and refill live in
// subpackages and reach storage only through Store.
//
// # The Store contract
//
//   - Put writes a whole object; no reader ever sees a partial one. With
//     PutOptions.IfNoneMatch the existence check and the write are one
//     atomic step and a taken key gives ErrExists, leaving the old object
//     untouched. A Put that returns an error may still have committed (the
//     acknowledgement can be lost): callers must not "undo" it with Delete.
//   - RangeGet fills exactly len(dst) bytes from offset off, straight into
//     the caller's buffer; a range past the end is ErrRange. An empty dst
//     checks only that the object exists and off <= size.
//   - Delete is idempotent: deleting a missing key succeeds.
//   - List visits keys with a prefix in byte-wise lexical order (S3's
//     order) and stops at the first error fn returns.
//   - Every method checks ctx. A canceled caller context yields an error
//     wrapping context.Canceled (or DeadlineExceeded), never a sentinel.
//   - Buffers: Put reads body only during the call, RangeGet writes dst
//     only during the call; no backend keeps either.
//   - Teer (optional, tee.go): RangeGetTee is RangeGet that also writes
//     each piece of dst (at most TeeChunk bytes) to a writer as soon as it
//     is in dst, so a caller checksums in the same pass. s3store, FS and
//     the degrade decorator implement it; cold.RangeGetTee falls back to
//     RangeGet and a Write for other stores.
//
// # Keys
//
// ValidKey: 1..MaxKeyLen bytes of UTF-8, "/"-separated non-empty segments,
// no "." or ".." segment, no leading or trailing "/", no control bytes.
// Invalid keys give ErrInvalidKey on every backend, before any I/O. A key
// should not also be a directory prefix of another key ("a" and "a/b"):
// fs and posix-backed S3 gateways cannot hold both, and reject the second
// Put with ErrInvalidKey. Digest-derived keys never collide this way.
//
// # Errors
//
// Backends wrap the sentinels in store.go with %w and context:
//
//	ErrNotFound     no such object
//	ErrExists       IfNoneMatch found the key taken
//	ErrRange        the range is outside the object
//	ErrInvalidKey   the key breaks ValidKey or a backend limit
//	ErrUnavailable  unreachable, timed out, 5xx, or a local I/O fault
//	                (ENOSPC, EIO); retrying may help. The cause stays
//	                wrapped: errors.Is(err, syscall.ENOSPC) works.
//	ErrCorrupt      bytes failed a checksum (raised above the Store)
//
// Callers treat ErrUnavailable on the read path as a clean miss.
//
// # Backends
//
//   - Mem (NewMem): a map, for tests, with fault injection before or after
//     an operation commits and per-operation call counters.
//   - FS (NewFS): a directory, the embedded default. Temp file + fsync +
//     rename/link + directory fsync; see FS for the layout.
//   - s3store.Store: any S3-compatible server; If-None-Match for
//     conditional Puts, ranged GETs, ListObjectsV2 pages.
//
// All three pass the behaviour suite in package coldtest.
//
// # Degrade
//
// WithDegrade wraps a Store in the cold tier's degrade boundary: each
// operation bounded by a budget, each failure a *degrade.Miss that keeps
// the backend's sentinel, and the failpoints the backend names
// (Degradable: FS storage_loss and nvme_timeout, s3store s3_unavailable and
// s3_slow) checked before each operation; an armed one fails it as
// ErrUnavailable without reaching the backend. The decorated store passes
// the coldtest suite too. docs/FAILURES.md lists every fault.
package cold
