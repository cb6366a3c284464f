package sink

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/gpucache/gpucache/internal/cold"
)

var bg = context.Background()

// A permanently denied job is isolated in the failed queue; the healthy job
// queued behind it, in the same namespace, publishes in the same drain.
func TestPermanentErrorThenHealthyJob(t *testing.T) {
	s, st := newTestSink(t, Config{})
	bad, good := mkJob("ns", "bad", "ptr/ns/bad"), mkJob("ns", "good", "ptr/ns/good")
	st.hook = failKey(packKey(bad), -1, fault{err: errDenied})
	badID := enqueue(t, s, bad)
	enqueue(t, s, good)

	rep := s.DrainReport(bg)
	wantReport(t, rep, Report{Selected: 2, Attempted: 2, Completed: 1, Failed: 1, Err: errDenied})
	requirePublished(t, st, good, true)

	// Later drains leave the failed job alone.
	wantReport(t, s.DrainReport(bg), Report{})
	if n := st.putsOf(packKey(bad)); n != 1 {
		t.Fatalf("bad pack put %d times, want 1", n)
	}
	if got := s.Stats(); got.Failed != 1 || got.Pending != 0 || got.Jobs != 1 || got.Bytes != bad.Bytes {
		t.Fatalf("stats %+v, want 1 failed job holding %d bytes", got, bad.Bytes)
	}

	failed := s.TakeFailed()
	if len(failed) != 1 {
		t.Fatalf("TakeFailed: %d jobs, want 1", len(failed))
	}
	f := failed[0]
	if f.Job.ID != badID || f.Attempts != 1 || f.Written != 0 || !errors.Is(f.Err, errDenied) || !IsPermanent(f.Err) {
		t.Fatalf("failed job %+v: want ID %d, 1 attempt, 0 written, access denied", f, badID)
	}
	if packKey(f.Job) != packKey(bad) {
		t.Fatalf("failed job is %q, want %q", packKey(f.Job), packKey(bad))
	}
	if got := s.Stats(); got.Jobs != 0 || got.Bytes != 0 {
		t.Fatalf("after TakeFailed: %d jobs, %d bytes held", got.Jobs, got.Bytes)
	}
	if s.TakeFailed() != nil {
		t.Fatal("second TakeFailed returned jobs")
	}
}

// A transiently failing job is attempted exactly once per drain while
// unrelated jobs (same and other namespaces) advance, and never more than
// MaxWriteAttempts times in all.
func TestTemporaryErrorRetriesBoundedFair(t *testing.T) {
	s, st := newTestSink(t, Config{})
	flaky := mkJob("a", "flaky")
	st.hook = failKey(packKey(flaky), -1, fault{err: fmt.Errorf("503: %w", cold.ErrUnavailable)})
	enqueue(t, s, flaky)

	for round := 1; round <= MaxWriteAttempts+2; round++ {
		same, other := mkJob("a", fmt.Sprint("same", round)), mkJob("b", fmt.Sprint("other", round))
		enqueue(t, s, same)
		enqueue(t, s, other)
		rep := s.DrainReport(bg)
		requirePublished(t, st, same, true)
		requirePublished(t, st, other, true)
		attempts := min(round, MaxWriteAttempts)
		if n := st.putsOf(packKey(flaky)); n != attempts {
			t.Fatalf("round %d: flaky pack put %d times, want %d", round, n, attempts)
		}
		switch {
		case round < MaxWriteAttempts:
			wantReport(t, rep, Report{Selected: 3, Attempted: 3, Completed: 2, Retried: 1, Remaining: 1, Err: cold.ErrUnavailable})
		case round == MaxWriteAttempts:
			wantReport(t, rep, Report{Selected: 3, Attempted: 3, Completed: 2, Failed: 1, Err: ErrRetriesExhausted})
		default:
			wantReport(t, rep, Report{Selected: 2, Attempted: 2, Completed: 2})
		}
	}
	if st := s.Stats(); st.Attempts != uint64(MaxWriteAttempts+2*(MaxWriteAttempts+2)) || st.Retries != MaxWriteAttempts-1 {
		t.Fatalf("stats %+v", st)
	}
}

