package sink

import (
	"container/list"
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpucache/gpucache/internal/cold"
)

// MaxWriteAttempts bounds the charged attempts of one job over its whole life
// in the queue: a job that fails transiently this often while the store
// answers other writes moves to the failed queue. Attempts that fail while
// the store is down (see "Outages" in the package doc) are not charged.
const MaxWriteAttempts = 3

// outageStreak is how many attempts in a row, with no store answer between
// them, must fail transiently for a round to call the store down. Two: one
// failure alone may be the job's own (a timeout on a large object); a
// second, on another job, with nothing answered between them, is the store.
const outageStreak = 2

// MaxSinkJobs is the hard ceiling on jobs the sink holds (pending plus
// failed), whatever Config.MaxJobs says.
const MaxSinkJobs = 4096

// Defaults for Config's zero fields.
const (
	DefaultMaxJobs          = 1024
	DefaultMaxBytes   int64 = 1 << 30
	DefaultPutTimeout       = 30 * time.Second
	// DefaultMaxRetryBackoff caps the wait between probes of a store that
	// is down, when Config.RetryBackoff is set.
	DefaultMaxRetryBackoff = 30 * time.Second
)

// Config configures a Sink. The zero value is usable.
type Config struct {
	// MaxJobs bounds pending plus failed jobs. Default 1024; values above
	// MaxSinkJobs are clamped to it.
	MaxJobs int
	// MaxBytes bounds the Bytes of pending plus failed jobs. Default 1 GiB.
	// Ignored when Budget is set.
	MaxBytes int64
	// Budget, when set, is the byte budget the sink's jobs draw from,
	// shared with the caller (the cold tier counts the blocks it has copied
	// but not yet packed against the same budget). Its Max is then the
	// sink's MaxBytes. Default: a budget of MaxBytes of the sink's own.
	Budget *Budget
	// MaxRound bounds the jobs one Drain selects. Default 0: every job
	// pending when the drain starts.
	MaxRound int
	// PutTimeout is the deadline of each store call. Default 30s. A timeout
	// is a transient failure of the attempt.
	PutTimeout time.Duration
	// Verify is the pack-aware admission check, run after the sink's own
	// structural checks and before the job is queued. Default: none.
	Verify Verifier
	// Now stamps failures. Default time.Now.
	Now func() time.Time
	// RetryBackoff is the wait before the first probe of a store the sink
	// found down; each probe that fails doubles it, up to MaxRetryBackoff.
	// A Drain called sooner does nothing (Report.Deferred) unless it is a
	// DrainNow. Default 0: every Drain probes.
	RetryBackoff time.Duration
	// MaxRetryBackoff caps the wait between probes. Default
	// DefaultMaxRetryBackoff, or RetryBackoff if that is larger.
	MaxRetryBackoff time.Duration
	// Logger receives the store's state changes (writes failing, writes
	// recovered: once each), jobs given up, and, at Debug, each retry.
	// Default: discard.
	Logger *slog.Logger
}

// FailedJob is a job that failed terminally, as TakeFailed returns it.
type FailedJob struct {
	// Job is the sink's copy of the job; Job.ID is its ID.
	Job *Job
	// Attempts made, at most MaxWriteAttempts.
	Attempts int
	// Err is the error that ended it. It wraps ErrRetriesExhausted when the
	// job ran out of attempts; otherwise IsPermanent(Err) is true.
	Err error
	// Written counts the leading objects confirmed in the store. They, and
	// the next one if its PUT was ambiguous, may now be unreferenced: they
	// stay until an explicit, reference-safe reclaim (the sink never
	// deletes).
	Written  int
	FailedAt time.Time
}

