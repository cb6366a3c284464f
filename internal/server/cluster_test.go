package server

import (
	"errors"
	"testing"

	"github.com/gpucache/gpucache/api/identity"
	"github.com/gpucache/gpucache/api/wire"
	"github.com/gpucache/gpucache/internal/control"
	"github.com/gpucache/gpucache/internal/testfix"
)

// helloV opens a session offering protocol versions min..max and returns
// the server's answer.
func helloV(t *testing.T, addr, tenant string, min, max uint8) (*rawConn, wire.HelloResponse) {
	t.Helper()
	c := dialRaw(t, addr)
	req := wire.HelloRequest{MinVersion: min, MaxVersion: max, Tenant: tenant, Client: "test"}
	h, body := c.roundTrip(wire.OpHello, req.AppendTo(nil))
	if h.Flags&wire.FlagError != 0 {
		t.Fatalf("hello %d..%d failed: %v", min, max, decodeErr(t, body))
	}
	var resp wire.HelloResponse
	if err := resp.Decode(body); err != nil {
		t.Fatal(err)
	}
	return c, resp
}

// testMembers are three members with fake addresses: the server under test
// is one of them; nothing ever dials the others.
func testMembers(draining ...control.MemberID) []control.Member {
	ms := []control.Member{
		{ID: "node-a", Addr: "10.0.0.1:9400", FaultDomain: "rack-1", ProtoVersion: 2, CapacityBytes: 8 << 30},
		{ID: "node-b", Addr: "10.0.0.2:9400", FaultDomain: "rack-2", ProtoVersion: 2, CapacityBytes: 8 << 30},
		{ID: "node-c", Addr: "10.0.0.3:9400", FaultDomain: "rack-2", ProtoVersion: 1, CapacityBytes: 4 << 30},
	}
	for i := range ms {
		for _, d := range draining {
			if ms[i].ID == d {
				ms[i].Draining = true
			}
		}
	}
	return ms
}