// After MaxWriteAttempts transient failures while the store answers other
// jobs, the job is in the failed queue and stays there even once the store
// is healthy again.
func TestRetryExhaustionMovesToFailed(t *testing.T) {
	s, st := newTestSink(t, Config{})
	j := mkJob("ns", "j")
	st.hook = failKey(manifestKey(j), MaxWriteAttempts, fault{err: cold.ErrUnavailable})
	id := enqueue(t, s, j)

	for i := 1; i <= MaxWriteAttempts; i++ {
		other := mkJob("other", fmt.Sprint("other", i)) // answered in the same round: the failure is j's own
		enqueue(t, s, other)
		rep := s.DrainReport(bg)
		requirePublished(t, st, other, true)
		if i < MaxWriteAttempts {
			wantReport(t, rep, Report{Selected: 2, Attempted: 2, Completed: 1, Retried: 1, Remaining: 1, Err: cold.ErrUnavailable})
			continue
		}
		wantReport(t, rep, Report{Selected: 2, Attempted: 2, Completed: 1, Failed: 1, Err: ErrRetriesExhausted})
		if !errors.Is(rep.Err, cold.ErrUnavailable) {
			t.Fatalf("exhaustion error %v does not wrap the last store error", rep.Err)
		}
	}
	// The store recovered (the hook's budget is spent); nothing retries.
	for range 2 {
		wantReport(t, s.DrainReport(bg), Report{})
	}
	if n := st.putsOf(manifestKey(j)); n != MaxWriteAttempts {
		t.Fatalf("manifest put %d times, want %d", n, MaxWriteAttempts)
	}
	// The pack was confirmed on the first attempt and not rewritten.
	if n := st.putsOf(packKey(j)); n != 1 {
		t.Fatalf("pack put %d times, want 1 (retries resume after confirmed objects)", n)
	}
	f := s.TakeFailed()
	if len(f) != 1 || f[0].Job.ID != id || f[0].Attempts != MaxWriteAttempts || f[0].Written != 1 || !errors.Is(f[0].Err, ErrRetriesExhausted) {
		t.Fatalf("TakeFailed %+v", f)
	}
	if got := s.Stats(); got.Degraded || got.Outages != 0 || got.Uncharged != 0 {
		t.Fatalf("a job's own failures degraded the sink: %+v", got)
	}
}

// DrainReport counts a mixed round; Drain returns the first error only after
// the whole round ran, and completed jobs stay completed.
func TestPartialProgressAndReport(t *testing.T) {
	s, st := newTestSink(t, Config{})
	jobs := []*Job{mkJob("ns", "ok1"), mkJob("ns", "transient"), mkJob("ns", "denied"), mkJob("ns", "ok2"), mkJob("ns", "ok3")}
	errFlaky := fmt.Errorf("flaky: %w", cold.ErrUnavailable)
	transient := failKey(packKey(jobs[1]), 1, fault{err: errFlaky})
	denied := failKey(manifestKey(jobs[2]), -1, fault{err: errDenied})
	st.hook = func(ctx context.Context, op, key string) *fault {
		if f := transient(ctx, op, key); f != nil {
			return f
		}
		return denied(ctx, op, key)
	}
	for _, j := range jobs {
		enqueue(t, s, j)
	}

	err := s.Drain(bg)
	if !errors.Is(err, errFlaky) {
		t.Fatalf("Drain: %v, want the first error of the round (%v)", err, errFlaky)
	}
	for _, j := range []*Job{jobs[0], jobs[3], jobs[4]} {
		requirePublished(t, st, j, true)
	}
	got := s.Stats()
	if got.Completed != 3 || got.Retries != 1 || got.FailedTotal != 1 || got.Attempts != 5 || got.Pending != 1 || got.Failed != 1 {
		t.Fatalf("stats after round 1: %+v", got)
	}

	wantReport(t, s.DrainReport(bg), Report{Selected: 1, Attempted: 1, Completed: 1})
	for _, j := range []*Job{jobs[0], jobs[1], jobs[3], jobs[4]} {
		requirePublished(t, st, j, true)
	}
	// The denied job's pack was written and stays: no undo.
	requirePublished(t, st, &Job{Objects: jobs[2].Objects[:1]}, false)
}

