package sink

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gpucache/gpucache/internal/cold"
	"github.com/gpucache/gpucache/internal/cold/coldtest"
)

// An outage much longer than MaxWriteAttempts drains: no job is charged,
// none moves to the failed queue, each probe costs outageStreak store
// calls, spaced by a doubling backoff, the state change is logged once each way, and
// once the store answers every job is written by the next due drain.
func TestOutageKeepsJobsAndResumes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		logs := &coldtest.LogRecorder{}
		const backoff, maxBackoff = time.Second, 8 * time.Second
		s, st := newTestSink(t, Config{RetryBackoff: backoff, MaxRetryBackoff: maxBackoff, Logger: slog.New(logs)})
		var down sync.Mutex
		isDown := true
		st.hook = func(_ context.Context, op, _ string) *fault {
			down.Lock()
			defer down.Unlock()
			if isDown {
				return &fault{err: fmt.Errorf("connection refused: %w", cold.ErrUnavailable)}
			}
			return nil
		}
		var jobs []*Job
		var ids []JobID
		for i := range 12 {
			j := mkJob(fmt.Sprint("ns", i%3), fmt.Sprint(i), fmt.Sprint("ptr/", i))
			jobs = append(jobs, j)
			ids = append(ids, enqueue(t, s, j))
		}

		// The first round finds the store down after outageStreak failures.
		wantReport(t, s.DrainReport(bg), Report{Selected: 12, Attempted: outageStreak, Retried: outageStreak, Uncharged: outageStreak,
			Skipped: 12 - outageStreak, Remaining: 12, Outage: true, Err: cold.ErrUnavailable})
		start := time.Now()
		// Then one probe per backoff step: 1s, 2s, 4s, 8s, 8s, ...; a
		// drain every 500ms in between does nothing.
		wantProbes := []time.Duration{1, 3, 7, 15, 23, 31, 39}
		var probes []time.Duration
		puts := st.count("put")
		for time.Since(start) < 40*time.Second {
			time.Sleep(500 * time.Millisecond) // the fake clock: a 500ms flush ticker
			rep := s.DrainReport(bg)
			switch {
			case rep.Deferred:
				wantReport(t, rep, Report{Remaining: 12, Deferred: true})
			default:
				probes = append(probes, time.Since(start))
				wantReport(t, rep, Report{Selected: 12, Attempted: outageStreak, Retried: outageStreak, Uncharged: outageStreak,
					Skipped: 12 - outageStreak, Remaining: 12, Outage: true, Err: cold.ErrUnavailable})
			}
		}
		if len(probes) != len(wantProbes) {
			t.Fatalf("probes at %v, want at %v s", probes, wantProbes)
		}
		for i, p := range probes {
			if p != wantProbes[i]*time.Second {
				t.Fatalf("probes at %v, want at %v s", probes, wantProbes)
			}
		}
		if n := st.count("put") - puts; n != outageStreak*len(wantProbes) {
			t.Fatalf("%d store calls during the outage, want %d per probe (%d)", n, outageStreak, outageStreak*len(wantProbes))
		}
		got := s.Stats()
		if !got.Degraded || got.Outages != 1 || got.Failed != 0 || got.FailedTotal != 0 || got.Pending != 12 ||
			got.Uncharged != uint64(outageStreak*(1+len(wantProbes))) || got.Deferred == 0 {
			t.Fatalf("stats during the outage %+v", got)
		}
		for _, id := range ids {
			if _, attempts, held := s.peek(id); !held || attempts != 0 {
				t.Fatalf("job %d charged %d attempts by the outage (held %v)", id, attempts, held)
			}
		}
		// DrainNow probes at once, backoff or not.
		if rep := s.DrainNow(bg); rep.Deferred || rep.Attempted != outageStreak || !rep.Outage {
			t.Fatalf("DrainNow during the outage: %+v", rep)
		}

		down.Lock()
		isDown = false
		down.Unlock()
		var rep Report
		for rep = s.DrainReport(bg); rep.Deferred; rep = s.DrainReport(bg) {
			time.Sleep(500 * time.Millisecond)
		}
		wantReport(t, rep, Report{Selected: 12, Attempted: 12, Completed: 12})
		for _, j := range jobs {
			requirePublished(t, st, j, true)
		}
		got = s.Stats()
		if got.Degraded || got.Recoveries != 1 || got.Jobs != 0 || got.Bytes != 0 || got.FailedTotal != 0 {
			t.Fatalf("stats after recovery %+v", got)
		}
		if n := logs.Count(slog.LevelWarn, "writes failing"); n != 1 {
			t.Fatalf("%d 'writes failing' lines, want 1", n)
		}
		if n := logs.Count(slog.LevelInfo, "writes recovered"); n != 1 {
			t.Fatalf("%d 'writes recovered' lines, want 1", n)
		}
		if n := logs.Count(slog.LevelInfo, ""); n != 2 {
			t.Fatalf("%d lines at Info or above, want 2 (one state change each way)", n)
		}
		// A second outage is a second pair of lines.
		down.Lock()
		isDown = true
		down.Unlock()
		enqueue(t, s, mkJob("ns0", "late"))
		if rep := s.DrainReport(bg); !rep.Outage {
			t.Fatalf("second outage: %+v", rep)
		}
		if n := logs.Count(slog.LevelWarn, "writes failing"); n != 2 {
			t.Fatalf("%d 'writes failing' lines after a second outage, want 2", n)
		}
	})
}

