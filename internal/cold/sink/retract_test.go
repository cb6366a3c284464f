package sink

import (
	"context"
	"testing"
)

// A retracted pointer is not written by the jobs queued before Retract
// (their other objects are), and is written by a job queued after it.
func TestRetractSkipsQueuedPointer(t *testing.T) {
	s, st := newTestSink(t, Config{})
	old := mkJob("ns", "old", "ptr/ns/a", "ptr/ns/b")
	enqueue(t, s, old)
	if err := s.Retract(bg, "ptr/ns/a"); err != nil {
		t.Fatal(err)
	}
	wantReport(t, s.DrainReport(bg), Report{Selected: 1, Attempted: 1, Completed: 1})
	if _, ok := st.get("ptr/ns/a"); ok {
		t.Fatal("retracted pointer written by a job queued before Retract")
	}
	if _, ok := st.get("ptr/ns/b"); !ok {
		t.Fatal("the job's other pointer was not written")
	}
	if _, ok := st.get(manifestKey(old)); !ok {
		t.Fatal("the job's manifest was not written")
	}
	if got := s.Stats().PointersSuperseded; got != 1 {
		t.Fatalf("PointersSuperseded = %d, want 1", got)
	}

	// A job queued after the Retract publishes the pointer again.
	enqueue(t, s, mkJob("ns", "new", "ptr/ns/a"))
	wantReport(t, s.DrainReport(bg), Report{Selected: 1, Attempted: 1, Completed: 1})
	if _, ok := st.get("ptr/ns/a"); !ok {
		t.Fatal("a job queued after Retract did not write the pointer")
	}
}

// Retract waits for a PUT of the pointer in progress: after it returns,
// a Delete of the pointer is final.
func TestRetractWaitsForPointerPut(t *testing.T) {
	s, st := newTestSink(t, Config{})
	entered, release := make(chan struct{}), make(chan struct{})
	st.hook = func(_ context.Context, op, key string) *fault {
		if op == "put" && key == "ptr/ns/a" {
			close(entered)
			<-release
		}
		return nil
	}
	enqueue(t, s, mkJob("ns", "j", "ptr/ns/a"))
	drained := make(chan Report)
	go func() { drained <- s.DrainReport(bg) }()
	<-entered
	retracted := make(chan error)
	go func() { retracted <- s.Retract(bg, "ptr/ns/a") }()
	select {
	case <-retracted:
		t.Fatal("Retract returned while a PUT of the pointer was in flight")
	default:
	}
	close(release)
	if err := <-retracted; err != nil {
		t.Fatal(err)
	}
	// The PUT ended before Retract returned: deleting now is final.
	if _, ok := st.get("ptr/ns/a"); !ok {
		t.Fatal("the in-flight PUT did not land before Retract returned")
	}
	wantReport(t, <-drained, Report{Selected: 1, Attempted: 1, Completed: 1})
}

// Retract gives up with ctx's error while a pointer PUT holds the slot.
func TestRetractHonoursContext(t *testing.T) {
	s, st := newTestSink(t, Config{})
	entered, release := make(chan struct{}), make(chan struct{})
	st.hook = func(_ context.Context, op, key string) *fault {
		if op == "put" && key == "ptr/ns/a" {
			close(entered)
			<-release
		}
		return nil
	}
	enqueue(t, s, mkJob("ns", "j", "ptr/ns/a"))
	drained := make(chan Report)
	go func() { drained <- s.DrainReport(bg) }()
	<-entered
	ctx, cancel := context.WithCancel(bg)
	cancel()
	if err := s.Retract(ctx, "ptr/ns/a"); err != context.Canceled {
		t.Fatalf("Retract = %v, want context.Canceled", err)
	}
	close(release)
	<-drained
}