// Pending and failed jobs share MaxJobs and MaxBytes; TakeFailed and Cancel
// return exactly the credit their jobs held; MaxJobs is clamped to
// MaxSinkJobs.
func TestSharedAccounting(t *testing.T) {
	t.Run("jobs", func(t *testing.T) {
		s, st := newTestSink(t, Config{MaxJobs: 3})
		st.hook = func(_ context.Context, op, key string) *fault {
			if op == "put" {
				return &fault{err: errDenied}
			}
			return nil
		}
		for i := range 3 {
			enqueue(t, s, mkJob("ns", fmt.Sprint(i)))
		}
		s.Drain(bg)
		if got := s.Stats(); got.Failed != 3 || got.Pending != 0 || got.Jobs != 3 {
			t.Fatalf("stats %+v, want 3 failed", got)
		}
		if _, err := s.Enqueue(mkJob("ns", "x")); !errors.Is(err, ErrFull) {
			t.Fatalf("Enqueue with 3 failed jobs held: %v, want ErrFull", err)
		}
		if len(s.TakeFailed()) != 3 {
			t.Fatal("TakeFailed")
		}
		for i := range 3 {
			enqueue(t, s, mkJob("ns", fmt.Sprint("again", i)))
		}
		if _, err := s.Enqueue(mkJob("ns", "y")); !errors.Is(err, ErrFull) {
			t.Fatalf("Enqueue with 3 pending: %v, want ErrFull", err)
		}
		if got := s.Stats(); got.RejectedFull != 2 {
			t.Fatalf("RejectedFull %d, want 2", got.RejectedFull)
		}
	})

	t.Run("bytes", func(t *testing.T) {
		failed, pending, next := mkJob("ns", "failed"), mkJob("ns", "pending"), mkJob("ns", "next")
		s, st := newTestSink(t, Config{MaxBytes: failed.Bytes + pending.Bytes + next.Bytes - 1})
		st.hook = failKey(packKey(failed), -1, fault{err: errDenied})
		failedID := enqueue(t, s, failed)
		s.Drain(bg) // failed -> failed queue
		enqueue(t, s, pending)
		if got := s.Stats(); got.Bytes != failed.Bytes+pending.Bytes || got.Jobs != 2 {
			t.Fatalf("stats %+v", got)
		}
		if _, err := s.Enqueue(next); !errors.Is(err, ErrFull) {
			t.Fatalf("Enqueue over MaxBytes: %v, want ErrFull", err)
		}
		if !s.Cancel(failedID) {
			t.Fatal("Cancel of a failed job returned false")
		}
		if got := s.Stats(); got.Bytes != pending.Bytes || got.Jobs != 1 || got.Failed != 0 {
			t.Fatalf("after Cancel: %+v, want exactly the pending job's credit", got)
		}
		enqueue(t, s, next)
		if got := s.Stats(); got.Bytes != pending.Bytes+next.Bytes {
			t.Fatalf("bytes %d, want %d", got.Bytes, pending.Bytes+next.Bytes)
		}
		s.Drain(bg)
		if got := s.Stats(); got.Bytes != 0 || got.Jobs != 0 {
			t.Fatalf("after completing everything: %+v", got)
		}
	})

	t.Run("job larger than MaxBytes", func(t *testing.T) {
		j := mkJob("ns", "big")
		s, _ := newTestSink(t, Config{MaxBytes: j.Bytes - 1})
		if _, err := s.Enqueue(j); !errors.Is(err, ErrInvalidJob) {
			t.Fatalf("Enqueue: %v, want ErrInvalidJob (it can never fit)", err)
		}
	})

	t.Run("clamp", func(t *testing.T) {
		s, _ := newTestSink(t, Config{MaxJobs: 1 << 20})
		if got := s.Stats().MaxJobs; got != MaxSinkJobs {
			t.Fatalf("MaxJobs %d, want clamp to %d", got, MaxSinkJobs)
		}
		for i := range MaxSinkJobs {
			if _, err := s.Enqueue(mkJob(fmt.Sprint("ns", i%7), fmt.Sprint(i))); err != nil {
				t.Fatalf("job %d: %v", i, err)
			}
		}
		if _, err := s.Enqueue(mkJob("ns", "one more")); !errors.Is(err, ErrFull) {
			t.Fatalf("job %d: %v, want ErrFull", MaxSinkJobs+1, err)
		}
	})

	t.Run("defaults", func(t *testing.T) {
		s, _ := newTestSink(t, Config{})
		if got := s.Stats(); got.MaxJobs != DefaultMaxJobs || got.MaxBytes != DefaultMaxBytes {
			t.Fatalf("limits %d jobs, %d bytes", got.MaxJobs, got.MaxBytes)
		}
	})
}