// A job that fails transiently alone, first in its round, is not charged;
// the same failure while the store answers another job in the round is.
func TestChargeNeedsAnAnswer(t *testing.T) {
	s, st := newTestSink(t, Config{})
	flaky := mkJob("a", "flaky")
	st.hook = failKey(packKey(flaky), -1, fault{err: cold.ErrUnavailable})
	id := enqueue(t, s, flaky)
	for range 5 {
		wantReport(t, s.DrainReport(bg), Report{Selected: 1, Attempted: 1, Retried: 1, Uncharged: 1, Remaining: 1, Outage: true,
			Err: cold.ErrUnavailable})
	}
	if _, attempts, _ := s.peek(id); attempts != 0 {
		t.Fatalf("%d attempts charged with no store answer", attempts)
	}
	// Another job answers in each round: the flaky one is charged from now
	// on, and given up after MaxWriteAttempts such rounds, whichever of the
	// two comes first in the round.
	for i := range MaxWriteAttempts {
		enqueue(t, s, mkJob("b", fmt.Sprint("ok", i)))
		rep := s.DrainReport(bg)
		if rep.Outage || rep.Completed != 1 {
			t.Fatalf("round %d: %+v", i, rep)
		}
	}
	if f := s.TakeFailed(); len(f) != 1 || f[0].Job.ID != id || !errors.Is(f[0].Err, ErrRetriesExhausted) {
		t.Fatalf("TakeFailed %+v", f)
	}
	if got := s.Stats(); got.Degraded || got.Outages != 1 || got.Recoveries != 1 {
		t.Fatalf("stats %+v", got)
	}
}

// A shared budget bounds the sink together with its other holders:
// Enqueue takes from it, EnqueuePaid takes nothing more, and every way out
// of the sink (completion, Cancel, TakeFailed) gives the bytes back.
func TestSharedBudget(t *testing.T) {
	a, b, c := mkJob("ns", "a"), mkJob("ns", "b"), mkJob("ns", "c")
	bud, err := NewBudget(a.Bytes + b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	s, st := newTestSink(t, Config{Budget: bud, MaxBytes: 1}) // MaxBytes is ignored with a Budget
	if got := s.Stats().MaxBytes; got != bud.Max() {
		t.Fatalf("MaxBytes %d, want the budget's %d", got, bud.Max())
	}
	if !bud.TryTake(a.Bytes) {
		t.Fatal("TryTake")
	}
	if _, err := s.EnqueuePaid(a); err != nil { // the caller's bytes move into the queue
		t.Fatal(err)
	}
	if bud.Used() != a.Bytes {
		t.Fatalf("used %d after EnqueuePaid, want %d", bud.Used(), a.Bytes)
	}
	bID := enqueue(t, s, b)
	if _, err := s.Enqueue(c); !errors.Is(err, ErrFull) {
		t.Fatalf("Enqueue past the budget: %v", err)
	}
	if bud.TryTake(1) {
		t.Fatal("the budget let another holder past its size")
	}
	if !s.Cancel(bID) || bud.Used() != a.Bytes {
		t.Fatalf("Cancel gave back %d", a.Bytes+b.Bytes-bud.Used())
	}
	st.hook = failKey(packKey(c), -1, fault{err: errDenied})
	enqueue(t, s, c)
	s.Drain(bg) // a completes, c fails
	if bud.Used() != c.Bytes {
		t.Fatalf("used %d with only the failed job held, want %d", bud.Used(), c.Bytes)
	}
	s.TakeFailed()
	if bud.Used() != 0 {
		t.Fatalf("used %d with nothing held", bud.Used())
	}
	if _, err := NewBudget(0); err == nil {
		t.Fatal("a zero budget was accepted")
	}
}
