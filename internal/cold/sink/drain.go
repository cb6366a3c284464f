package sink

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/gpucache/gpucache/internal/cold"
)

// Report is what one Drain round did. Attempted == Completed + Retried +
// Failed + Interrupted, and Selected == Attempted + Skipped.
type Report struct {
	// Selected is the size of the round: the snapshot of pending jobs taken
	// when the drain started (at most Config.MaxRound when that is set).
	Selected int
	// Attempted counts selected jobs whose write was started.
	Attempted int
	// Completed counts jobs fully written this round.
	Completed int
	// Retried counts jobs that failed transiently with attempts left: they
	// are pending again and a later Drain retries them.
	Retried int
	// Failed counts jobs moved to the failed queue this round (a permanent
	// error, or the last allowed attempt failed).
	Failed int
	// Interrupted counts attempts cut short because ctx ended or the sink
	// closed. The job is pending again and the attempt is not charged.
	Interrupted int
	// Skipped counts selected jobs not attempted: cancelled before their
	// turn, or left because ctx ended or the sink closed. They stay as they
	// were (pending, unless cancelled).
	Skipped int
	// Remaining is the number of pending jobs when the drain returned:
	// retries, jobs outside the round, jobs enqueued during the drain.
	Remaining int
	// Uncharged counts the Retried jobs whose failed attempt was not
	// charged because the round found the store down.
	Uncharged int
	// Outage: the round found the store down (transient failures with no
	// store answer, see "Outages" in the package doc) and stopped there.
	Outage bool
	// Deferred: the store is down and its next probe is not due
	// (Config.RetryBackoff), so the round did nothing.
	Deferred bool
	// Err is the first job error of the round. If there was none but the
	// round was cut short, it is the cause (ctx's error, or ErrClosed).
	Err error
}

// Drain runs one round (see DrainReport) and returns Report.Err.
func (s *Sink) Drain(ctx context.Context) error {
	return s.DrainReport(ctx).Err
}

// DrainReport runs one round and says what it did.
//
// A round takes a snapshot of the pending jobs when it starts, ordered
// round-robin across namespaces (FIFO within one, starting one namespace
// further on each round) and cut at Config.MaxRound. It then writes the
// selected jobs one at a time, each attempted at most once; jobs enqueued
// meanwhile wait for the next round. A job error does not stop the round:
// later jobs are still attempted and completed jobs stay completed. The
// round stops early when ctx ends or the sink closes, and when it finds the
// store down (see "Outages" in the package doc), leaving the unprocessed
// jobs pending. While the store is down and Config.RetryBackoff is set, a
// round before the next probe is due does nothing (Report.Deferred).
//
// Drains are serialized: a second concurrent call waits for the first to
// return (or for its own ctx to end, returning ctx's error, or for Close,
// returning ErrClosed).
func (s *Sink) DrainReport(ctx context.Context) Report { return s.drain(ctx, false) }

// DrainNow is DrainReport without the probe backoff: a store found down is
// probed at once. For callers that must try now (a final flush before
// shutdown, a spill); the periodic drain uses DrainReport.
func (s *Sink) DrainNow(ctx context.Context) Report { return s.drain(ctx, true) }

// round is the state of one drain round: the attempts since the last store
// answer, whose charge is decided by what comes next.
type round struct {
	rep      *Report
	answered bool         // some store call of this round was answered
	streak   []streakItem // transient failures since the last answer, in order
	errs     []error      // each attempt's error, in attempt order
	events   []event      // state changes to log once the lock is released
}

type streakItem struct {
	e   *entry
	err int // index in round.errs
}

// event is a state change of the store's health or a job given up, logged
// outside the sink's lock.
type event struct {
	level slog.Level
	msg   string
	attrs []any
}

