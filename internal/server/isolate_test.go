package server

import (
	"errors"
	"testing"

	"github.com/gpucache/gpucache/api/wire"
	"github.com/gpucache/gpucache/internal/control"
	"github.com/gpucache/gpucache/internal/testfix"
)

// TestIsolationFencesOrChangesNothing runs a fault-domain isolation against
// a node with a fill in flight: a leader and a joined waiter of the same
// tenant (the waiter holds a join credit). Isolating rack-2 (node-b and
// node-c) needs two epoch increments. With one, the plan is refused and
// nothing changes: view, epoch, live fills, waiters, credits, and the
// waiter gets no notice. With exactly two, the view moves by two epochs in
// one step, the fill is fenced, the waiter is notified FENCED, its credit
// is returned, and the leader's commit is refused.
func TestIsolationFencesOrChangesNothing(t *testing.T) {
	blob := mustCanonical(t, testNamespace("acme"))
	v := testView(t, 10)
	ts, cl := startClusterServer(t, "node-a", v, nil)
	own, _ := ownedIDs(t, v, "node-a", 1)
	key := mustKey(t, own[0])
	leader, _ := helloV(t, ts.addr, "acme", 1, 2)
	waiter, _ := helloV(t, ts.addr, "acme", 1, 2)
	lead := leader.acquire(blob, key)[0]
	join := waiter.acquire(blob, key)[0]
	if lead.Outcome != wire.AcquireLead || join.Outcome != wire.AcquireJoined {
		t.Fatalf("acquire: %s, %s", lead.Outcome, join.Outcome)
	}
	before := ts.srv.dir.Stats()
	if before.Fills != 1 || before.Waiters != 1 || before.CreditsInUse != 1 {
		t.Fatalf("before: %+v", before)
	}

	// One increment short: refused before anything changes.
	if _, err := control.PlanIsolate(v, "rack-2", 1); !errors.Is(err, control.ErrEpochOverflow) {
		t.Fatalf("short budget: %v", err)
	}
	after := ts.srv.dir.Stats()
	if cl.View().Epoch() != 10 || cl.View().Len() != 3 || after.Epoch != before.Epoch ||
		after.Fills != 1 || after.Waiters != 1 || after.CreditsInUse != 1 || after.Fenced != 0 {
		t.Fatalf("a refused isolation changed state: view epoch %d, %d members; directory %+v", cl.View().Epoch(), cl.View().Len(), after)
	}
	if e := waiter.wait(blob, 0, join.Token.Fill)[0]; e.Kind != wire.NoticePending {
		t.Fatalf("waiter notified %s by a refused isolation", e.Kind)
	}

	// The exact budget: both victims go in one step, the fill is fenced.
	p, err := control.PlanIsolate(v, "rack-2", 2)
	if err != nil {
		t.Fatal(err)
	}
	nv, err := p.View()
	if err != nil {
		t.Fatal(err)
	}
	fenced, err := ts.srv.AdvanceView(nv)
	if err != nil || fenced != 1 {
		t.Fatalf("isolation fenced %d fills (%v), want 1", fenced, err)
	}
	if cl.View().Epoch() != 12 || cl.View().Len() != 1 {
		t.Fatalf("after isolation: epoch %d, %d members", cl.View().Epoch(), cl.View().Len())
	}
	if e := waiter.wait(blob, 0, join.Token.Fill)[0]; e.Kind != wire.NoticeFenced {
		t.Fatalf("waiter notice %s, want FENCED", e.Kind)
	}
	if st := leader.commit(blob, lead.Token, own[0], testfix.Payload(8<<10, 3)); st != wire.StatusFenced {
		t.Fatalf("leader commit after isolation: %s, want FENCED", st)
	}
	if s := ts.srv.dir.Stats(); s.Fills != 0 || s.Waiters != 0 || s.CreditsInUse != 0 {
		t.Fatalf("after isolation: %+v", s)
	}
}

// TestRemovedOrDrainingNodeStartsNoFill: a node absent from its view
// (isolated) fences its fills on the view change, and neither it nor a
// draining node starts a new fill for a version-1 session, which is not
// routed: DENIED, or HIT for a block it still holds.
func TestRemovedOrDrainingNodeStartsNoFill(t *testing.T) {
	blob := mustCanonical(t, testNamespace("acme"))
	v := testView(t, 1)
	ts, _ := startClusterServer(t, "node-b", v, nil)
	own, _ := ownedIDs(t, v, "node-b", 2)
	v2, _ := helloV(t, ts.addr, "acme", 1, 2)
	lead := v2.acquire(blob, mustKey(t, own[0]))[0]
	if lead.Outcome != wire.AcquireLead {
		t.Fatalf("acquire: %s", lead.Outcome)
	}
	p, err := control.PlanIsolate(v, "rack-2", 2) // node-b and node-c
	if err != nil {
		t.Fatal(err)
	}
	nv, _ := p.View()
	if n, err := ts.srv.AdvanceView(nv); n != 1 || err != nil {
		t.Fatalf("isolated node fenced %d fills (%v), want 1", n, err)
	}
	old, _ := helloV(t, ts.addr, "acme", 1, 1)
	if e := old.acquire(blob, mustKey(t, own[1]))[0]; e.Outcome != wire.AcquireDenied {
		t.Fatalf("v1 ACQUIRE on an isolated node: %s, want DENIED", e.Outcome)
	}

	ts2, _ := startClusterServer(t, "node-a", testView(t, 1), nil)
	mine, _ := ownedIDs(t, testView(t, 1), "node-a", 1)
	if _, err := ts2.srv.AdvanceView(testView(t, 2, "node-a")); err != nil {
		t.Fatal(err)
	}
	old2, _ := helloV(t, ts2.addr, "acme", 1, 1)
	if e := old2.acquire(blob, mustKey(t, mine[0]))[0]; e.Outcome != wire.AcquireDenied {
		t.Fatalf("v1 ACQUIRE on a draining node: %s, want DENIED", e.Outcome)
	}
}
