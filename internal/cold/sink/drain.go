package sink

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"

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
// round stops early only when ctx ends or the sink closes, leaving the
// unprocessed jobs pending.
//
// Drains are serialized: a second concurrent call waits for the first to
// return (or for its own ctx to end, returning ctx's error, or for Close,
// returning ErrClosed).
func (s *Sink) DrainReport(ctx context.Context) Report {
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
	s.mu.drains++
	round := s.selectRoundLocked()
	s.mu.Unlock()

	rep := Report{Selected: len(round)}
	var firstErr error
	for i, e := range round {
		if ctx.Err() != nil {
			rep.Skipped += len(round) - i
			break
		}
		if !s.begin(e) {
			rep.Skipped++ // cancelled since the snapshot
			continue
		}
		rep.Attempted++
		err := s.write(ctx, e)
		if err = s.finish(ctx, e, err, &rep); err != nil && firstErr == nil {
			firstErr = err
		}
	}
	rep.Err = firstErr
	if rep.Err == nil && ctx.Err() != nil {
		rep.Err = context.Cause(ctx)
	}
	rep.Remaining = s.pendingCount()
	return rep
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
func (s *Sink) write(ctx context.Context, e *entry) error {
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
		if o.Kind == KindPointer && !s.claimPointer(o.Key, e.id) {
			s.superseded.Add(1)
			e.written++
			continue
		}
		if err := s.put(ctx, o); err != nil {
			return fmt.Errorf("job %d: put %v %q: %w", e.id, o.Kind, o.Key, err)
		}
		e.written++
	}
	return nil
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
func (s *Sink) put(ctx context.Context, o *Object) error {
	ctx, cancel := context.WithTimeout(ctx, s.putTimeout)
	defer cancel()
	opts := cold.PutOptions{IfNoneMatch: o.Kind.contentAddressed()}
	s.puts.Add(1)
	err := s.store.Put(ctx, o.Key, o.Body, opts)
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

// finish files the outcome of one attempt and returns the job error to
// report (nil for success or interruption).
func (s *Sink) finish(ctx context.Context, e *entry, err error, rep *Report) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mu.writing = nil
	switch {
	case err == nil:
		s.leaveQueueLocked(e)
		s.releaseLocked(e)
		s.mu.completed++
		rep.Completed++
		return nil

	case ctx.Err() != nil && !IsPermanent(err):
		// Our side gave up (ctx or Close), not the store: no charge.
		e.state = statePending
		e.attempts--
		s.mu.interrupted++
		rep.Interrupted++
		return nil

	case !IsPermanent(err) && e.attempts < MaxWriteAttempts:
		e.state = statePending
		e.ns.jobs.MoveToBack(e.elem) // its namespace's other jobs go first next round
		s.mu.retries++
		rep.Retried++
		s.log.Info("gpucache/sink: write failed, will retry", "job", e.id, "namespace", e.job.Namespace,
			"attempt", e.attempts, "err", err)
		return err
	}

	if !IsPermanent(err) {
		err = fmt.Errorf("%w (%d attempts): %w", ErrRetriesExhausted, e.attempts, err)
	}
	s.leaveQueueLocked(e)
	e.state = stateFailed
	e.failed = FailedJob{Job: e.job, Attempts: e.attempts, Err: err, Written: e.written, FailedAt: s.now()}
	e.elem = s.mu.failed.PushBack(e)
	s.mu.failedTotal++
	rep.Failed++
	s.log.Warn("gpucache/sink: job failed", "job", e.id, "namespace", e.job.Namespace,
		"attempts", e.attempts, "written", e.written, "err", err)
	return err
}