func testView(t *testing.T, epoch uint64, draining ...control.MemberID) control.View {
	t.Helper()
	v, err := control.NewView(epoch, testMembers(draining...))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// ownedIDs returns n identities of testNamespace("acme") whose keys self
// owns under v, and n whose keys another member owns.
func ownedIDs(t *testing.T, v control.View, self control.MemberID, n int) (own, foreign []identity.CacheIdentity) {
	t.Helper()
	for seed := uint32(1); len(own) < n || len(foreign) < n; seed++ {
		if seed > 10000 {
			t.Fatal("placement never picked both sides")
		}
		id := testID(seed)
		m, ok := control.Owner(v, mustKey(t, id))
		switch {
		case !ok:
			t.Fatal("view owns no key")
		case m.ID == self && len(own) < n:
			own = append(own, id)
		case m.ID != self && len(foreign) < n:
			foreign = append(foreign, id)
		}
	}
	return own, foreign
}

// startClusterServer runs a server that is member self of v.
func startClusterServer(t *testing.T, self control.MemberID, v control.View, mod func(*Config)) (*testServer, *Cluster) {
	t.Helper()
	cl := NewCluster(self, v)
	ts := startServer(t, func(c *Config) {
		c.Cluster = cl
		if mod != nil {
			mod(c)
		}
	})
	return ts, cl
}

func statsOf(s *Server) map[string]uint64 {
	m := map[string]uint64{}
	for _, e := range s.Stats() {
		m[e.Name] = e.Value
	}
	return m
}

func wireKeysOf(t *testing.T, ids ...identity.CacheIdentity) []wire.Key {
	t.Helper()
	out := make([]wire.Key, len(ids))
	for i, id := range ids {
		out[i] = mustKey(t, id)
	}
	return out
}

func (c *rawConn) lookup(blob []byte, ttlMillis uint32, keys []wire.Key) wire.LookupResponse {
	c.t.Helper()
	req := wire.LookupRequest{Namespace: blob, LeaseTTLMillis: ttlMillis, Keys: keys}
	h, body := c.roundTrip(wire.OpLookup, req.AppendTo(nil))
	if h.Flags&wire.FlagError != 0 {
		c.t.Fatalf("lookup: %v", decodeErr(c.t, body))
	}
	var resp wire.LookupResponse
	if err := resp.Decode(body); err != nil {
		c.t.Fatal(err)
	}
	return resp
}

// putMany stores blocks in one PUT and returns their statuses.
func (c *rawConn) putMany(blob []byte, ids []identity.CacheIdentity, payloads [][]byte) []wire.Status {
	c.t.Helper()
	blocks := make([]wire.PutBlock, len(ids))
	for i, id := range ids {
		blocks[i] = putBlock(mustKey(c.t, id), id, len(payloads[i]))
	}
	h, body := c.roundTrip(wire.OpPut, putBody(blob, blocks, payloads))
	if h.Flags&wire.FlagError != 0 {
		c.t.Fatalf("put: %v", decodeErr(c.t, body))
	}
	var resp wire.StatusResponse
	if err := resp.Decode(body, wire.DefaultMaxBatch); err != nil || len(resp.Statuses) != len(ids) {
		c.t.Fatalf("put response: %v %v", err, resp)
	}
	return resp.Statuses
}

func (c *rawConn) members() wire.MembersResponse {
	c.t.Helper()
	h, body := c.roundTrip(wire.OpMembers, nil)
	if h.Flags&wire.FlagError != 0 {
		c.t.Fatalf("members: %v", decodeErr(c.t, body))
	}
	var resp wire.MembersResponse
	if err := resp.Decode(body); err != nil {
		c.t.Fatalf("members answer: %v", err)
	}
	return resp
}

// TestVersionNegotiation: the session speaks the highest version both
// sides speak; MEMBERS exists only in version-2 sessions, and asking for it
// in a version-1 session leaves the connection usable.
func TestVersionNegotiation(t *testing.T) {
	ts := startServer(t, nil)
	pinned := startServer(t, func(c *Config) { c.MaxVersion = wire.Version1 })

	for _, tc := range []struct {
		name     string
		addr     string
		min, max uint8
		want     uint8
	}{
		{"new client, new server", ts.addr, 1, wire.VersionMax, wire.Version5},
		{"v4 client, new server", ts.addr, 1, 4, wire.Version4},
		{"v3 client, new server", ts.addr, 1, 3, wire.Version3},
		{"v1 client, new server", ts.addr, 1, 1, wire.Version1},
		{"v2-only client, new server", ts.addr, 2, 2, wire.Version2},
		{"client ahead of the server", ts.addr, 1, wire.VersionMax + 3, wire.Version5},
		{"new client, pinned server", pinned.addr, 1, wire.VersionMax, wire.Version1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, resp := helloV(t, tc.addr, "acme", tc.min, tc.max)
			if resp.Version != tc.want {
				t.Fatalf("negotiated version %d, want %d", resp.Version, tc.want)
			}
			if tc.want == wire.Version1 {
				c.send(wire.OpMembers, nil)
				c.expectError(wire.CodeUnknownOpcode)
				// A body is skipped too.
				c.send(wire.OpMembers, []byte("ignored"))
				c.expectError(wire.CodeUnknownOpcode)
			} else if m := c.members(); m.Epoch != 0 || len(m.Members) != 0 {
				t.Fatalf("single node answered MEMBERS %+v, want epoch 0 and no members", m)
			}
			c.roundTrip(wire.OpPing, nil) // the connection carries on
		})
	}

	t.Run("v2-only client, pinned server", func(t *testing.T) {
		c := dialRaw(t, pinned.addr)
		c.send(wire.OpHello, (&wire.HelloRequest{MinVersion: 2, MaxVersion: 2, Tenant: "acme"}).AppendTo(nil))
		c.expectError(wire.CodeUnsupportedVersion)
		c.send(wire.OpMembers, nil)
		c.expectError(wire.CodeHelloRequired) // no session was opened
	})
	t.Run("max version 0 offered", func(t *testing.T) {
		c := dialRaw(t, ts.addr)
		c.send(wire.OpHello, (&wire.HelloRequest{MinVersion: 0, MaxVersion: 0, Tenant: "acme"}).AppendTo(nil))
		c.expectError(wire.CodeUnsupportedVersion)
	})
	t.Run("MaxVersion beyond VersionMax", func(t *testing.T) {
		_, err := New(Config{Store: ts.store, MaxVersion: wire.VersionMax + 1})
		if !errors.Is(err, ErrConfig) {
			t.Fatalf("New: %v, want ErrConfig", err)
		}
	})
	t.Run("MaxVersion default", func(t *testing.T) {
		if ts.srv.cfg.MaxVersion != wire.VersionMax {
			t.Fatalf("default MaxVersion %d, want %d", ts.srv.cfg.MaxVersion, wire.VersionMax)
		}
	})
}

