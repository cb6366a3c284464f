package server

import (
	"testing"
	"time"

	"github.com/gpucache/gpucache/api/identity"
	"github.com/gpucache/gpucache/api/wire"
	"github.com/gpucache/gpucache/internal/directory"
	"github.com/gpucache/gpucache/internal/testfix"
)

func (c *rawConn) acquire(blob []byte, keys ...identity.BlockKey) []wire.AcquireEntry {
	c.t.Helper()
	req := wire.AcquireRequest{Namespace: blob, Keys: keys}
	h, body := c.roundTrip(wire.OpAcquire, req.AppendTo(nil))
	if h.Flags&wire.FlagError != 0 {
		c.t.Fatalf("acquire: %v", decodeErr(c.t, body))
	}
	var resp wire.AcquireResponse
	if err := resp.Decode(body, wire.DefaultMaxBatch); err != nil {
		c.t.Fatal(err)
	}
	return resp.Entries
}

func (c *rawConn) commit(blob []byte, tok wire.FillToken, id identity.CacheIdentity, payload []byte) wire.Status {
	c.t.Helper()
	return c.commitAs(blob, tok, mustKey(c.t, id), id, payload)
}

// commitAs commits one block under key, claiming identity id.
func (c *rawConn) commitAs(blob []byte, tok wire.FillToken, key identity.BlockKey, id identity.CacheIdentity, payload []byte) wire.Status {
	c.t.Helper()
	req := wire.FillCommitRequest{Namespace: blob, Blocks: []wire.FillBlock{{Token: tok, Key: key, Parent: id.Parent,
		ValidLength: id.ValidLength, Len: uint32(len(payload)), Position: id.Position, TokenIDs: id.Tokens}}}
	body := append(wire.AppendMeta(nil, req.AppendTo(nil)), payload...)
	h, resp := c.roundTrip(wire.OpFillCommit, body)
	if h.Flags&wire.FlagError != 0 {
		c.t.Fatalf("commit: %v", decodeErr(c.t, resp))
	}
	var sr wire.StatusResponse
	if err := sr.Decode(resp, 1); err != nil {
		c.t.Fatal(err)
	}
	return sr.Statuses[0]
}

func (c *rawConn) wait(blob []byte, timeout time.Duration, fills ...uint64) []wire.WaitEntry {
	c.t.Helper()
	req := wire.WaitRequest{Namespace: blob, TimeoutMillis: uint32(timeout.Milliseconds()), Fills: fills}
	h, body := c.roundTrip(wire.OpWait, req.AppendTo(nil))
	if h.Flags&wire.FlagError != 0 {
		c.t.Fatalf("wait: %v", decodeErr(c.t, body))
	}
	var resp wire.WaitResponse
	if err := resp.Decode(body, wire.DefaultMaxBatch); err != nil {
		c.t.Fatal(err)
	}
	return resp.Entries
}

// TestFillLeadJoinFinish walks one fill over the wire: LEAD, JOINED, a
// payload-free FINISHED notice, then the waiter reads the leader's bytes.
func TestFillLeadJoinFinish(t *testing.T) {
	ts := startServer(t, nil)
	blob := mustCanonical(t, testNamespace("acme"))
	id := testID(9)
	key := mustKey(t, id)
	a, b := helloConn(t, ts.addr, "acme"), helloConn(t, ts.addr, "acme")
	la := a.acquire(blob, key)[0]
	jb := b.acquire(blob, key)[0]
	if la.Outcome != wire.AcquireLead || jb.Outcome != wire.AcquireJoined || jb.Token.Fill != la.Token.Fill {
		t.Fatalf("acquire: %+v / %+v", la, jb)
	}
	if st := a.commit(blob, la.Token, id, testfix.Payload(20<<10, 3)); st != wire.StatusStored {
		t.Fatalf("commit: %s", st)
	}
	n := b.wait(blob, 5*time.Second, jb.Token.Fill)[0]
	if n.Kind != wire.NoticeFinished || n.Token != (wire.FillToken{}) {
		t.Fatalf("notice %+v, want FINISHED with no token", n)
	}
	resp, payload, _ := b.get(blob, 0, key)
	if resp.Blocks[0].Status != wire.StatusHit {
		t.Fatal("block not readable after FINISHED")
	}
	equalBytes(t, payload, testfix.Payload(20<<10, 3))
	if e := b.acquire(blob, key)[0]; e.Outcome != wire.AcquireHit {
		t.Fatalf("acquire after finish: %s", e.Outcome)
	}
}