// Stats is a snapshot of the sink's queue and counters.
type Stats struct {
	Pending int   // jobs queued for writing, including the one being written
	Writing int   // 0 or 1: a job whose write is in progress
	Failed  int   // jobs in the failed queue
	Jobs    int   // job credits in use: Pending + Failed
	Bytes   int64 // byte credits in use: the Bytes of pending and failed jobs

	MaxJobs  int   // effective limits after defaults and clamping
	MaxBytes int64 //

	Enqueued     uint64 // jobs admitted
	Rejected     uint64 // Enqueue calls refused with ErrInvalidJob
	RejectedFull uint64 // Enqueue calls refused with ErrFull
	Completed    uint64 // jobs fully written
	FailedTotal  uint64 // jobs moved to the failed queue
	Cancelled    uint64 // jobs removed by Cancel
	Attempts     uint64 // job write attempts started
	Retries      uint64 // attempts that failed transiently and left the job pending
	Interrupted  uint64 // attempts cut short by ctx or Close (not charged to the job)
	Drains       uint64 // Drain rounds run
	Uncharged    uint64 // transient failures not charged to their job: the store was down (part of Retries)
	Deferred     uint64 // Drain calls that did nothing: the store was down and its next probe not due

	// Degraded: the last round found the store down (attempts failing with
	// no store answer), and no write has been answered since.
	Degraded      bool
	DegradedSince time.Time // when Degraded last became true; zero if never
	Outages       uint64    // times the store was found down (healthy -> degraded)
	Recoveries    uint64    // times it answered again (degraded -> healthy)

	Puts               uint64 // store Put calls
	PutsExisting       uint64 // content-addressed Puts answered ErrExists and accepted (same key, same content)
	PointersSuperseded uint64 // pointer writes skipped because a later job had claimed the pointer

	// PendingPointers counts the distinct pointer keys of the pending
	// jobs: with one pointer per block, their blocks.
	PendingPointers int
}

// state is where an entry is in its life.
type state uint8

const (
	statePending state = iota // in its namespace queue, waiting for a drain
	stateWriting              // in its namespace queue, being written by the drain
	stateFailed               // in the failed queue
	stateGone                 // completed, cancelled or taken; in no queue
)

// entry is one held job.
type entry struct {
	job *Job // the sink's copy; immutable after admission
	id  JobID

	// Guarded by Sink.mu.
	state    state
	attempts int
	elem     *list.Element // in ns.jobs (pending, writing) or mu.failed (failed)
	ns       *nsQueue
	failed   FailedJob // set when state becomes stateFailed

	// written counts the leading objects confirmed in the store. Only the
	// drain that holds the drain token touches it (while the entry is
	// writing); Sink.mu's critical sections copy it from that goroutine.
	written int
}

// nsQueue is one namespace's FIFO of pending and writing entries.
type nsQueue struct {
	name string
	jobs list.List // of *entry
}

// pointerClaim tracks one pointer key named by pending jobs.
type pointerClaim struct {
	refs    int   // pending or writing jobs whose objects include the key
	claimed JobID // the largest job that has issued (or skipped past) a write to it
}

// Sink is an asynchronous, bounded, fair publication queue in front of a
// cold.Store. See the package doc for its states, accounting and ordering.
// All methods are safe for concurrent use.
type Sink struct {
	store      cold.Store
	verify     Verifier
	now        func() time.Time
	log        *slog.Logger
	maxJobs    int
	maxBytes   int64
	budget     *Budget
	maxRound   int
	putTimeout time.Duration
	backoff    time.Duration // 0: no deferral
	maxBackoff time.Duration

	// drainTok is a one-slot semaphore: whoever holds it is the only drain.
	// Close takes it for good.
	drainTok chan struct{}
	// ptrTok is a one-slot semaphore held across a pointer's claim and its
	// PUT, and by Retract: a retracted pointer is never written after
	// Retract returns (retract.go).
	ptrTok chan struct{}

	closeCtx    context.Context // cancelled by Close; interrupts a drain
	closeCancel context.CancelFunc
	closeOnce   sync.Once

	mu struct {
		sync.Mutex
		closed   bool
		nextID   JobID
		jobs     map[JobID]*entry    // every held entry: pending, writing, failed
		bytes    int64               // sum of Bytes over jobs
		pending  int                 // entries pending or writing
		writing  *entry              // the entry being written, if any
		ns       map[string]*nsQueue // namespaces with a pending or writing entry
		order    []*nsQueue          // the same namespaces, in round-robin order
		rr       int                 // index in order where the next round starts
		failed   list.List           // of *entry, in failure order
		pointers map[string]*pointerClaim

		// Store health (see "Outages" in the package doc).
		degraded      bool
		degradedSince time.Time
		probes        int       // failed probes since degraded: the backoff exponent
		nextProbe     time.Time // while degraded, a Drain before this is deferred

		enqueued, rejected, rejectedFull, completed, failedTotal, cancelled uint64
		attempts, retries, interrupted, drains, uncharged, deferred         uint64
		outages, recoveries                                                 uint64
	}

	// Counted by the drain without the lock.
	puts, putsExisting, superseded atomic.Uint64
}