// A PUT that commits and then errors (lost acknowledgement) is retried by
// writing the same key again; ErrExists counts as success, nothing is ever
// deleted, and a visible manifest's pack is always present.
func TestAmbiguousPutCommitThenErrorNoSpeculativeDelete(t *testing.T) {
	for _, tc := range []struct {
		name   string
		target func(*Job) string
	}{
		{"pack", packKey},
		{"manifest", manifestKey},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, st := newTestSink(t, Config{})
			j := mkJob("ns", "j", "ptr/ns/j")
			st.hook = failKey(tc.target(j), 1, fault{err: fmt.Errorf("ack lost: %w", cold.ErrUnavailable), commit: true})
			enqueue(t, s, j)

			// A lost acknowledgement is no answer: when nothing else in the
			// round was answered (the pack is the job's first write) the
			// round reads as an outage and the attempt is not charged.
			want := Report{Selected: 1, Attempted: 1, Retried: 1, Remaining: 1, Err: cold.ErrUnavailable}
			if tc.name == "pack" {
				want.Uncharged, want.Outage = 1, true
			}
			wantReport(t, s.DrainReport(bg), want)
			if _, ok := st.get(tc.target(j)); !ok {
				t.Fatalf("the ambiguous PUT of %q did not commit", tc.target(j))
			}
			if _, ok := st.get(manifestKey(j)); ok {
				requirePublished(t, st, &Job{Objects: j.Objects[:1]}, false) // a visible manifest's pack is there
			}
			if _, ok := st.get("ptr/ns/j"); ok {
				t.Fatal("pointer written before its job's earlier objects were confirmed")
			}

			wantReport(t, s.DrainReport(bg), Report{Selected: 1, Attempted: 1, Completed: 1})
			requirePublished(t, st, j, true)
			if n := st.putsOf(tc.target(j)); n != 2 {
				t.Fatalf("%s put %d times, want 2 (the retry rewrites the same key)", tc.name, n)
			}
			if got := s.Stats(); got.PutsExisting != 1 {
				t.Fatalf("PutsExisting %d, want 1", got.PutsExisting)
			}
			for _, p := range st.putLog() {
				if want := p.key != "ptr/ns/j"; p.opts.IfNoneMatch != want {
					t.Fatalf("put %q with IfNoneMatch=%v, want %v", p.key, p.opts.IfNoneMatch, want)
				}
			}
		})
	}

	t.Run("manifest committed, then job fails terminally", func(t *testing.T) {
		s, st := newTestSink(t, Config{})
		j := mkJob("ns", "j", "ptr/ns/j")
		st.hook = failKey(manifestKey(j), 1, fault{err: errDenied, commit: true})
		enqueue(t, s, j)
		wantReport(t, s.DrainReport(bg), Report{Selected: 1, Attempted: 1, Failed: 1, Err: errDenied})
		// The manifest is visible, so its pack must stay: the sink deletes nothing.
		requirePublished(t, st, &Job{Objects: j.Objects[:2]}, false)
		f := s.TakeFailed()
		if len(f) != 1 || f[0].Written != 1 {
			t.Fatalf("TakeFailed %+v, want one job with the pack confirmed", f)
		}
		if _, ok := st.get("ptr/ns/j"); ok {
			t.Fatal("pointer written after its job failed")
		}
	})

	t.Run("existing key with another size is corrupt", func(t *testing.T) {
		s, st := newTestSink(t, Config{})
		j := mkJob("ns", "j")
		st.objs[packKey(j)] = []byte("short")
		enqueue(t, s, j)
		rep := s.DrainReport(bg)
		wantReport(t, rep, Report{Selected: 1, Attempted: 1, Failed: 1, Err: cold.ErrCorrupt})
		if string(st.objs[packKey(j)]) != "short" {
			t.Fatal("the existing object was overwritten")
		}
	})
}