// TestFillTokensBelongToTheirSession: another session, even of the same
// tenant, cannot commit or abort a turn it was not given.
func TestFillTokensBelongToTheirSession(t *testing.T) {
	ts := startServer(t, nil)
	blob := mustCanonical(t, testNamespace("acme"))
	id := testID(10)
	key := mustKey(t, id)
	a, b := helloConn(t, ts.addr, "acme"), helloConn(t, ts.addr, "acme")
	la := a.acquire(blob, key)[0]
	if st := b.commit(blob, la.Token, id, []byte("forged")); st != wire.StatusNotLeader {
		t.Fatalf("forged commit: %s, want NOT_LEADER", st)
	}
	ab := wire.FillAbortRequest{Namespace: blob, Tokens: []wire.FillToken{la.Token}}
	_, body := b.roundTrip(wire.OpFillAbort, ab.AppendTo(nil))
	var sr wire.StatusResponse
	if err := sr.Decode(body, 1); err != nil || sr.Statuses[0] != wire.StatusNotLeader {
		t.Fatalf("forged abort: %v %v", sr, err)
	}
	if resp, _, _ := b.get(blob, 0, key); resp.Blocks[0].Status != wire.StatusMiss {
		t.Fatal("a forged commit stored bytes")
	}
	if st := a.commit(blob, la.Token, id, []byte("real")); st != wire.StatusStored {
		t.Fatalf("owner's commit: %s", st)
	}
}

// TestFillPublishedByPut: a plain PUT of the block a fill computes, from
// another session of the tenant, ends the fill: the waiter is told
// FINISHED and reads the PUT's bytes, and the leader's late commit or abort
// is NOT_LEADER. This is how an engine whose scheduler leads a fill (it has
// no KV bytes) lets its worker process publish them.
func TestFillPublishedByPut(t *testing.T) {
	ts := startServer(t, nil)
	blob := mustCanonical(t, testNamespace("acme"))
	id := testID(12)
	key := mustKey(t, id)
	sched, worker, other := helloConn(t, ts.addr, "acme"), helloConn(t, ts.addr, "acme"), helloConn(t, ts.addr, "acme")
	la := sched.acquire(blob, key)[0]
	jo := other.acquire(blob, key)[0]
	if la.Outcome != wire.AcquireLead || jo.Outcome != wire.AcquireJoined {
		t.Fatalf("acquire: %+v / %+v", la, jo)
	}
	payload := testfix.Payload(20<<10, 5)
	if st := worker.put(blob, id, payload); st != wire.StatusStored {
		t.Fatalf("put: %s", st)
	}
	if n := other.wait(blob, 5*time.Second, jo.Token.Fill)[0]; n.Kind != wire.NoticeFinished {
		t.Fatalf("notice %+v, want FINISHED", n)
	}
	resp, got, _ := other.get(blob, 0, key)
	if resp.Blocks[0].Status != wire.StatusHit {
		t.Fatal("block not readable after FINISHED")
	}
	equalBytes(t, got, payload)
	if st := sched.commit(blob, la.Token, id, []byte("late")); st != wire.StatusNotLeader {
		t.Fatalf("leader's commit after the PUT: %s, want NOT_LEADER", st)
	}
	ab := wire.FillAbortRequest{Namespace: blob, Tokens: []wire.FillToken{la.Token}}
	_, body := sched.roundTrip(wire.OpFillAbort, ab.AppendTo(nil))
	var sr wire.StatusResponse
	if err := sr.Decode(body, 1); err != nil || sr.Statuses[0] != wire.StatusNotLeader {
		t.Fatalf("leader's abort after the PUT: %v %v", sr, err)
	}
	if ds := ts.srv.dir.Stats(); ds.Published != 1 || ds.Fills != 0 || ds.Waiters != 0 {
		t.Fatalf("directory %+v", ds)
	}
	// A PUT of a block already there (EXISTS) ends a fill of it too.
	id2 := testID(13)
	key2 := mustKey(t, id2)
	if st := worker.put(blob, id2, payload); st != wire.StatusStored {
		t.Fatalf("put: %s", st)
	}
	nsd, err := testNamespace("acme").Digest()
	if err != nil {
		t.Fatal(err)
	}
	ts.srv.dir.Acquire(directory.Request{Key: key2, Namespace: nsd, Tenant: "acme", Owner: 1 << 60}, nil)
	if ds := ts.srv.dir.Stats(); ds.Fills != 1 {
		t.Fatalf("fills %d, want the forced one", ds.Fills)
	}
	if st := worker.put(blob, id2, payload); st != wire.StatusExists {
		t.Fatalf("second put: %s", st)
	}
	if ds := ts.srv.dir.Stats(); ds.Published != 2 || ds.Fills != 0 {
		t.Fatalf("directory %+v", ds)
	}
}

