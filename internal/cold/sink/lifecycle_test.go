package sink

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gpucache/gpucache/internal/cold"
)

// A second Drain waits for the running one and then runs its own round.
func TestConcurrentDrainSerialized(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, st := newTestSink(t, Config{})
		first, second := mkJob("ns", "first"), mkJob("ns", "second")
		release := make(chan struct{})
		st.hook = func(_ context.Context, op, key string) *fault {
			if op == "put" && key == packKey(first) {
				<-release
			}
			return nil
		}
		enqueue(t, s, first)
		rep1 := make(chan Report, 1)
		go func() { rep1 <- s.DrainReport(bg) }()
		synctest.Wait() // drain 1 is blocked inside the store

		enqueue(t, s, second)
		rep2 := make(chan Report, 1)
		go func() { rep2 <- s.DrainReport(bg) }()
		synctest.Wait()
		select {
		case r := <-rep2:
			t.Fatalf("second drain returned while the first runs: %+v", r)
		default:
		}
		if got := s.Stats(); got.Writing != 1 {
			t.Fatalf("Writing %d, want 1", got.Writing)
		}
		// A waiting Drain honours its own ctx.
		ctx, cancel := context.WithCancel(bg)
		rep3 := make(chan error, 1)
		go func() { rep3 <- s.Drain(ctx) }()
		synctest.Wait()
		cancel()
		if err := <-rep3; !errors.Is(err, context.Canceled) {
			t.Fatalf("waiting Drain with cancelled ctx: %v", err)
		}

		close(release)
		wantReport(t, <-rep1, Report{Selected: 1, Attempted: 1, Completed: 1, Remaining: 1})
		wantReport(t, <-rep2, Report{Selected: 1, Attempted: 1, Completed: 1})
		requirePublished(t, st, second, true)
	})
}

// Close interrupts a drain blocked in the store, waits for it, and refuses
// further work; the interrupted job stays pending and uncharged.
func TestClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, st := newTestSink(t, Config{})
		j := mkJob("ns", "j")
		st.hook = func(ctx context.Context, op, _ string) *fault {
			if op == "put" {
				<-ctx.Done() // a slow store that honours ctx
			}
			return nil
		}
		id := enqueue(t, s, j)
		rep := make(chan Report, 1)
		go func() { rep <- s.DrainReport(bg) }()
		synctest.Wait()

		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		// Close returned, so the drain's round is over: the interrupted
		// write is already accounted for. The drain's goroutine may still
		// be between its return and the send; let it settle.
		if got := s.Stats(); got.Writing != 0 || got.Interrupted != 1 {
			t.Fatalf("Close returned while the drain still writes: %+v", got)
		}
		synctest.Wait()
		select {
		case r := <-rep:
			wantReport(t, r, Report{Selected: 1, Attempted: 1, Interrupted: 1, Remaining: 1, Err: ErrClosed})
		default:
			t.Fatal("Close returned before the drain")
		}
		select {
		case <-s.Done():
		default:
			t.Fatal("Done not closed")
		}
		if _, err := s.Enqueue(mkJob("ns", "late")); !errors.Is(err, ErrClosed) {
			t.Fatalf("Enqueue after Close: %v", err)
		}
		if err := s.Drain(bg); !errors.Is(err, ErrClosed) {
			t.Fatalf("Drain after Close: %v", err)
		}
		if err := s.Close(); err != nil {
			t.Fatalf("second Close: %v", err)
		}
		if got := s.Stats(); got.Pending != 1 || got.Attempts != 1 || got.Interrupted != 1 {
			t.Fatalf("stats %+v", got)
		}
		if !s.Cancel(id) {
			t.Fatal("Cancel after Close")
		}
	})
}

// Run drains on its ticker and stops with its ctx or with Close.
func TestRun(t *testing.T) {
	s, _ := newTestSink(t, Config{})
	if err := s.Run(bg, 0); err == nil {
		t.Fatal("Run with interval 0 succeeded")
	}
	synctest.Test(t, func(t *testing.T) {
		s, st := newTestSink(t, Config{})
		ctx, cancel := context.WithCancel(bg)
		done := make(chan error, 1)
		go func() { done <- s.Run(ctx, time.Second) }()

		j := mkJob("ns", "j")
		enqueue(t, s, j)
		synctest.Wait()
		requireNotWritten(t, st, j)
		time.Sleep(time.Second) // fake clock: exactly one tick
		synctest.Wait()
		requirePublished(t, st, j, true)
		if got := s.Stats().Drains; got != 1 {
			t.Fatalf("%d drains after one tick", got)
		}
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("Run: %v", err)
		}
	})
	synctest.Test(t, func(t *testing.T) {
		s, _ := newTestSink(t, Config{})
		done := make(chan error, 1)
		go func() { done <- s.Run(bg, time.Second) }()
		synctest.Wait()
		s.Close()
		if err := <-done; !errors.Is(err, ErrClosed) {
			t.Fatalf("Run after Close: %v", err)
		}
	})
}

// Every method used at once from many goroutines; run under -race. At the
// end the credits equal what is still held.
func TestConcurrentUse(t *testing.T) {
	s, st := newTestSink(t, Config{MaxJobs: 64})
	var n int
	var nmu sync.Mutex
	st.hook = func(_ context.Context, op, key string) *fault {
		nmu.Lock()
		defer nmu.Unlock()
		n++
		switch n % 7 {
		case 1:
			return &fault{err: fmt.Errorf("flaky: %w", cold.ErrUnavailable)}
		case 3:
			return &fault{err: cold.ErrUnavailable, commit: true}
		case 5:
			return &fault{err: errDenied}
		}
		return nil
	}
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := range 50 {
				id, err := s.Enqueue(mkJob(fmt.Sprint("ns", w), fmt.Sprint(i), fmt.Sprint("ptr/shared/", i%3)))
				if err != nil && !errors.Is(err, ErrFull) {
					t.Error(err)
				}
				if i%5 == 0 {
					s.Cancel(id)
				}
				if i%7 == 0 {
					s.TakeFailed()
				}
				s.Stats()
			}
		})
	}
	for range 2 {
		wg.Go(func() {
			for range 30 {
				s.Drain(bg)
			}
		})
	}
	wg.Wait()
	st.hook = nil
	for range MaxWriteAttempts {
		s.Drain(bg)
	}
	s.TakeFailed()
	if got := s.Stats(); got.Jobs != 0 || got.Bytes != 0 || got.Pending != 0 {
		t.Fatalf("after draining everything: %+v", got)
	}
}