// Two packs of one namespace: the older one's retry lands after the newer
// one published. Both packs survive, distinct, and the shared pointer is not
// moved back to the older manifest.
func TestRetryOrderingWithinNamespace(t *testing.T) {
	s, st := newTestSink(t, Config{})
	const ptr = "ptr/ns/latest"
	a, b := mkJob("ns", "A", ptr), mkJob("ns", "B", ptr)
	if packKey(a) == packKey(b) || manifestKey(a) == manifestKey(b) {
		t.Fatal("distinct packs got equal keys")
	}
	st.hook = failKey(packKey(a), 1, fault{err: cold.ErrUnavailable})
	enqueue(t, s, a)
	enqueue(t, s, b)

	wantReport(t, s.DrainReport(bg), Report{Selected: 2, Attempted: 2, Completed: 1, Retried: 1, Remaining: 1, Err: cold.ErrUnavailable})
	requirePublished(t, st, b, true)

	wantReport(t, s.DrainReport(bg), Report{Selected: 1, Attempted: 1, Completed: 1})
	requirePublished(t, st, a, false)
	requirePublished(t, st, b, true) // B's pack, manifest and pointer intact
	if got, _ := st.get(ptr); string(got) != manifestKey(b) {
		t.Fatalf("pointer names %q, want the later manifest %q", got, manifestKey(b))
	}
	if n := st.putsOf(ptr); n != 1 {
		t.Fatalf("pointer put %d times, want 1 (A's stale write skipped)", n)
	}
	if got := s.Stats(); got.PointersSuperseded != 1 {
		t.Fatalf("PointersSuperseded %d, want 1", got.PointersSuperseded)
	}
}

// Forged or inconsistent jobs are refused at Enqueue and nothing reaches the
// store.
func TestForgedJobRejectedBeforeWrite(t *testing.T) {
	errVerify := errors.New("verifier: manifest range outside pack")
	mutate := func(f func(j *Job)) *Job {
		j := mkJob("ns", "j", "ptr/ns/j")
		f(j)
		return j
	}
	cases := []struct {
		name string
		job  *Job
		want error
	}{
		{"nil job", nil, nil},
		{"no objects", &Job{Namespace: "ns"}, nil},
		{"key without digest", mutate(func(j *Job) { j.Objects[0].Key = "packs/ns/forged" }), nil},
		{"digest of other bytes", mutate(func(j *Job) { j.Objects[0].Digest[0] ^= 1 }), nil},
		{"body swapped", mutate(func(j *Job) { j.Objects[0].Body = []byte("pack ns/X") }), nil},
		{"manifest under pack's key", mutate(func(j *Job) { j.Objects[1].Key = "manifests/" + j.Objects[0].Key }), nil},
		{"pointer digest", mutate(func(j *Job) { j.Objects[2].Digest = j.Objects[1].Digest }), nil},
		{"bytes mismatch", mutate(func(j *Job) { j.Bytes++ }), nil},
		{"negative bytes", mutate(func(j *Job) { j.Bytes = -1 }), nil},
		{"empty key", mutate(func(j *Job) { j.Objects[2].Key = "" }), cold.ErrInvalidKey},
		{"dot-dot key", mutate(func(j *Job) { j.Objects[2].Key = "ptr/../x" }), cold.ErrInvalidKey},
		{"leading slash", mutate(func(j *Job) { j.Objects[2].Key = "/ptr" }), cold.ErrInvalidKey},
		{"control byte", mutate(func(j *Job) { j.Objects[2].Key = "ptr\n" }), cold.ErrInvalidKey},
		{"long key", mutate(func(j *Job) { j.Objects[0].Key += string(make([]byte, cold.MaxKeyLen)) }), cold.ErrInvalidKey},
		{"duplicate key", mutate(func(j *Job) { j.Objects = append(j.Objects, j.Objects[2]); j.Bytes += int64(len(j.Objects[2].Body)) }), nil},
		{"kind unset", mutate(func(j *Job) { j.Objects[0].Kind = 0 }), nil},
		{"manifest before pack", mutate(func(j *Job) { j.Objects[0], j.Objects[1] = j.Objects[1], j.Objects[0] }), nil},
		{"no manifest", mutate(func(j *Job) { j.Objects = j.Objects[:1]; j.Bytes = int64(len(j.Objects[0].Body)) }), nil},
		{"too many objects", mutate(func(j *Job) {
			for i := range MaxJobObjects {
				o := pointer(fmt.Sprint("ptr/many/", i), "m")
				j.Objects = append(j.Objects, o)
				j.Bytes += int64(len(o.Body))
			}
		}), nil},
		{"namespace too long", mutate(func(j *Job) { j.Namespace = string(make([]byte, MaxNamespaceLen+1)) }), nil},
		{"verifier", mutate(func(j *Job) { j.Namespace = "reject-me" }), errVerify},
	}
	var verified int
	s, st := newTestSink(t, Config{Verify: func(j *Job) error {
		verified++
		if j.Namespace == "reject-me" {
			return errVerify
		}
		return nil
	}})
	for _, tc := range cases {
		_, err := s.Enqueue(tc.job)
		if !errors.Is(err, ErrInvalidJob) || (tc.want != nil && !errors.Is(err, tc.want)) {
			t.Errorf("%s: Enqueue error %v, want ErrInvalidJob (and %v)", tc.name, err, tc.want)
		}
	}
	if verified != 1 {
		t.Errorf("Verifier ran %d times; it runs only on structurally valid jobs", verified)
	}
	if err := s.Drain(bg); err != nil {
		t.Fatal(err)
	}
	if n := st.count("put"); n != 0 {
		t.Fatalf("store saw %d Put calls, want 0", n)
	}
	if got := s.Stats(); got.Rejected != uint64(len(cases)) || got.Jobs != 0 || got.Bytes != 0 {
		t.Fatalf("stats %+v", got)
	}
}