// New returns a Sink writing to store.
func New(store cold.Store, cfg Config) (*Sink, error) {
	if store == nil {
		return nil, fmt.Errorf("gpucache/sink: nil store")
	}
	if cfg.MaxJobs < 0 || cfg.MaxBytes < 0 || cfg.MaxRound < 0 || cfg.PutTimeout < 0 || cfg.RetryBackoff < 0 || cfg.MaxRetryBackoff < 0 {
		return nil, fmt.Errorf("gpucache/sink: negative limit in config (MaxJobs %d, MaxBytes %d, MaxRound %d, PutTimeout %v, RetryBackoff %v, MaxRetryBackoff %v)",
			cfg.MaxJobs, cfg.MaxBytes, cfg.MaxRound, cfg.PutTimeout, cfg.RetryBackoff, cfg.MaxRetryBackoff)
	}
	s := &Sink{
		store:      store,
		verify:     cfg.Verify,
		now:        cfg.Now,
		log:        cfg.Logger,
		maxJobs:    cfg.MaxJobs,
		maxBytes:   cfg.MaxBytes,
		budget:     cfg.Budget,
		maxRound:   cfg.MaxRound,
		putTimeout: cfg.PutTimeout,
		backoff:    cfg.RetryBackoff,
		maxBackoff: cfg.MaxRetryBackoff,
		drainTok:   make(chan struct{}, 1),
		ptrTok:     make(chan struct{}, 1),
	}
	if s.maxJobs == 0 {
		s.maxJobs = DefaultMaxJobs
	}
	s.maxJobs = min(s.maxJobs, MaxSinkJobs)
	if s.maxBytes == 0 {
		s.maxBytes = DefaultMaxBytes
	}
	if s.budget != nil {
		s.maxBytes = s.budget.Max()
	} else {
		s.budget = &Budget{max: s.maxBytes}
	}
	if s.maxBackoff == 0 {
		s.maxBackoff = max(DefaultMaxRetryBackoff, s.backoff)
	}
	if s.putTimeout == 0 {
		s.putTimeout = DefaultPutTimeout
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.closeCtx, s.closeCancel = context.WithCancel(context.Background())
	s.mu.jobs = make(map[JobID]*entry)
	s.mu.ns = make(map[string]*nsQueue)
	s.mu.pointers = make(map[string]*pointerClaim)
	return s, nil
}

// Enqueue admits a job and queues it for the next Drain. It does no I/O.
//
// The sink copies the Job and its Objects slice, not the bodies: the caller
// keeps ownership of the body bytes and must not modify them afterwards.
// Admission runs the structural checks (kinds in order, valid unique keys,
// Digest == SHA-256(Body), content-addressed keys contain that digest,
// Bytes == sum of bodies, Bytes <= MaxBytes) and then Config.Verify on the
// sink's copy; a job failing either is refused with ErrInvalidJob before
// anything is written. The checks hash every body on the caller's
// goroutine, outside the sink's lock. A job that would take pending plus
// failed jobs over MaxJobs, or its Bytes over what the budget has left, is
// refused with ErrFull.
func (s *Sink) Enqueue(j *Job) (JobID, error) { return s.enqueue(j, false) }

// EnqueuePaid is Enqueue for a caller that has already taken j.Bytes from
// the sink's Budget (Config.Budget): the sink takes nothing more and, once
// the job is admitted, owns those bytes and gives them back when the job
// leaves. On an error the bytes are still the caller's to give back. It
// lets a caller move bytes it holds into the queue without a moment in
// which another holder could take them.
func (s *Sink) EnqueuePaid(j *Job) (JobID, error) { return s.enqueue(j, true) }

func (s *Sink) enqueue(j *Job, paid bool) (JobID, error) {
	if s.closeCtx.Err() != nil {
		return 0, ErrClosed
	}
	if j != nil {
		j = cloneJob(j)
	}
	err := checkJob(j, s.maxBytes)
	if err == nil && s.verify != nil {
		if verr := s.verify(j); verr != nil {
			err = fmt.Errorf("%w: verifier: %w", ErrInvalidJob, verr)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.closed {
		return 0, ErrClosed
	}
	if err != nil {
		s.mu.rejected++
		return 0, err
	}
	if len(s.mu.jobs)+1 > s.maxJobs || (!paid && !s.budget.TryTake(j.Bytes)) {
		s.mu.rejectedFull++
		return 0, fmt.Errorf("%w: holding %d jobs (max %d) and %d bytes (budget %d of %d bytes in use); job has %d bytes",
			ErrFull, len(s.mu.jobs), s.maxJobs, s.mu.bytes, s.budget.Used(), s.maxBytes, j.Bytes)
	}
	s.mu.nextID++
	j.ID = s.mu.nextID
	e := &entry{job: j, id: j.ID}
	s.mu.jobs[e.id] = e
	s.mu.bytes += j.Bytes
	s.mu.pending++
	s.mu.enqueued++
	q := s.mu.ns[j.Namespace]
	if q == nil {
		q = &nsQueue{name: j.Namespace}
		s.mu.ns[j.Namespace] = q
		s.mu.order = append(s.mu.order, q)
	}
	e.ns = q
	e.elem = q.jobs.PushBack(e)
	for i := range j.Objects {
		if o := &j.Objects[i]; o.Kind == KindPointer {
			p := s.mu.pointers[o.Key]
			if p == nil {
				p = &pointerClaim{}
				s.mu.pointers[o.Key] = p
			}
			p.refs++
		}
	}
	return e.id, nil
}

// Cancel removes a pending or failed job and releases its credits exactly.
// It returns false for a job being written right now (it finishes its
// attempt), and for an unknown, completed or already removed job.
func (s *Sink) Cancel(id JobID) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.mu.jobs[id]
	return e != nil && s.cancelLocked(e)
}

// cancelLocked removes e if it is pending or failed, releasing its credits
// exactly; a job being written (or done) stays. s.mu must be held.
func (s *Sink) cancelLocked(e *entry) bool {
	switch e.state {
	case statePending:
		s.leaveQueueLocked(e)
	case stateFailed:
		s.mu.failed.Remove(e.elem)
	default:
		return false
	}
	s.releaseLocked(e)
	s.mu.cancelled++
	return true
}

// TakeFailed removes and returns every job in the failed queue, oldest
// failure first, releasing their credits exactly. The jobs are not retried
// unless the caller enqueues them again.
func (s *Sink) TakeFailed() []FailedJob {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.failed.Len() == 0 {
		return nil
	}
	out := make([]FailedJob, 0, s.mu.failed.Len())
	for el := s.mu.failed.Front(); el != nil; el = el.Next() {
		e := el.Value.(*entry)
		out = append(out, e.failed)
		s.releaseLocked(e)
	}
	s.mu.failed.Init()
	return out
}

// Stats returns a snapshot of the queue and counters.
func (s *Sink) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := Stats{
		Pending:      s.mu.pending,
		Failed:       s.mu.failed.Len(),
		Jobs:         len(s.mu.jobs),
		Bytes:        s.mu.bytes,
		MaxJobs:      s.maxJobs,
		MaxBytes:     s.maxBytes,
		Enqueued:     s.mu.enqueued,
		Rejected:     s.mu.rejected,
		RejectedFull: s.mu.rejectedFull,
		Completed:    s.mu.completed,
		FailedTotal:  s.mu.failedTotal,
		Cancelled:    s.mu.cancelled,
		Attempts:     s.mu.attempts,
		Retries:      s.mu.retries,
		Interrupted:  s.mu.interrupted,
		Drains:       s.mu.drains,
		Uncharged:    s.mu.uncharged,
		Deferred:     s.mu.deferred,

		Degraded:      s.mu.degraded,
		DegradedSince: s.mu.degradedSince,
		Outages:       s.mu.outages,
		Recoveries:    s.mu.recoveries,

		Puts:               s.puts.Load(),
		PutsExisting:       s.putsExisting.Load(),
		PointersSuperseded: s.superseded.Load(),
	}
	st.PendingPointers = len(s.mu.pointers)
	if s.mu.writing != nil {
		st.Writing = 1
	}
	return st
}

// Done is closed when Close starts.
func (s *Sink) Done() <-chan struct{} { return s.closeCtx.Done() }

// Close stops the sink: Enqueue and Drain return ErrClosed from now on, an
// in-flight Drain is interrupted (its current store call sees a cancelled
// context; the job stays pending and is not charged the attempt), and Close
// waits for that Drain to return, so no sink goroutine touches the store
// afterwards. Close does not flush: Drain before Close to publish. Jobs still
// held stay visible through Stats, and TakeFailed and Cancel keep working.
// Close is idempotent and returns nil.
func (s *Sink) Close() error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.mu.closed = true
		s.mu.Unlock()
		s.closeCancel()
		s.drainTok <- struct{}{} // wait out a running drain; never given back
	})
	return nil
}

