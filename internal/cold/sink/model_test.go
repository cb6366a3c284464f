package sink

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/gpucache/gpucache/internal/cold"
)

// peek reads a job's queue state and attempts (test only).
func (s *Sink) peek(id JobID) (st state, attempts int, held bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.mu.jobs[id]
	if e == nil {
		return stateGone, 0, false
	}
	return e.state, e.attempts, true
}

type modelState uint8

const (
	mPending modelState = iota
	mFailed
	mCompleted
	mCancelled
	mTaken
)

type modelJob struct {
	job      *Job // the test's own copy, never handed to the sink
	state    modelState
	attempts int
	drains   map[int]bool // drains in which the store saw a Put of this job's bytes
	// pendingDrains counts the drains that started with the job pending.
	pendingDrains int
}

// TestModelRandomized drives the sink with random operations against a
// store that randomly fails before or after committing, and checks it
// against a simple model after every step: credits equal the pending and
// failed jobs; each pending job is attempted at most once per drain, and
// exactly once unless the round found the store down; a job is charged at
// most one attempt per drain, never in a drain in which the store answered
// nothing, and at most MaxWriteAttempts in all; no job is both completed
// and failed; a visible manifest's pack and a visible pointer's manifest
// are always in the store; pointer writes to a key never go back to an
// older job; and nothing is ever deleted.
func TestModelRandomized(t *testing.T) {
	seeds := 60
	if testing.Short() {
		seeds = 10
	}
	for seed := range seeds {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { runModel(t, uint64(seed)) })
	}
}