// TestMembersAnswersTheView: MEMBERS carries the epoch and every member,
// draining ones flagged; it needs no body.
func TestMembersAnswersTheView(t *testing.T) {
	v := testView(t, 7, "node-b")
	ts, _ := startClusterServer(t, "node-a", v, nil)
	c, _ := helloV(t, ts.addr, "acme", 1, 2)
	got := c.members()
	if got.Epoch != 7 || len(got.Members) != v.Len() {
		t.Fatalf("MEMBERS: epoch %d, %d members; want 7 and %d", got.Epoch, len(got.Members), v.Len())
	}
	for i, m := range v.Members() {
		want := wire.MemberInfo{ID: string(m.ID), Addr: m.Addr, FaultDomain: m.FaultDomain,
			ProtoVersion: m.ProtoVersion, CapacityBytes: m.CapacityBytes}
		if m.Draining {
			want.Flags = wire.MemberDraining
		}
		if got.Members[i] != want {
			t.Fatalf("member %d: %+v, want %+v", i, got.Members[i], want)
		}
	}
	c.send(wire.OpMembers, []byte{1})
	c.expectError(wire.CodeMalformed)
	c.roundTrip(wire.OpPing, nil)
	// A new view shows at once.
	if _, err := ts.srv.AdvanceView(testView(t, 8)); err != nil {
		t.Fatal(err)
	}
	if got := c.members(); got.Epoch != 8 || got.Members[1].Flags != 0 {
		t.Fatalf("after the view change: %+v", got)
	}
}

