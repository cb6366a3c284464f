// Package sink publishes packs to the cold tier asynchronously: the hot path
// enqueues a Job (pack objects, manifests, pointers as plain bytes) and a
// drain loop writes it to a cold.Store. A store that denies one job, or is
// down for a while, must neither block healthy jobs nor grow the queue
// without bound, and a lost acknowledgement must never make the sink delete
// something a reader may already see.
//
// # Admission
//
// Enqueue checks a job before it is queued, so a forged or inconsistent job
// is refused with ErrInvalidJob and nothing is written:
//
//   - 1 to MaxJobObjects objects, kinds in the order pack, manifest,
//     pointer, with at least one pack and one manifest;
//   - every key valid by cold.ValidKey and unique in the job, so a key some
//     backend would refuse fails at admission, not halfway through a job;
//   - Digest == SHA-256(Body) for every object;
//   - every pack and manifest key contains the lower-case hex of that digest
//     (pointer keys are the names readers look up, so they cannot);
//   - Bytes == the sum of the body lengths, and at most MaxBytes;
//   - then Config.Verify, the pack-aware check (manifest/object pairing,
//     ranges, identities, checksums) supplied by the daemon.
//
// The sink keeps its own copy of the Job and Objects slice. Bodies are
// shared with the caller, who must not change them; each body is hashed again
// just before its PUT, and a changed one fails the job with cold.ErrCorrupt
// instead of publishing bytes its key does not name.
//
// # Queue states
//
//	Enqueue ──▶ pending ── selected by a drain ──▶ writing
//	writing ── all objects written ─────────────▶ gone (completed)
//	writing ── transient error, store down ──────▶ pending (attempt not charged)
//	writing ── transient error, attempts < 3 ────▶ pending (back of its namespace)
//	writing ── transient error, 3rd attempt ─────▶ failed (ErrRetriesExhausted)
//	writing ── permanent error (IsPermanent) ────▶ failed
//	writing ── ctx ended or Close ───────────────▶ pending (attempt not charged)
//	pending, failed ── Cancel ───────────────────▶ gone
//	failed ── TakeFailed ────────────────────────▶ gone (returned to the caller)
//
// A job is charged at most MaxWriteAttempts (3) attempts over its whole
// life; attempts made while the store is down are not charged (see
// Outages), so an outage, however long, moves no job to the failed queue.
// Failed jobs are never retried automatically; TakeFailed hands them back,
// isolated from each other and from the pending queue, and the caller may
// enqueue one again as a new job. A writing job cannot be cancelled: its
// current store call decides its fate.
//
// # Outages
//
// A transient error (cold.ErrUnavailable, a timeout) is either the job's
// own (a large object that timed out) or the store's (it is down). The sink
// tells them apart by what the store does around it. A store call is
// answered when it succeeds or fails with an error that is not transient
// (ErrExists, access denied). In a round:
//
//   - a transient failure is charged to its job when a call of the same
//     round is answered, before or after it: the store works, the job does
//     not;
//   - outageStreak (2) attempts in a row failing transiently with no answer
//     between them, or a round whose only failures are transient and in
//     which nothing was answered, find the store down: those attempts are
//     not charged, the round stops (its other jobs stay pending, skipped),
//     and the sink is degraded (Stats.Degraded).
//
// While degraded, and Config.RetryBackoff is set, a Drain does nothing
// (Report.Deferred) until the next probe is due: RetryBackoff after the
// store was found down, doubling with each probe that finds it still down,
// up to MaxRetryBackoff. A probe is an ordinary round, so it costs at most
// outageStreak store calls. The first answered call ends the outage: the
// sink is healthy again and the same round writes on. DrainNow probes at
// once (a final flush, a spill). The change to degraded and the recovery
// are logged once each (Warn, Info); single retries only at Debug.
//
// A job that fails transiently whenever it is tried, alone, thus stays
// pending, uncharged, while nothing else is written; it is charged as soon
// as other jobs are written in its rounds. What an outage can pin is
// bounded by the byte and job limits below.
//
// # Accounting
//
// Every held job, pending, writing or failed, holds one job credit and
// Job.Bytes byte credits. Enqueue refuses with ErrFull when the new job would
// take the totals over Config.MaxJobs or the byte budget, so a failed queue
// nobody empties turns into backpressure rather than memory growth. Credits
// are returned exactly once, when a job leaves the sink: on completion,
// Cancel or TakeFailed. MaxJobs is clamped to MaxSinkJobs (4096) whatever the
// configuration, and MaxJobObjects bounds the metadata of each job.
//
// The byte credits come from a Budget: the sink's own, of Config.MaxBytes,
// or Config.Budget, shared with the caller, so that one bound covers the
// caller's bytes and the sink's. EnqueuePaid admits a job whose bytes the
// caller has already taken from that budget (the cold tier moves the bytes
// it reserved for evicted blocks onto their pack).
//
// # Rounds and fairness
//
// Drain works in rounds. A round snapshots the pending jobs when it starts,
// so jobs enqueued during it wait for the next one and a drain always ends.
// The snapshot is ordered round-robin across namespaces: the first job of
// every namespace, then the second of every namespace, and so on, starting
// one namespace further on each round, and cut at Config.MaxRound when that
// is set. One namespace's backlog therefore delays another namespace's next
// job by at most one job per namespace, and a job that failed transiently
// goes to the back of its namespace. Every selected job is attempted at most
// once; a job's error does not end the round, and completed jobs stay
// completed, but a round that finds the store down stops there (see
// Outages). Drain returns the first error of the round, DrainReport counts
// everything.
// Drains are serialized by a one-slot semaphore: a second Drain waits for the
// first (or for its own ctx, or Close). Within a round jobs are written one at
// a time.
//
// # Ordering within a job
//
// A job's objects are written strictly in order, each only after the previous
// one is confirmed: pack objects, then manifests, then pointers. A manifest is
// thus never visible before the objects it references, and a pointer never
// before its manifest. A retry resumes at the first unconfirmed object.
//
// # No speculative delete
//
// A PUT that returns an error may still have taken effect: the
// acknowledgement can be lost after the store committed. Deleting the object
// "to clean up" could remove a manifest a reader already sees, or the pack
// such a manifest references. So the sink never calls Delete. On retry it
// writes the same content-addressed key again with IfNoneMatch: the key names
// the content, so cold.ErrExists means the bytes are already there and counts
// as success (after a Head confirms the size; a different size is
// cold.ErrCorrupt). A job that fails for good may leave objects nothing
// references (FailedJob.Written says how many are confirmed); they go only by
// a later explicit, reference-safe reclaim, which is not this package's job.
//
// # Pointer order
//
// Different packs have different content-addressed keys, so retries in one
// namespace can never overwrite another pack's objects or manifest. Pointers
// are the exception: two jobs may name the same pointer key, and an older
// job's late retry must not move the pointer back. Job IDs grow with Enqueue
// order, and for every pointer key named by a pending job the sink remembers
// the largest job that has claimed it. A job claims the pointer just before
// its PUT (before, because an ambiguous PUT may have landed) and skips the
// write, counting it in Stats.PointersSuperseded, when a later job has
// claimed it already. Pointer writes to one key are therefore issued in
// increasing job order. A skipped pointer stays at the later job's value, or,
// if that job failed before its write landed, at an older value: a stale
// pointer is a cache miss, never a regression. The claim is local to one
// Sink; two sinks must not publish the same pointer keys.
//
// # Lifecycle
//
// Close interrupts a running drain (the job being written goes back to
// pending without being charged), waits for it to return, and makes Enqueue
// and Drain return ErrClosed. Run drains on a ticker until its ctx ends or
// the sink closes. Each store call gets Config.PutTimeout; a timeout is a
// transient failure.
package sink