func runModel(t *testing.T, seed uint64) {
	const maxJobs, maxBytes = 12, 900
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	s, st := newTestSink(t, Config{MaxJobs: maxJobs, MaxBytes: maxBytes})

	jobs := map[JobID]*modelJob{}
	owner := map[string]JobID{} // key + "\x00" + body -> the job that owns those bytes
	lastPointer := map[string]JobID{}
	drainNo := 0
	faults := true

	st.hook = func(_ context.Context, op, _ string) *fault {
		if op != "put" || !faults {
			return nil
		}
		switch rng.IntN(20) {
		case 0, 1:
			return &fault{err: cold.ErrUnavailable}
		case 2, 3:
			return &fault{err: cold.ErrUnavailable, commit: true}
		case 4:
			return &fault{err: errDenied}
		case 5:
			return &fault{err: errDenied, commit: true}
		}
		return nil
	}
	// onCommit runs under the store's lock, at the instant a write lands.
	st.onCommit = func(key string, body []byte) {
		id, ok := owner[key+"\x00"+string(body)]
		if !ok {
			t.Errorf("store wrote bytes no job owns under %q", key)
			return
		}
		m := jobs[id]
		m.drains[drainNo] = true
		for i, o := range m.job.Objects {
			if o.Key != key {
				continue
			}
			// Every earlier object of the job is already in the store.
			for _, prev := range m.job.Objects[:i] {
				if prev.Kind == KindPointer {
					continue
				}
				if b, ok := st.objs[prev.Key]; !ok || string(b) != string(prev.Body) {
					t.Errorf("job %d: %v %q visible before %v %q", id, o.Kind, key, prev.Kind, prev.Key)
				}
			}
			if o.Kind == KindPointer {
				if lastPointer[key] > id {
					t.Errorf("pointer %q moved back from job %d to job %d", key, lastPointer[key], id)
				}
				lastPointer[key] = id
			}
		}
	}

	held := func() (n, pending, failed int, bytes int64) {
		for _, m := range jobs {
			switch m.state {
			case mPending:
				pending++
			case mFailed:
				failed++
			default:
				continue
			}
			n++
			bytes += m.job.Bytes
		}
		return
	}
	name := 0
	add := func(j *Job) {
		orig := cloneJob(j)
		n, _, _, bytes := held()
		full := n+1 > maxJobs || bytes+j.Bytes > maxBytes
		id, err := s.Enqueue(j)
		if full != errors.Is(err, ErrFull) || (!full && err != nil) {
			t.Fatalf("Enqueue: %v; model says full=%v", err, full)
		}
		if err != nil {
			return
		}
		orig.ID = id
		jobs[id] = &modelJob{job: orig, drains: map[int]bool{}}
		for _, o := range orig.Objects {
			owner[o.Key+"\x00"+string(o.Body)] = id
		}
	}

	check := func(step int, what string) {
		t.Helper()
		n, pending, failed, bytes := held()
		got := s.Stats()
		if got.Jobs != n || got.Pending != pending || got.Failed != failed || got.Bytes != bytes {
			t.Fatalf("step %d (%s): stats %+v; model: %d jobs (%d pending, %d failed), %d bytes",
				step, what, got, n, pending, failed, bytes)
		}
		if d := st.count("delete"); d != 0 {
			t.Fatalf("step %d: %d deletes", step, d)
		}
	}

	drain := func(step int) {
		var before []JobID
		for id, m := range jobs {
			if m.state == mPending {
				before = append(before, id)
			}
		}
		drainNo++
		putsBefore := len(st.putLog())
		rep := s.DrainReport(bg)
		// The store answered a Put unless it failed transiently (an
		// outage looks like that).
		answers := 0
		for _, p := range st.putLog()[putsBefore:] {
			if p.err == nil || !errors.Is(p.err, cold.ErrUnavailable) {
				answers++
			}
		}
		if rep.Selected != len(before) || rep.Interrupted != 0 || rep.Deferred ||
			rep.Attempted != rep.Completed+rep.Retried+rep.Failed || rep.Attempted+rep.Skipped != rep.Selected {
			t.Fatalf("step %d: report %+v with %d pending before", step, rep, len(before))
		}
		if !rep.Outage && rep.Skipped != 0 {
			t.Fatalf("step %d: %d jobs skipped in a round that did not find the store down: %+v", step, rep.Skipped, rep)
		}
		if rep.Outage && (rep.Uncharged == 0 || rep.Uncharged > outageStreak) {
			t.Fatalf("step %d: an outage round with %d uncharged failures: %+v", step, rep.Uncharged, rep)
		}
		if got := s.Stats(); (rep.Outage && !got.Degraded) || (!rep.Outage && answers > 0 && got.Degraded) {
			t.Fatalf("step %d: degraded %v after a round with outage %v and %d answers", step, got.Degraded, rep.Outage, answers)
		}
		var completed, failed, retried, charged, unchanged int
		for _, id := range before {
			m := jobs[id]
			m.pendingDrains++
			stt, attempts, isHeld := s.peek(id)
			switch {
			case !isHeld:
				m.state = mCompleted
				completed++
				for _, o := range m.job.Objects {
					if o.Kind == KindPointer {
						continue
					}
					if b, ok := st.get(o.Key); !ok || string(b) != string(o.Body) {
						t.Fatalf("step %d: completed job %d lacks %q", step, id, o.Key)
					}
				}
				continue
			case stt == stateFailed:
				m.state = mFailed
				failed++
				// A permanent error fails the job at once, a transient one
				// only as its last charged attempt.
				if attempts != m.attempts+1 {
					t.Fatalf("step %d: failed job %d has %d attempts, model %d before the drain", step, id, attempts, m.attempts)
				}
			case stt == statePending:
				retried++
				switch attempts {
				case m.attempts:
					unchanged++ // skipped, or refunded by an outage
				case m.attempts + 1:
					charged++
				default:
					t.Fatalf("step %d: pending job %d has %d attempts, model %d before the drain", step, id, attempts, m.attempts)
				}
				if attempts >= MaxWriteAttempts {
					t.Fatalf("step %d: pending job %d has %d attempts", step, id, attempts)
				}
			default:
				t.Fatalf("step %d: job %d in state %d after the drain", step, id, stt)
			}
			m.attempts = attempts
			if m.attempts > MaxWriteAttempts {
				t.Fatalf("step %d: job %d attempted %d times", step, id, m.attempts)
			}
			if len(m.drains) > m.pendingDrains {
				t.Fatalf("step %d: job %d wrote in %d drains but was pending in %d", step, id, len(m.drains), m.pendingDrains)
			}
		}
		if answers == 0 && charged != 0 {
			t.Fatalf("step %d: %d jobs charged in a drain in which the store answered nothing", step, charged)
		}
		if rep.Completed != completed || rep.Failed != failed || rep.Retried+rep.Skipped != retried || rep.Remaining != retried ||
			unchanged != rep.Skipped+rep.Uncharged {
			t.Fatalf("step %d: report %+v; model: %d completed, %d failed, %d left pending (%d charged, %d not)",
				step, rep, completed, failed, retried, charged, unchanged)
		}
		if (rep.Err != nil) != (failed+rep.Retried > 0) {
			t.Fatalf("step %d: report Err %v with %d failed, %d retried", step, rep.Err, failed, rep.Retried)
		}
	}

	for step := range 250 {
		var what string
		switch r := rng.IntN(100); {
		case r < 45:
			what = "enqueue"
			ns := []string{"a", "b", "c"}[rng.IntN(3)]
			var ptrs []string
			for _, p := range []string{"ptr/shared/0", "ptr/shared/1", "ptr/" + ns} {
				if rng.IntN(2) == 0 {
					ptrs = append(ptrs, p)
				}
			}
			name++
			add(mkJob(ns, fmt.Sprint(name), ptrs...))
		case r < 75:
			what = "drain"
			drain(step)
		case r < 87:
			what = "cancel"
			id := JobID(rng.IntN(len(jobs)+2) + 1)
			m := jobs[id]
			want := m != nil && (m.state == mPending || m.state == mFailed)
			if got := s.Cancel(id); got != want {
				t.Fatalf("step %d: Cancel(%d) = %v, want %v", step, id, got, want)
			}
			if want {
				m.state = mCancelled
			}
		default:
			what = "take failed"
			var want []JobID
			for id, m := range jobs {
				if m.state == mFailed {
					want = append(want, id)
				}
			}
			var got []JobID
			for _, f := range s.TakeFailed() {
				m := jobs[f.Job.ID]
				if m == nil || m.state != mFailed {
					t.Fatalf("step %d: TakeFailed returned job %d, not failed in the model", step, f.Job.ID)
				}
				if f.Attempts != m.attempts || f.Attempts > MaxWriteAttempts || f.Err == nil {
					t.Fatalf("step %d: failed job %+v, model attempts %d", step, f, m.attempts)
				}
				if IsPermanent(f.Err) == errors.Is(f.Err, ErrRetriesExhausted) {
					t.Fatalf("step %d: failed job error %v is neither permanent nor exhaustion", step, f.Err)
				}
				m.state = mTaken
				got = append(got, f.Job.ID)
				if rng.IntN(2) == 0 {
					add(f.Job) // enqueued again: a new, later job
				}
			}
			slices.Sort(want)
			slices.Sort(got)
			if !slices.Equal(got, want) {
				t.Fatalf("step %d: TakeFailed %v, model %v", step, got, want)
			}
		}
		check(step, what)
	}

	// A healthy store publishes everything still pending, in one drain,
	// even right after an outage: the probe answers and the round goes on.
	faults = false
	drain(-1)
	check(-1, "final")
	if got := s.Stats(); got.Pending != 0 {
		t.Fatalf("%d jobs pending on a healthy store", got.Pending)
	}
}