func (s *Sink) drain(ctx context.Context, now bool) Report {
	select {
	case s.drainTok <- struct{}{}:
	case <-ctx.Done():
		return Report{Err: ctx.Err(), Remaining: s.pendingCount()}
	case <-s.closeCtx.Done():
		return Report{Err: ErrClosed, Remaining: s.pendingCount()}
	}
	defer func() { <-s.drainTok }()
	if s.closeCtx.Err() != nil {
		return Report{Err: ErrClosed, Remaining: s.pendingCount()}
	}
	// The round's context ends with the caller's or with Close.
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := context.AfterFunc(s.closeCtx, func() { cancel(ErrClosed) })
	defer stop()

	s.mu.Lock()
	if !now && s.backingOffLocked() {
		s.mu.deferred++
		rep := Report{Deferred: true, Remaining: s.mu.pending}
		s.mu.Unlock()
		return rep
	}
	s.mu.drains++
	sel := s.selectRoundLocked()
	s.mu.Unlock()

	rep := Report{Selected: len(sel)}
	r := &round{rep: &rep}
	for i, e := range sel {
		if ctx.Err() != nil {
			rep.Skipped += len(sel) - i
			break
		}
		if !s.begin(e) {
			rep.Skipped++ // cancelled since the snapshot
			continue
		}
		rep.Attempted++
		var answered bool
		err := s.write(ctx, e, &answered)
		if s.finish(ctx, e, err, answered, r) {
			rep.Skipped += len(sel) - i - 1
			break
		}
	}
	s.mu.Lock()
	s.endRoundLocked(r)
	s.mu.Unlock()
	s.logEvents(r.events)
	rep.Err = firstErr(r.errs)
	if rep.Err == nil && ctx.Err() != nil {
		rep.Err = context.Cause(ctx)
	}
	rep.Remaining = s.pendingCount()
	return rep
}

// backingOffLocked reports whether the store is degraded and its next
// probe is not yet due: a drain that is not forced waits for it.
func (s *Sink) backingOffLocked() bool {
	return s.mu.degraded && s.backoff > 0 && s.now().Before(s.mu.nextProbe)
}

// firstErr returns the first non-nil error of errs.
func firstErr(errs []error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func (s *Sink) pendingCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mu.pending
}

// selectRoundLocked snapshots the round: the i-th job of every namespace,
// for i = 0, 1, ..., namespaces visited from s.mu.rr on, until the pending
// jobs or MaxRound run out. s.mu must be held.
func (s *Sink) selectRoundLocked() []*entry {
	n := len(s.mu.order)
	if n == 0 {
		return nil
	}
	limit := s.mu.pending
	if s.maxRound > 0 {
		limit = min(limit, s.maxRound)
	}
	start := s.mu.rr % n
	s.mu.rr = (start + 1) % n
	next := make([]*entry, n) // next[i]: the next candidate of namespace start+i
	for i := range n {
		next[i] = s.mu.order[(start+i)%n].jobs.Front().Value.(*entry)
	}
	round := make([]*entry, 0, limit)
	for len(round) < limit {
		took := false
		for i := 0; i < n && len(round) < limit; i++ {
			e := next[i]
			if e == nil {
				continue
			}
			round = append(round, e)
			took = true
			if el := e.elem.Next(); el != nil {
				next[i] = el.Value.(*entry)
			} else {
				next[i] = nil
			}
		}
		if !took {
			break
		}
	}
	return round
}

// begin moves a selected entry to writing and charges the attempt. It
// returns false if the entry is no longer pending (cancelled).
func (s *Sink) begin(e *entry) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e.state != statePending {
		return false
	}
	e.state = stateWriting
	e.attempts++
	s.mu.writing = e
	s.mu.attempts++
	return true
}

// write issues the job's remaining writes in order, resuming after the
// objects a previous attempt confirmed. It never deletes: see "No
// speculative delete" in the package doc.
// *answered is set when any store call of the attempt was answered (see
// put).
func (s *Sink) write(ctx context.Context, e *entry, answered *bool) error {
	objs := e.job.Objects
	for e.written < len(objs) {
		o := &objs[e.written]
		if err := ctx.Err(); err != nil {
			return err
		}
		// The caller owns the bodies; one changed since admission must not
		// be published under a key that names other bytes.
		if sha256.Sum256(o.Body) != o.Digest {
			return fmt.Errorf("job %d: %v %q: body changed after admission: %w", e.id, o.Kind, o.Key, cold.ErrCorrupt)
		}
		if o.Kind == KindPointer {
			skip, err := s.writePointer(ctx, e.id, o, answered)
			if err != nil {
				return fmt.Errorf("job %d: put %v %q: %w", e.id, o.Kind, o.Key, err)
			}
			if skip {
				s.superseded.Add(1)
			}
			e.written++
			continue
		}
		if err := s.put(ctx, o, answered); err != nil {
			return fmt.Errorf("job %d: put %v %q: %w", e.id, o.Kind, o.Key, err)
		}
		e.written++
	}
	return nil
}