// TestFillLeadsArePruned: the turns a session was given and that ended
// without it (published by a PUT here) do not pile up in its session: past
// minPrune the next lead drops them.
func TestFillLeadsArePruned(t *testing.T) {
	ts := startServer(t, nil)
	blob := mustCanonical(t, testNamespace("acme"))
	sched, worker := helloConn(t, ts.addr, "acme"), helloConn(t, ts.addr, "acme")
	var last *conn
	for i := 0; i < minPrune+10; i++ {
		id := testID(uint32(1000 + i))
		if e := sched.acquire(blob, mustKey(t, id))[0]; e.Outcome != wire.AcquireLead {
			t.Fatalf("acquire %d: %s", i, e.Outcome)
		}
		if st := worker.put(blob, id, []byte("kv")); st != wire.StatusStored {
			t.Fatalf("put %d: %s", i, st)
		}
	}
	ts.srv.mu.Lock()
	for c := range ts.srv.mu.conns {
		c.fills.mu.Lock()
		if n := len(c.fills.leads); n > 0 {
			last = c
			if n > minPrune {
				t.Errorf("a session holds %d ended turns, want at most %d", n, minPrune)
			}
		}
		c.fills.mu.Unlock()
	}
	ts.srv.mu.Unlock()
	if last == nil {
		t.Fatal("no session holds leads: the test did not take any")
	}
}

// TestFillAbortPromotesWaiter: FILL_ABORT hands the turn to the next
// waiter, who learns it from WAIT as PROMOTED with a token it can commit.
func TestFillAbortPromotesWaiter(t *testing.T) {
	ts := startServer(t, nil)
	blob := mustCanonical(t, testNamespace("acme"))
	id := testID(11)
	key := mustKey(t, id)
	a, b := helloConn(t, ts.addr, "acme"), helloConn(t, ts.addr, "acme")
	la := a.acquire(blob, key)[0]
	jb := b.acquire(blob, key)[0]
	ab := wire.FillAbortRequest{Namespace: blob, Tokens: []wire.FillToken{la.Token}}
	_, body := a.roundTrip(wire.OpFillAbort, ab.AppendTo(nil))
	var sr wire.StatusResponse
	if err := sr.Decode(body, 1); err != nil || sr.Statuses[0] != wire.StatusAborted {
		t.Fatalf("abort: %v %v", sr, err)
	}
	n := b.wait(blob, 5*time.Second, jb.Token.Fill)[0]
	if n.Kind != wire.NoticePromoted || n.Token.Turn != 2 {
		t.Fatalf("notice %+v, want PROMOTED turn 2", n)
	}
	if st := a.commit(blob, la.Token, id, []byte("late")); st != wire.StatusNotLeader {
		t.Fatalf("old leader's commit: %s", st)
	}
	if st := b.commit(blob, n.Token, id, []byte("new leader")); st != wire.StatusStored {
		t.Fatalf("promoted commit: %s", st)
	}
}