// TestWrongEpochPerOperation: in a version-2 session every keyed operation
// that names a key this node does not own is refused as a whole with
// WRONG_EPOCH and the view's epoch; keys it owns are served.
func TestWrongEpochPerOperation(t *testing.T) {
	v := testView(t, 5)
	ts, _ := startClusterServer(t, "node-a", v, nil)
	own, foreign := ownedIDs(t, v, "node-a", 2)
	blob := mustCanonical(t, testNamespace("acme"))
	c, resp := helloV(t, ts.addr, "acme", 1, wire.VersionMax)
	if resp.Version != wire.VersionMax {
		t.Fatalf("session version %d", resp.Version)
	}
	mixed := wireKeysOf(t, own[0], foreign[0]) // one foreign key spoils the batch
	expectWrong := func(op string) {
		t.Helper()
		e := c.expectError(wire.CodeWrongEpoch)
		if e.Epoch != 5 {
			t.Fatalf("%s: WRONG_EPOCH carries epoch %d, want 5", op, e.Epoch)
		}
	}

	c.send(wire.OpLookup, (&wire.LookupRequest{Namespace: blob, LeaseTTLMillis: 1000, Keys: mixed}).AppendTo(nil))
	expectWrong("LOOKUP")
	c.send(wire.OpGet, (&wire.GetRequest{Namespace: blob, Keys: mixed}).AppendTo(nil))
	expectWrong("GET")
	c.send(wire.OpDelete, (&wire.DeleteRequest{Namespace: blob, Keys: mixed}).AppendTo(nil))
	expectWrong("DELETE")
	c.send(wire.OpAcquire, (&wire.AcquireRequest{Namespace: blob, Keys: mixed}).AppendTo(nil))
	expectWrong("ACQUIRE")
	// PUT: the payloads are skipped, so the stream stays in sync.
	payloads := [][]byte{testfix.Payload(30<<10, 1), testfix.Payload(20<<10, 2)}
	blocks := []wire.PutBlock{putBlock(mustKey(t, own[0]), own[0], len(payloads[0])), putBlock(mustKey(t, foreign[0]), foreign[0], len(payloads[1]))}
	c.send(wire.OpPut, putBody(blob, blocks, payloads))
	expectWrong("PUT")
	c.roundTrip(wire.OpPing, nil)
	if ts.store.Stats().Blocks != 0 {
		t.Fatal("a refused PUT stored a block")
	}

	// Owned keys are served.
	if st := c.putMany(blob, own, [][]byte{payloads[0], payloads[1]}); st[0] != wire.StatusStored || st[1] != wire.StatusStored {
		t.Fatalf("put of owned keys: %v", st)
	}
	ownKeys := wireKeysOf(t, own...)
	if lr := c.lookup(blob, 0, ownKeys); lr.Hits != 2 {
		t.Fatalf("lookup of owned keys: %+v", lr)
	}
	gr, payload, _ := c.get(blob, 0, mustKey(t, own[0]), mustKey(t, own[1]))
	if gr.Blocks[0].Status != wire.StatusHit || gr.Blocks[1].Status != wire.StatusHit {
		t.Fatalf("get of owned keys: %+v", gr.Blocks)
	}
	equalBytes(t, payload, append(append([]byte(nil), payloads[0]...), payloads[1]...))
	if e := c.acquire(blob, mustKey(t, own[0]))[0]; e.Outcome != wire.AcquireHit {
		t.Fatalf("acquire of an owned cached key: %s", e.Outcome)
	}
	_, body := c.roundTrip(wire.OpDelete, (&wire.DeleteRequest{Namespace: blob, Keys: ownKeys[1:]}).AppendTo(nil))
	var dr wire.StatusResponse
	if err := dr.Decode(body, 1); err != nil || dr.Statuses[0] != wire.StatusDeleted {
		t.Fatalf("delete of an owned key: %v %v", dr, err)
	}
	st := statsOf(ts.srv)
	if st["wrong_epoch"] != 5 || st["errors_wrong_epoch"] != 5 || st["cluster_epoch"] != 5 || st["control_mode"] != 0 {
		t.Fatalf("stats: wrong_epoch %d errors_wrong_epoch %d cluster_epoch %d control_mode %d",
			st["wrong_epoch"], st["errors_wrong_epoch"], st["cluster_epoch"], st["control_mode"])
	}
}

// TestVersion1SessionIsNotRouted: a version-1 client cannot route, so a
// cluster node serves it from its own hot tier whoever owns the key; the
// same node refuses the same key to a version-2 session.
func TestVersion1SessionIsNotRouted(t *testing.T) {
	v := testView(t, 3)
	ts, _ := startClusterServer(t, "node-a", v, nil)
	_, foreign := ownedIDs(t, v, "node-a", 1)
	blob := mustCanonical(t, testNamespace("acme"))
	old := helloConn(t, ts.addr, "acme") // offers version 1 only
	if st := old.put(blob, foreign[0], testfix.Payload(10<<10, 4)); st != wire.StatusStored {
		t.Fatalf("v1 put: %s", st)
	}
	resp, payload, _ := old.get(blob, 0, mustKey(t, foreign[0]))
	if resp.Blocks[0].Status != wire.StatusHit {
		t.Fatalf("v1 get: %s", resp.Blocks[0].Status)
	}
	equalBytes(t, payload, testfix.Payload(10<<10, 4))

	routed, _ := helloV(t, ts.addr, "acme", 1, 2)
	routed.send(wire.OpGet, (&wire.GetRequest{Namespace: blob, Keys: wireKeysOf(t, foreign[0])}).AppendTo(nil))
	routed.expectError(wire.CodeWrongEpoch)
	if n := statsOf(ts.srv)["wrong_epoch"]; n != 1 {
		t.Fatalf("wrong_epoch %d, want 1", n)
	}
}