// The caller changes a body after Enqueue: the write is refused as corrupt
// rather than publishing bytes the key does not name.
func TestBodyChangedAfterEnqueue(t *testing.T) {
	s, st := newTestSink(t, Config{})
	j := mkJob("ns", "j")
	enqueue(t, s, j)
	j.Objects[1].Body[0] ^= 0xff // the manifest body is shared with the sink
	rep := s.DrainReport(bg)
	wantReport(t, rep, Report{Selected: 1, Attempted: 1, Failed: 1, Err: cold.ErrCorrupt})
	if n := st.putsOf(manifestKey(j)); n != 0 {
		t.Fatalf("changed manifest put %d times", n)
	}
	// The caller's header edits after Enqueue do not reach the queue.
	j2 := mkJob("ns", "j2")
	enqueue(t, s, j2)
	j2.Objects[0].Key = "packs/elsewhere"
	s.Drain(bg)
	requirePublished(t, st, mkJob("ns", "j2"), true)
}

// Cancel releases pending and failed jobs exactly, cannot cancel the job
// being written, and a job cancelled after the round's snapshot is skipped.
func TestCancel(t *testing.T) {
	s, st := newTestSink(t, Config{})
	writing, victim, failed := mkJob("ns", "writing"), mkJob("ns", "victim"), mkJob("other", "failed")
	st.hook = failKey(packKey(failed), -1, fault{err: errDenied})
	var writingID, victimID JobID
	var cancelWriting, cancelVictim bool
	inner := st.hook
	st.hook = func(ctx context.Context, op, key string) *fault {
		if op == "put" && key == packKey(writing) {
			cancelWriting = s.Cancel(writingID)
			cancelVictim = s.Cancel(victimID)
		}
		return inner(ctx, op, key)
	}
	writingID = enqueue(t, s, writing)
	victimID = enqueue(t, s, victim)
	failedID := enqueue(t, s, failed)
	lone := enqueue(t, s, mkJob("ns", "lone"))
	if !s.Cancel(lone) || s.Cancel(lone) {
		t.Fatal("Cancel of a pending job: want true once, then false")
	}
	if got := s.Stats(); got.Jobs != 3 || got.Bytes != writing.Bytes+victim.Bytes+failed.Bytes {
		t.Fatalf("after Cancel(pending): %+v", got)
	}

	rep := s.DrainReport(bg)
	wantReport(t, rep, Report{Selected: 3, Attempted: 2, Completed: 1, Failed: 1, Skipped: 1, Err: errDenied})
	if cancelWriting {
		t.Fatal("Cancel of the job being written returned true")
	}
	if !cancelVictim {
		t.Fatal("Cancel of a selected, not yet started job returned false")
	}
	requirePublished(t, st, writing, true)
	requireNotWritten(t, st, victim)

	if !s.Cancel(failedID) {
		t.Fatal("Cancel of a failed job returned false")
	}
	if s.Cancel(failedID) || s.Cancel(writingID) || s.Cancel(9999) {
		t.Fatal("Cancel of a gone, completed or unknown job returned true")
	}
	if got := s.Stats(); got.Jobs != 0 || got.Bytes != 0 || got.Cancelled != 3 || s.TakeFailed() != nil {
		t.Fatalf("stats %+v", got)
	}
}