// Run drains every interval until ctx ends (returning ctx.Err()) or the sink
// is closed (returning ErrClosed). It starts no goroutine of its own; run it
// in one. Drain errors are logged, not returned: the jobs stay queued or
// failed, and Stats and TakeFailed expose them.
func (s *Sink) Run(ctx context.Context, interval time.Duration) error {
	if interval <= 0 {
		return fmt.Errorf("gpucache/sink: Run interval %v is not positive", interval)
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-s.closeCtx.Done():
			return ErrClosed
		case <-t.C:
			// The store's state changes and failed jobs are logged where
			// they happen, once each; a round's error adds nothing.
			rep := s.DrainReport(ctx)
			if rep.Err != nil && ctx.Err() == nil && s.closeCtx.Err() == nil {
				s.log.Debug("gpucache/sink: drain", "attempted", rep.Attempted, "completed", rep.Completed,
					"retried", rep.Retried, "failed", rep.Failed, "outage", rep.Outage, "err", rep.Err)
			}
		}
	}
}

// leaveQueueLocked takes a pending or writing entry out of its namespace
// queue (dropping an emptied namespace from the round-robin order) and drops
// its pointer references. s.mu must be held.
func (s *Sink) leaveQueueLocked(e *entry) {
	q := e.ns
	q.jobs.Remove(e.elem)
	e.elem, e.ns = nil, nil
	s.mu.pending--
	if q.jobs.Len() == 0 {
		delete(s.mu.ns, q.name)
		for i, o := range s.mu.order {
			if o == q {
				s.mu.order = append(s.mu.order[:i], s.mu.order[i+1:]...)
				if i < s.mu.rr {
					s.mu.rr--
				}
				break
			}
		}
	}
	for i := range e.job.Objects {
		if o := &e.job.Objects[i]; o.Kind == KindPointer {
			p := s.mu.pointers[o.Key]
			if p.refs--; p.refs == 0 {
				delete(s.mu.pointers, o.Key)
			}
		}
	}
}

// releaseLocked forgets an entry that is in no queue and returns its job
// and byte credits. s.mu must be held.
func (s *Sink) releaseLocked(e *entry) {
	delete(s.mu.jobs, e.id)
	s.mu.bytes -= e.job.Bytes
	s.budget.Give(e.job.Bytes)
	e.state = stateGone
	e.elem = nil
}