// TestAdvanceViewFencesFills: a new view fences the fills granted under an
// older epoch (their commit answers FENCED), except on a node that drains
// in the new view: it finishes the fills it granted.
func TestAdvanceViewFencesFills(t *testing.T) {
	blob := mustCanonical(t, testNamespace("acme"))
	t.Run("fenced", func(t *testing.T) {
		v := testView(t, 1)
		ts, _ := startClusterServer(t, "node-a", v, nil)
		own, _ := ownedIDs(t, v, "node-a", 1)
		c, _ := helloV(t, ts.addr, "acme", 1, 2)
		e := c.acquire(blob, mustKey(t, own[0]))[0]
		if e.Outcome != wire.AcquireLead {
			t.Fatalf("acquire: %s", e.Outcome)
		}
		n, err := ts.srv.AdvanceView(testView(t, 2))
		if err != nil || n != 1 {
			t.Fatalf("AdvanceView fenced %d fills (%v), want 1", n, err)
		}
		if st := c.commit(blob, e.Token, own[0], testfix.Payload(8<<10, 1)); st != wire.StatusFenced {
			t.Fatalf("commit after the view change: %s, want FENCED", st)
		}
		// An older or equal view changes nothing.
		if n, err := ts.srv.AdvanceView(testView(t, 2)); n != 0 || err != nil {
			t.Fatalf("same epoch again: %d %v", n, err)
		}
	})
	t.Run("draining finishes its fills", func(t *testing.T) {
		v := testView(t, 1)
		ts, cl := startClusterServer(t, "node-a", v, nil)
		own, _ := ownedIDs(t, v, "node-a", 1)
		c, _ := helloV(t, ts.addr, "acme", 1, 2)
		e := c.acquire(blob, mustKey(t, own[0]))[0]
		if e.Outcome != wire.AcquireLead {
			t.Fatalf("acquire: %s", e.Outcome)
		}
		n, err := ts.srv.AdvanceView(testView(t, 2, "node-a"))
		if err != nil || n != 0 {
			t.Fatalf("AdvanceView to a view where self drains fenced %d fills (%v)", n, err)
		}
		if !cl.Draining() || ts.srv.InFlightFills() != 1 {
			t.Fatalf("draining %v, in-flight fills %d", cl.Draining(), ts.srv.InFlightFills())
		}
		if st := c.commit(blob, e.Token, own[0], testfix.Payload(8<<10, 1)); st != wire.StatusStored {
			t.Fatalf("commit while draining: %s, want STORED", st)
		}
		if ts.srv.InFlightFills() != 0 {
			t.Fatalf("%d fills still in flight", ts.srv.InFlightFills())
		}
		// A draining node owns no key: new requests go elsewhere.
		c.send(wire.OpAcquire, (&wire.AcquireRequest{Namespace: blob, Keys: wireKeysOf(t, own[0])}).AppendTo(nil))
		if e := c.expectError(wire.CodeWrongEpoch); e.Epoch != 2 {
			t.Fatalf("WRONG_EPOCH epoch %d, want 2", e.Epoch)
		}
	})
}