// Cancelling ctx mid-drain stops the round at once; the interrupted and the
// unprocessed jobs stay pending, uncharged, and publish on the next drain.
func TestDrainContextCancel(t *testing.T) {
	s, st := newTestSink(t, Config{})
	jobs := []*Job{mkJob("a", "1"), mkJob("b", "2"), mkJob("c", "3")}
	var ids []JobID
	for _, j := range jobs {
		ids = append(ids, enqueue(t, s, j))
	}
	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	st.hook = func(_ context.Context, op, key string) *fault {
		if op == "put" && key == packKey(jobs[0]) {
			cancel() // the store call observes it and returns ctx's error
		}
		return nil
	}
	rep := s.DrainReport(ctx)
	wantReport(t, rep, Report{Selected: 3, Attempted: 1, Interrupted: 1, Skipped: 2, Remaining: 3, Err: context.Canceled})
	if n := st.count("put"); n != 1 {
		t.Fatalf("%d puts after cancel, want 1", n)
	}
	if got := s.Stats(); got.Pending != 3 || got.Failed != 0 || got.Interrupted != 1 || got.Attempts != 1 {
		t.Fatalf("stats %+v", got)
	}
	// An already ended ctx attempts nothing.
	if err := s.Drain(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Drain(cancelled ctx): %v", err)
	}
	// The interruption cost the job no attempt.
	if stt, attempts, held := s.peek(ids[0]); !held || stt != statePending || attempts != 0 {
		t.Fatalf("interrupted job: state %d, %d attempts, held %v; want pending, 0 attempts", stt, attempts, held)
	}
	st.hook = nil
	wantReport(t, s.DrainReport(bg), Report{Selected: 3, Attempted: 3, Completed: 3})
	for _, j := range jobs {
		requirePublished(t, st, j, true)
	}
}

// A namespace with a backlog cannot starve another: rounds interleave
// namespaces and rotate their starting point.
func TestFairRoundRobin(t *testing.T) {
	t.Run("interleave", func(t *testing.T) {
		s, st := newTestSink(t, Config{})
		var big []*Job
		for i := range 4 {
			big = append(big, mkJob("big", fmt.Sprint(i)))
			enqueue(t, s, big[i])
		}
		small := mkJob("small", "0")
		enqueue(t, s, small)
		s.Drain(bg)
		var order []string
		for _, p := range st.putLog() {
			if p.opts.IfNoneMatch && p.key[:5] == "packs" {
				order = append(order, p.key)
			}
		}
		want := []string{packKey(big[0]), packKey(small), packKey(big[1]), packKey(big[2]), packKey(big[3])}
		if fmt.Sprint(order) != fmt.Sprint(want) {
			t.Fatalf("pack order %v, want %v", order, want)
		}
	})

	t.Run("bounded round", func(t *testing.T) {
		s, st := newTestSink(t, Config{MaxRound: 2})
		for i := range 10 {
			enqueue(t, s, mkJob("big", fmt.Sprint(i)))
		}
		small := mkJob("small", "0")
		enqueue(t, s, small)
		wantReport(t, s.DrainReport(bg), Report{Selected: 2, Attempted: 2, Completed: 2, Remaining: 9})
		requirePublished(t, st, small, true)
	})

	t.Run("rotation", func(t *testing.T) {
		s, st := newTestSink(t, Config{MaxRound: 1})
		jobs := map[string][]*Job{}
		for _, ns := range []string{"a", "b", "c"} {
			for i := range 2 {
				j := mkJob(ns, fmt.Sprint(i))
				jobs[ns] = append(jobs[ns], j)
				enqueue(t, s, j)
			}
		}
		for i, want := range []*Job{jobs["a"][0], jobs["b"][0], jobs["c"][0], jobs["a"][1], jobs["b"][1], jobs["c"][1]} {
			s.Drain(bg)
			requirePublished(t, st, want, true)
			if got := s.Stats().Completed; got != uint64(i+1) {
				t.Fatalf("drain %d: %d completed", i, got)
			}
		}
	})
}