// writePointer claims and writes one pointer while holding ptrTok, so a
// Retract either comes before the claim (the write is skipped) or waits
// for the PUT to end. skip reports a write skipped: a later job claimed
// the pointer, or it was retracted.
func (s *Sink) writePointer(ctx context.Context, id JobID, o *Object, answered *bool) (skip bool, err error) {
	select {
	case s.ptrTok <- struct{}{}:
	case <-ctx.Done():
		return false, ctx.Err()
	}
	defer func() { <-s.ptrTok }()
	if !s.claimPointer(o.Key, id) {
		return true, nil
	}
	return false, s.put(ctx, o, answered)
}

// claimPointer records that job id is about to write pointer key, and
// reports whether it may: false if a later job has already written (or
// tried to write) it, so an older job's retry never moves a pointer back.
// The claim is taken before the PUT, because an ambiguous PUT may have taken
// effect.
func (s *Sink) claimPointer(key string, id JobID) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.mu.pointers[key] // present: this pending job holds a reference
	if p.claimed > id {
		return false
	}
	p.claimed = id
	return true
}

// put writes one object. Content-addressed objects use IfNoneMatch, and
// ErrExists is success once Head confirms the size: the key names the
// content, so the object there is this object, whether an earlier ambiguous
// attempt of this job or another job wrote it.
//
// *answered is set when the store answered a call: it succeeded, or
// refused with an error that is not transient (IsPermanent, or ErrExists).
// A transient error (unavailable, a timeout) is no answer: it is what an
// outage looks like.
func (s *Sink) put(ctx context.Context, o *Object, answered *bool) error {
	ctx, cancel := context.WithTimeout(ctx, s.putTimeout)
	defer cancel()
	opts := cold.PutOptions{IfNoneMatch: o.Kind.contentAddressed()}
	s.puts.Add(1)
	err := s.store.Put(ctx, o.Key, o.Body, opts)
	if err == nil || IsPermanent(err) || errors.Is(err, cold.ErrExists) {
		*answered = true
	}
	if err == nil || !opts.IfNoneMatch || !errors.Is(err, cold.ErrExists) {
		return err
	}
	info, err := s.store.Head(ctx, o.Key)
	switch {
	case errors.Is(err, cold.ErrNotFound):
		// Gone between the two calls; the next attempt writes it again.
		return fmt.Errorf("%w: object existed on put, then not found", cold.ErrUnavailable)
	case err != nil:
		return fmt.Errorf("head after ErrExists: %w", err)
	case info.Size != int64(len(o.Body)):
		return fmt.Errorf("%w: existing object has %d bytes, body has %d", cold.ErrCorrupt, info.Size, len(o.Body))
	}
	s.putsExisting.Add(1)
	return nil
}

// finish files the outcome of one attempt and reports whether the round
// must stop because it found the store down.
//
// A success or a permanent failure is final at once. A transient failure
// leaves the job pending; whether the attempt is charged waits for what
// the store does next (see "Outages" in the package doc): an answer in the
// same round charges it, outageStreak unanswered failures in a row find
// the store down and refund it.
func (s *Sink) finish(ctx context.Context, e *entry, err error, answered bool, r *round) (stop bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mu.writing = nil
	if answered {
		s.answeredLocked(r)
	}
	idx := len(r.errs)
	r.errs = append(r.errs, err)
	switch {
	case err == nil:
		s.leaveQueueLocked(e)
		s.releaseLocked(e)
		s.mu.completed++
		r.rep.Completed++
		return false

	case ctx.Err() != nil && !IsPermanent(err):
		// Our side gave up (ctx or Close), not the store: no charge.
		e.state = statePending
		e.attempts--
		s.mu.interrupted++
		r.rep.Interrupted++
		r.errs[idx] = nil
		return false

	case IsPermanent(err):
		r.errs[idx] = s.failLocked(e, err, r)
		return false
	}

	e.state = statePending
	e.ns.jobs.MoveToBack(e.elem) // its namespace's other jobs go first next round
	s.mu.retries++
	r.rep.Retried++
	s.log.Debug("gpucache/sink: write failed, will retry", "job", e.id, "namespace", e.job.Namespace,
		"attempt", e.attempts, "err", err)
	if answered {
		// The store answered part of this attempt: the failure is charged.
		r.errs[idx] = s.chargeLocked(e, err, r)
		return false
	}
	r.streak = append(r.streak, streakItem{e: e, err: idx})
	if len(r.streak) >= outageStreak {
		s.outageLocked(r)
		return true
	}
	return false
}