// TestControlModes: read-only serves reads but stores nothing; unknown
// serves nothing (and refuses nothing with WRONG_EPOCH: no view is
// trusted). DELETE works in every mode.
func TestControlModes(t *testing.T) {
	v := testView(t, 4)
	ts, cl := startClusterServer(t, "node-a", v, nil)
	own, foreign := ownedIDs(t, v, "node-a", 3)
	blob := mustCanonical(t, testNamespace("acme"))
	c, _ := helloV(t, ts.addr, "acme", 1, 2)
	old := helloConn(t, ts.addr, "acme")
	v4, hr := helloV(t, ts.addr, "acme", 1, wire.Version4)
	if hr.Version != wire.Version4 {
		t.Fatalf("negotiated version %d, want 4", hr.Version)
	}
	cached := own[:2]
	if st := c.putMany(blob, cached, [][]byte{testfix.Payload(9<<10, 1), testfix.Payload(9<<10, 2)}); st[0] != wire.StatusStored || st[1] != wire.StatusStored {
		t.Fatalf("live put: %v", st)
	}
	ownKeys := wireKeysOf(t, own...)

	cl.SetMode(ControlReadOnly)
	if cl.Mode() != ControlReadOnly || statsOf(ts.srv)["control_mode"] != 1 {
		t.Fatal("mode not read-only")
	}
	t.Run("read-only", func(t *testing.T) {
		if lr := c.lookup(blob, 0, ownKeys); lr.Hits != 2 {
			t.Fatalf("lookup: %+v", lr)
		}
		resp, payload, _ := c.get(blob, 0, mustKey(t, cached[0]))
		if resp.Blocks[0].Status != wire.StatusHit {
			t.Fatal("read-only GET missed a cached block")
		}
		equalBytes(t, payload, testfix.Payload(9<<10, 1))
		// Writes store nothing, on every session, and the stream stays in
		// sync after the skipped payload. A version-4 session is told
		// READ_ONLY; older sessions, which do not know it, NO_SPACE.
		for _, s := range []*rawConn{c, old} {
			if st := s.putMany(blob, own[2:], [][]byte{testfix.Payload(7<<10, 3)}); st[0] != wire.StatusNoSpace {
				t.Fatalf("read-only put: %s, want NO_SPACE", st[0])
			}
			s.roundTrip(wire.OpPing, nil)
		}
		if st := v4.putMany(blob, own[2:], [][]byte{testfix.Payload(7<<10, 3)}); st[0] != wire.StatusReadOnly {
			t.Fatalf("read-only put in a version-4 session: %s, want READ_ONLY", st[0])
		}
		v4.roundTrip(wire.OpPing, nil)
		if e := c.acquire(blob, mustKey(t, cached[0]), mustKey(t, own[2])); e[0].Outcome != wire.AcquireHit || e[1].Outcome != wire.AcquireDenied {
			t.Fatalf("read-only acquire: %s %s, want HIT DENIED", e[0].Outcome, e[1].Outcome)
		}
		if ts.srv.InFlightFills() != 0 {
			t.Fatal("read-only ACQUIRE started a fill")
		}
		// The ownership check still holds.
		c.send(wire.OpGet, (&wire.GetRequest{Namespace: blob, Keys: wireKeysOf(t, foreign[0])}).AppendTo(nil))
		c.expectError(wire.CodeWrongEpoch)
	})

	cl.SetMode(ControlUnknown)
	t.Run("unknown", func(t *testing.T) {
		for _, s := range []*rawConn{c, old} {
			if lr := s.lookup(blob, 5000, ownKeys); lr.Hits != 0 || lr.LeaseID != 0 {
				t.Fatalf("unknown-mode lookup: %+v, want no hits and no lease", lr)
			}
			// Foreign keys are misses too: no WRONG_EPOCH without a view.
			resp, payload, _ := s.get(blob, 0, mustKey(t, cached[0]), mustKey(t, foreign[0]))
			if resp.Blocks[0].Status != wire.StatusMiss || resp.Blocks[1].Status != wire.StatusMiss || len(payload) != 0 {
				t.Fatalf("unknown-mode get: %+v", resp.Blocks)
			}
			if st := s.putMany(blob, own[2:], [][]byte{testfix.Payload(7<<10, 3)}); st[0] != wire.StatusNoSpace {
				t.Fatalf("unknown-mode put: %s", st[0])
			}
			e := s.acquire(blob, mustKey(t, cached[0]), mustKey(t, own[2]))
			if e[0].Outcome != wire.AcquireDenied || e[1].Outcome != wire.AcquireDenied {
				t.Fatalf("unknown-mode acquire: %s %s, want DENIED DENIED", e[0].Outcome, e[1].Outcome)
			}
		}
		if st := v4.putMany(blob, own[2:], [][]byte{testfix.Payload(7<<10, 3)}); st[0] != wire.StatusReadOnly {
			t.Fatalf("unknown-mode put in a version-4 session: %s, want READ_ONLY", st[0])
		}
		// DELETE is allowed.
		_, body := c.roundTrip(wire.OpDelete, (&wire.DeleteRequest{Namespace: blob, Keys: wireKeysOf(t, cached[1])}).AppendTo(nil))
		var dr wire.StatusResponse
		if err := dr.Decode(body, 1); err != nil || dr.Statuses[0] != wire.StatusDeleted {
			t.Fatalf("unknown-mode delete: %v %v", dr, err)
		}
	})

	cl.SetMode(ControlLive)
	resp, _, _ := c.get(blob, 0, mustKey(t, cached[0]))
	if resp.Blocks[0].Status != wire.StatusHit {
		t.Fatal("back to live: the cached block is gone")
	}
	st := statsOf(ts.srv)
	// Read-only: 3 PUT blocks + 1 denied ACQUIRE entry. Unknown, per
	// old session: 3 LOOKUP keys, 2 GET keys, 1 PUT block, 2 ACQUIRE
	// entries; and the version-4 session's PUT block.
	if want := uint64(4 + 2*(3+2+1+2) + 1); st["readonly_refused"] != want {
		t.Fatalf("readonly_refused %d, want %d", st["readonly_refused"], want)
	}
	if st["control_mode"] != 0 || st["cluster_epoch"] != 4 || st["wrong_epoch"] != 1 {
		t.Fatalf("stats: control_mode %d cluster_epoch %d wrong_epoch %d", st["control_mode"], st["cluster_epoch"], st["wrong_epoch"])
	}
	if ts.store.Stats().Blocks != 1 {
		t.Fatalf("%d blocks cached, want 1", ts.store.Stats().Blocks)
	}
}