// TestFillDeadlinePromotes: a leader that neither commits nor disconnects
// loses its turn at the fill deadline; the waiter is promoted.
func TestFillDeadlinePromotes(t *testing.T) {
	ts := startServer(t, func(c *Config) { c.FillDeadline = 100 * time.Millisecond })
	blob := mustCanonical(t, testNamespace("acme"))
	key := identity.BlockKey{12}
	a, b := helloConn(t, ts.addr, "acme"), helloConn(t, ts.addr, "acme")
	a.acquire(blob, key)
	jb := b.acquire(blob, key)[0]
	start := time.Now()
	n := b.wait(blob, 10*time.Second, jb.Token.Fill)[0]
	if n.Kind != wire.NoticePromoted {
		t.Fatalf("notice %+v, want PROMOTED", n)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("promotion took %v with a 100ms deadline", d)
	}
}

// TestFillFencedByEpoch: an epoch change fences in-flight fills: the
// waiter is told FENCED and the old leader's commit stores nothing.
func TestFillFencedByEpoch(t *testing.T) {
	dir, err := directory.New(directory.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer dir.Close()
	ts := startServer(t, func(c *Config) { c.Directory = dir })
	blob := mustCanonical(t, testNamespace("acme"))
	id := testID(13)
	key := mustKey(t, id)
	a, b := helloConn(t, ts.addr, "acme"), helloConn(t, ts.addr, "acme")
	la := a.acquire(blob, key)[0]
	jb := b.acquire(blob, key)[0]
	if _, err := dir.AdvanceEpoch(dir.Epoch() + 1); err != nil {
		t.Fatal(err)
	}
	if n := b.wait(blob, 5*time.Second, jb.Token.Fill)[0]; n.Kind != wire.NoticeFenced {
		t.Fatalf("notice %+v, want FENCED", n)
	}
	if st := a.commit(blob, la.Token, id, []byte("stale")); st != wire.StatusFenced {
		t.Fatalf("stale commit: %s, want FENCED", st)
	}
	if resp, _, _ := a.get(blob, 0, key); resp.Blocks[0].Status != wire.StatusMiss {
		t.Fatal("a fenced commit stored bytes")
	}
	if e := a.acquire(blob, key)[0]; e.Outcome != wire.AcquireLead || e.Token.Epoch != uint64(dir.Epoch()) {
		t.Fatalf("re-acquire: %+v under epoch %d", e, dir.Epoch())
	}
}

// TestFillOtherTenantGetsItsOwnFill pairs isolation with reuse on the wire.
func TestFillOtherTenantGetsItsOwnFill(t *testing.T) {
	ts := startServer(t, nil)
	key := identity.BlockKey{14} // the same key under both tenants
	blobA, blobB := mustCanonical(t, testNamespace("tenant-a")), mustCanonical(t, testNamespace("tenant-b"))
	a1, a2 := helloConn(t, ts.addr, "tenant-a"), helloConn(t, ts.addr, "tenant-a")
	b1 := helloConn(t, ts.addr, "tenant-b")
	la := a1.acquire(blobA, key)[0]
	if e := a2.acquire(blobA, key)[0]; e.Outcome != wire.AcquireJoined || e.Token.Fill != la.Token.Fill {
		t.Fatalf("same tenant: %+v, want JOINED fill %d", e, la.Token.Fill)
	}
	if e := b1.acquire(blobB, key)[0]; e.Outcome != wire.AcquireLead || e.Token.Fill == la.Token.Fill {
		t.Fatalf("other tenant: %+v, want its own LEAD", e)
	}
	// B cannot even wait on A's fill.
	if n := b1.wait(blobB, time.Second, la.Token.Fill)[0]; n.Kind != wire.NoticeFailed {
		t.Fatalf("other tenant waiting on A's fill: %+v", n)
	}
}