// answeredLocked records a store answer: the transient failures before it
// in this round were the jobs' own and are charged, and a store that was
// down has recovered. s.mu must be held.
func (s *Sink) answeredLocked(r *round) {
	r.answered = true
	for _, it := range r.streak {
		r.errs[it.err] = s.chargeLocked(it.e, r.errs[it.err], r)
	}
	r.streak = r.streak[:0]
	if s.mu.degraded {
		s.mu.degraded = false
		s.mu.probes = 0
		s.mu.recoveries++
		r.events = append(r.events, event{slog.LevelInfo, "gpucache/sink: cold store writes recovered; write-behind resumed",
			[]any{"down_for", s.now().Sub(s.mu.degradedSince).Round(time.Millisecond), "pending_jobs", s.mu.pending,
				"pending_bytes", s.mu.bytes}})
	}
}

// chargeLocked keeps the charge of a transient failure: the job stays
// pending, or moves to the failed queue on its last allowed attempt. It
// returns the error to report. s.mu must be held.
func (s *Sink) chargeLocked(e *entry, err error, r *round) error {
	if e.state != statePending || e.attempts < MaxWriteAttempts {
		return err // pending with attempts left, or cancelled meanwhile
	}
	r.rep.Retried--
	s.mu.retries--
	err = fmt.Errorf("%w (%d attempts): %w", ErrRetriesExhausted, e.attempts, err)
	return s.failLocked(e, err, r)
}

// failLocked moves a pending or writing entry to the failed queue and
// returns err. s.mu must be held.
func (s *Sink) failLocked(e *entry, err error, r *round) error {
	s.leaveQueueLocked(e)
	e.state = stateFailed
	e.failed = FailedJob{Job: e.job, Attempts: e.attempts, Err: err, Written: e.written, FailedAt: s.now()}
	e.elem = s.mu.failed.PushBack(e)
	s.mu.failedTotal++
	r.rep.Failed++
	r.events = append(r.events, event{slog.LevelWarn, "gpucache/sink: job failed",
		[]any{"job", e.id, "namespace", e.job.Namespace, "attempts", e.attempts, "written", e.written, "err", err}})
	return err
}

// outageLocked ends a round that found the store down: the failures of the
// streak are refunded (the store, not the jobs, failed), the sink is
// degraded, and the next probe waits for the backoff. s.mu must be held.
func (s *Sink) outageLocked(r *round) {
	var last error
	for _, it := range r.streak {
		last = r.errs[it.err]
		if it.e.state == statePending {
			it.e.attempts--
		}
		s.mu.uncharged++
		r.rep.Uncharged++
	}
	r.streak = r.streak[:0]
	r.rep.Outage = true
	now := s.now()
	if !s.mu.degraded {
		s.mu.degraded = true
		s.mu.degradedSince = now
		s.mu.probes = 0
		s.mu.outages++
		r.events = append(r.events, event{slog.LevelWarn,
			"gpucache/sink: cold store writes failing; write-behind degraded: jobs stay queued and are retried when the store answers",
			[]any{"pending_jobs", s.mu.pending, "pending_bytes", s.mu.bytes, "err", last}})
	}
	s.mu.probes++
	if s.backoff > 0 {
		wait := s.maxBackoff
		if s.mu.probes <= 32 {
			wait = min(s.backoff<<(s.mu.probes-1), s.maxBackoff)
		}
		if wait <= 0 { // shifted past the sign
			wait = s.maxBackoff
		}
		s.mu.nextProbe = now.Add(wait)
	}
}

// endRoundLocked settles the transient failures left at the end of a
// round: charged if the store answered in this round, else the round found
// the store down. s.mu must be held.
func (s *Sink) endRoundLocked(r *round) {
	if len(r.streak) == 0 {
		return
	}
	if r.answered {
		for _, it := range r.streak {
			r.errs[it.err] = s.chargeLocked(it.e, r.errs[it.err], r)
		}
		r.streak = r.streak[:0]
		return
	}
	s.outageLocked(r)
}

func (s *Sink) logEvents(evs []event) {
	for _, ev := range evs {
		s.log.Log(context.Background(), ev.level, ev.msg, ev.attrs...)
	}
}