// Jobs enqueued while a drain runs wait for the next round.
func TestSnapshotExcludesJobsEnqueuedDuringDrain(t *testing.T) {
	s, st := newTestSink(t, Config{})
	first, late := mkJob("ns", "first"), mkJob("other", "late")
	st.hook = func(_ context.Context, op, key string) *fault {
		if op == "put" && key == packKey(first) {
			enqueue(t, s, late)
		}
		return nil
	}
	enqueue(t, s, first)
	wantReport(t, s.DrainReport(bg), Report{Selected: 1, Attempted: 1, Completed: 1, Remaining: 1})
	requireNotWritten(t, st, late)
	st.hook = nil
	wantReport(t, s.DrainReport(bg), Report{Selected: 1, Attempted: 1, Completed: 1})
	requirePublished(t, st, late, true)
}

func TestIsPermanent(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{cold.ErrUnavailable, false},
		{fmt.Errorf("s3 503: %w", cold.ErrUnavailable), false},
		{context.DeadlineExceeded, false},
		{context.Canceled, false},
		{timeoutErr{}, false},
		{errDenied, true},
		{cold.ErrInvalidKey, true},
		{cold.ErrCorrupt, true},
		{ErrInvalidJob, true},
		{errors.Join(cold.ErrUnavailable, cold.ErrCorrupt), true},
		{cold.ErrNotFound, true},
	} {
		if got := IsPermanent(tc.err); got != tc.want {
			t.Errorf("IsPermanent(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

type timeoutErr struct{}

func (timeoutErr) Error() string { return "i/o timeout" }
func (timeoutErr) Timeout() bool { return true }

func TestNewConfig(t *testing.T) {
	if _, err := New(nil, Config{}); err == nil {
		t.Error("New(nil store) succeeded")
	}
	for _, cfg := range []Config{{MaxJobs: -1}, {MaxBytes: -1}, {MaxRound: -1}, {PutTimeout: -time.Second}} {
		if _, err := New(newFakeStore(), cfg); err == nil {
			t.Errorf("New(%+v) succeeded", cfg)
		}
	}
}

// The same failure isolation against cold.Mem, the shared in-memory store:
// a refused PUT (SetFault) and a committed-then-failed PUT (SetFaultAfter).
func TestWithColdMem(t *testing.T) {
	mem := cold.NewMem()
	s, err := New(mem, Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	bad, amb, good := mkJob("a", "bad"), mkJob("a", "ambiguous", "ptr/a/x"), mkJob("b", "good", "ptr/b/x")
	mem.SetFault(func(_ context.Context, op, key string) error {
		if op == cold.OpPut && key == packKey(bad) {
			return errDenied
		}
		return nil
	})
	lost := 1
	mem.SetFaultAfter(func(_ context.Context, op, key string) error {
		if op == cold.OpPut && key == manifestKey(amb) && lost > 0 {
			lost--
			return cold.ErrUnavailable
		}
		return nil
	})
	for _, j := range []*Job{bad, amb, good} {
		if _, err := s.Enqueue(j); err != nil {
			t.Fatal(err)
		}
	}
	wantReport(t, s.DrainReport(bg), Report{Selected: 3, Attempted: 3, Completed: 1, Retried: 1, Failed: 1, Remaining: 1, Err: errDenied})
	wantReport(t, s.DrainReport(bg), Report{Selected: 1, Attempted: 1, Completed: 1})
	want := []string{manifestKey(amb), manifestKey(good), packKey(amb), packKey(good), "ptr/a/x", "ptr/b/x"}
	slices.Sort(want)
	if got := mem.Keys(); !slices.Equal(got, want) {
		t.Fatalf("store keys %v, want %v", got, want)
	}
	if n := mem.Calls()[cold.OpDelete]; n != 0 {
		t.Fatalf("%d Delete calls", n)
	}
	if f := s.TakeFailed(); len(f) != 1 || !errors.Is(f[0].Err, errDenied) {
		t.Fatalf("TakeFailed %+v", f)
	}
}
