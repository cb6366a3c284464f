// Package transport moves KV-cache bytes between gpucache peers: a small
// Transport interface, a TCP implementation that is real, an in-process Mem
// pair for tests, a NIXL/RDMA transport that refuses to open, and the
// Registry of registered slots the bytes travel from and into.
//
// # Registered slots
//
// RDMA can only move memory that is registered with the NIC, and
// registering is slow, so the Registry maps its slots once (one anonymous
// mapping, off the Go heap, at addresses that never move) and reuses them.
// Each slot carries a Binding (the peer or endpoint it is registered with)
// that survives Release, and Checkout prefers, in order: idle slots already
// bound to the caller's binding, unbound idle slots, then idle slots of
// other bindings, which it rebinds. Stats counts each kind (Reused, Bound,
// Rebound). Checkout is all-or-nothing and never hands out a slot that is
// checked out, quarantined or held.
//
// A slot is idle, out (in one live Stage) or quarantined; a lease hold is
// orthogonal. Holds block Checkout, Fence and Reclaim: a hold says "a peer
// or the NIC may still touch this memory". The transports hold a stage for
// the length of each Submit and Receive.
//
// Epochs fence stale work. Checkout under an epoch older than the
// registry's is refused. Fence(e) raises the epoch and reclaims every stage
// checked out under an older one, whole, unless one of its slots is held; a
// later Fence at the same epoch retries it. At math.MaxUint64 the epoch
// cannot advance: Advance returns ErrEpochOverflow and nothing changes.
// Invalidate is the harder fence of a GPU reset: every registration is void,
// so it advances the epoch and quarantines every live stage, held ones
// included, and unbinds the idle slots.
//
// # Ownership
//
// The goroutine that checks out a Stage owns it and ends it exactly once,
// with Release (slots back to idle, keeping their binding) or Quarantine.
// A stage also ends when a Fence reclaims it or when a transport quarantines
// it after a failed transfer. Ending an ended stage returns ErrStageEnded
// and changes nothing: slot generations make a stale Stage harmless, so
// `defer reg.Release(st)` is safe. Slot memory is valid only while the stage
// is live.
//
// Submit and Receive are synchronous and borrow the stage: when they
// return, the transport no longer touches slot memory. A failure before any
// slot byte moved leaves the stage with the caller. A failure after slot
// bytes began to move (a write cut mid-frame, a payload read cut short)
// quarantines the stage, returns an error wrapping ErrStageQuarantined, and
// breaks the TCP transport (ErrBroken from then on: the stream lost its
// framing). Quarantined slots come back only through Reclaim, which zeroes
// them and drops their binding. A transfer whose stage an Invalidate ended
// while it ran reports no delivery when it is done (ErrStageQuarantined):
// Submit returns no receipt, Receive leaves the bytes in the quarantined
// slots, and a Mem Receive copies nothing.
//
// # What a receipt promises
//
// A Receipt states facts about the code path that ran, never measurements:
// which transport carried the bytes, how many payload bytes, how many host
// copies (TCP: exactly one, the kernel's copy between slot memory and the
// socket, since writes are one writev of header plus slot slices and reads
// are io.ReadFull straight into slot memory; there is no user-space staging
// buffer), whether anything was posted for DMA (never, in this build), and
// whether a preferred RDMA path fell back.
//
// # TCP
//
// One frame per Submit, big-endian:
//
//	offset  size  field
//	0       1     type 0x53 ('S')
//	1       1     version 1
//	2       2     slot count n, 1..MaxStageSlots (64)
//	4       4     reserved, zero
//	8       8     stage epoch
//	16      4*n   valid length of each slot, each <= the receiver's SlotSize
//	16+4n   ...   the slots' valid bytes, in slot order, back to back
//
// A bad type, version, reserved word or count is ErrMalformed; a frame with
// more slots than the receiving stage, or a slot longer than its SlotSize,
// is ErrTooLarge. Both break the transport, since the stream cannot be
// resynchronized. At most TCPConfig.MaxInFlight Submits are admitted; the
// next blocks until one finishes or its ctx ends (backpressure). Writes and
// reads are serialized per direction, and every I/O has a deadline: ctx's,
// or IOTimeout if sooner; a cancelled ctx interrupts the I/O. A Receive
// whose deadline passes before any byte of a frame arrived leaves the
// transport usable.
//
// # Faults
//
// Every fault of a transfer is a miss (docs/FAILURES.md): no receipt, the
// stage quarantined or left with its owner, never a slot leaked, and a
// bounded time to the answer. One failpoint (package degrade) makes the
// link's fault happen in tests; production passes a nil registry.
//
//	nic_flap     TCPConfig.Faults, checked by TCP.Submit just before the
//	             frame goes out: half a frame is written, the link stays
//	             silent until the write deadline in Hang mode, and the
//	             connection is closed under the frame. The stage is
//	             quarantined, the transport broken, and the peer reads a
//	             cut frame and quarantines its own stage.
//
// The offload engine's failpoints, dpu_restart and gpu_reset, are on the
// DPU path: dpu.WithFaults (internal/dpu) wraps a Transport and acts on
// the stage's Registry (Quarantine, Invalidate).
//
// Bounded bounds each Submit by its budget and makes every failure wrap
// degrade.ErrMiss next to the transport's own sentinel.
//
// # Hardware honesty
//
// NIXL/RDMA exists here as an interface and a refusal. OpenNIXL returns an
// error wrapping ErrNotLinked, whose text ends in NOT_RUN_HARDWARE, with or
// without the rdma_nixl build tag; the tagged build only adds a probe for
// a device directory and reports what it saw. SubmitPreferringRDMA then
// falls back to TCP without posting anything, and its receipt says
// Fallback RdmaNotLinked, DMAPosted false, Label NOT_RUN_HARDWARE. Nothing
// in this package reports a latency, bandwidth or any other number for
// hardware that nothing here has measured.
package transport