// TestStatsWithoutCluster: the cluster entries exist on a single node,
// at zero.
func TestStatsWithoutCluster(t *testing.T) {
	ts := startServer(t, nil)
	helloConn(t, ts.addr, "acme").roundTrip(wire.OpPing, nil) // Serve runs before the cleanup's Shutdown
	st := statsOf(ts.srv)
	for _, name := range []string{"wrong_epoch", "cluster_epoch", "control_mode", "readonly_refused"} {
		v, ok := st[name]
		if !ok || v != 0 {
			t.Fatalf("%s = %d (present %v), want 0", name, v, ok)
		}
	}
	if len(ts.srv.Stats()) > wire.MaxStatEntries {
		t.Fatalf("%d stat entries exceed %d", len(ts.srv.Stats()), wire.MaxStatEntries)
	}
}

// TestMembersNeedsNoRight: MEMBERS reveals no block, so a session needs
// no ACL right for it (the ops tenant has only admin), and it is not
// mutating (no replay stamp).
func TestMembersNeedsNoRight(t *testing.T) {
	f := startSecure(t, nil)
	c := dialRaw(t, f.ts.addr)
	req := wire.HelloRequest{MinVersion: 1, MaxVersion: wire.VersionMax, Tenant: "ops", Client: "test",
		HasAuth: true, Auth: wire.AuthBearer, Credential: secretOps}
	h, body := c.roundTrip(wire.OpHello, req.AppendTo(nil))
	if h.Flags&wire.FlagError != 0 {
		t.Fatalf("hello: %v", decodeErr(t, body))
	}
	var resp wire.HelloResponse
	if err := resp.Decode(body); err != nil || resp.Version != wire.VersionMax || resp.Session&wire.SessionStampRequired == 0 {
		t.Fatalf("hello: %+v %v", resp, err)
	}
	if m := c.members(); m.Epoch != 0 {
		t.Fatalf("members: %+v", m)
	}
}
