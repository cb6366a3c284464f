package clienttest_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/gpucache/gpucache/api/wire"
	. "github.com/gpucache/gpucache/client"
	"github.com/gpucache/gpucache/internal/control"
	"github.com/gpucache/gpucache/internal/server"
	"github.com/gpucache/gpucache/internal/server/servertest"
)

// tnode is one real in-process server of a test cluster.
type tnode struct {
	id    control.MemberID
	addr  string
	proto uint8
	rs    *servertest.Server
	cl    *server.Cluster
}

// testCluster is n real servers on loopback ports. Each server is a
// cluster member from the start, with an empty view until install gives
// every one of them the same view (the listen addresses are known only
// once they listen). proto[i], when given, pins server i to that protocol
// version.
type testCluster struct {
	t     testing.TB
	nodes []*tnode
}

func startCluster(t testing.TB, n int, proto ...uint8) *testCluster {
	t.Helper()
	tc := &testCluster{t: t}
	for i := range n {
		nd := &tnode{id: control.MemberID(fmt.Sprintf("node-%c", 'a'+i)), proto: wire.VersionMax}
		if i < len(proto) && proto[i] != 0 {
			nd.proto = proto[i]
		}
		cl := server.NewCluster(nd.id, control.View{})
		nd.cl = cl
		nd.rs = servertest.StartWith(t, "127.0.0.1:0", wire.Limits{}, func(c *server.Config) {
			c.Cluster = cl
			c.MaxVersion = nd.proto
		})
		nd.addr = nd.rs.Addr
		tc.nodes = append(tc.nodes, nd)
	}
	tc.install(tc.view(1), tc.nodes...)
	return tc
}

// view returns the view of every node under epoch, with the given nodes
// draining.
func (tc *testCluster) view(epoch uint64, draining ...*tnode) control.View {
	tc.t.Helper()
	var ms []control.Member
	for i, nd := range tc.nodes {
		m := control.Member{ID: nd.id, Addr: nd.addr, FaultDomain: fmt.Sprintf("rack-%d", i), ProtoVersion: nd.proto, CapacityBytes: 1 << 30}
		for _, d := range draining {
			m.Draining = m.Draining || d == nd
		}
		ms = append(ms, m)
	}
	v, err := control.NewView(epoch, ms)
	if err != nil {
		tc.t.Fatal(err)
	}
	return v
}

// install gives v to the servers of nodes (AdvanceView, as the daemon's
// membership watch would).
func (tc *testCluster) install(v control.View, nodes ...*tnode) {
	tc.t.Helper()
	for _, nd := range nodes {
		if _, err := nd.rs.Srv.AdvanceView(v); err != nil {
			tc.t.Fatal(err)
		}
	}
}

// owner is the node that owns key under v.
func (tc *testCluster) owner(v control.View, key BlockKey) *tnode {
	tc.t.Helper()
	m, ok := control.Owner(v, key)
	if !ok {
		tc.t.Fatal("no owner")
	}
	for _, nd := range tc.nodes {
		if nd.id == m.ID {
			return nd
		}
	}
	tc.t.Fatalf("owner %s is not a node", m.ID)
	return nil
}

// blocksOn counts the blocks a node's hot tier holds.
func (nd *tnode) blocksOn() uint64 { return nd.rs.Store.Stats().Blocks }

func dialCluster(t *testing.T, seeds []string, mod func(*ClusterConfig)) *Cluster {
	t.Helper()
	cfg := ClusterConfig{Seeds: seeds, Node: Config{Tenant: "acme", Conns: 2}, RefreshInterval: -1}
	if mod != nil {
		mod(&cfg)
	}
	c, err := DialCluster(testCtx(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// dialAndPut dials a Cluster through tc's first node and stores 30 blocks
// of 8 KiB (testBlocks with seed) through it.
func (tc *testCluster) dialAndPut(t *testing.T, seed byte) (*Cluster, context.Context, Namespace, []PutBlock) {
	t.Helper()
	c := dialCluster(t, []string{tc.nodes[0].addr}, nil)
	ctx := testCtx(t)
	ns := testNS("acme")
	blocks := testBlocks(t, ns, 30, 8<<10, seed)
	if _, err := c.Put(ctx, ns, blocks); err != nil {
		t.Fatal(err)
	}
	return c, ctx, ns, blocks
}

// checkGet reads keys through c and checks every key in hit is a hit with
// want's bytes, and every other key a miss.
func checkGet(t *testing.T, res []GetResult, blocks []PutBlock, hit func(i int) bool) {
	t.Helper()
	for i, r := range res {
		switch {
		case hit(i) && !r.Hit:
			t.Fatalf("block %d: miss (%v), want a hit", i, r.Reason)
		case !hit(i) && r.Hit:
			t.Fatalf("block %d: hit, want a miss", i)
		case r.Hit && !bytes.Equal(r.Data, blocks[i].Data):
			t.Fatalf("block %d: wrong bytes", i)
		case !r.Hit && (r.Reason == nil || r.Data != nil):
			t.Fatalf("block %d: miss without a reason or with data", i)
		}
	}
}

func all(int) bool { return true }

// TestClusterRoutesByOwner: a batch is split over the three owners; every
// block lands on its owner only and reads back byte-identical.
func TestClusterRoutesByOwner(t *testing.T) {
	tc := startCluster(t, 3)
	// The background refresh runs too: Close must stop it (goleak).
	c := dialCluster(t, []string{tc.nodes[1].addr}, func(cfg *ClusterConfig) { cfg.RefreshInterval = 0 })
	ctx := testCtx(t)
	ns := testNS("acme")
	blocks := testBlocks(t, ns, 40, 8<<10, 1)
	keys := keysOf(blocks)
	v := tc.view(1)
	if got := c.View(); got.Epoch != 1 || len(got.Members) != 3 || got.Members[0].Addr != tc.nodes[0].addr {
		t.Fatalf("view %+v", got)
	}

	st, err := c.Put(ctx, ns, blocks)
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range st {
		if s != StatusStored {
			t.Fatalf("put %d: %s", i, s)
		}
	}
	checkGet(t, c.Get(ctx, ns, keys), blocks, all)

	// Each node holds exactly the blocks it owns, and serves them to a
	// plain (routing) client of its own.
	per := map[*tnode][]BlockKey{}
	for _, k := range keys {
		nd := tc.owner(v, k)
		per[nd] = append(per[nd], k)
	}
	for _, nd := range tc.nodes {
		if len(per[nd]) == 0 {
			t.Fatalf("%s owns none of %d keys", nd.id, len(keys))
		}
		if got := nd.blocksOn(); got != uint64(len(per[nd])) {
			t.Fatalf("%s holds %d blocks, owns %d", nd.id, got, len(per[nd]))
		}
		direct := dialTest(t, nd.addr, nil)
		if direct.ProtocolVersion() != wire.VersionMax {
			t.Fatalf("session version %d", direct.ProtocolVersion())
		}
		for _, r := range direct.Get(ctx, ns, per[nd]) {
			if !r.Hit {
				t.Fatalf("%s does not serve its own block: %v", nd.id, r.Reason)
			}
		}
	}
	if s := c.Stats(); s.RoutedBatches != 6 || s.WrongEpoch != 0 || s.Refreshes < 1 || s.Unreachable != 0 {
		t.Fatalf("stats %+v", s)
	}

	if hits, _, err := c.Lookup(ctx, ns, keys, 0); err != nil || hits != len(keys) {
		t.Fatalf("lookup: %d %v", hits, err)
	}
	// Delete one block in the middle: the run stops there.
	ds, err := c.Delete(ctx, ns, keys[17:18])
	if err != nil || ds[0] != StatusDeleted {
		t.Fatalf("delete: %v %v", ds, err)
	}
	if hits, _, err := c.Lookup(ctx, ns, keys, time.Second); err != nil || hits != 17 {
		t.Fatalf("lookup after delete: %d %v, want 17", hits, err)
	}
	checkGet(t, c.Get(ctx, ns, keys), blocks, func(i int) bool { return i != 17 })
}

// TestClusterViewChangeRetriesOnce: the servers move to a new view (one
// node drains) and the client does not know: the drained node refuses its
// keys with WRONG_EPOCH, the client refreshes and re-routes them once, and
// every block lands on its new owner.
func TestClusterViewChangeRetriesOnce(t *testing.T) {
	tc := startCluster(t, 3)
	c, ctx, ns, old := tc.dialAndPut(t, 1)
	before := c.Stats()

	x := tc.nodes[1]
	v2 := tc.view(2, x)
	tc.install(v2, tc.nodes...)
	fresh := testBlocks(t, ns, 30, 8<<10, 2)
	movedFromX := 0
	for _, b := range fresh {
		if tc.owner(tc.view(1), b.Key) == x {
			movedFromX++
		}
	}
	if movedFromX == 0 {
		t.Fatal("the drained node owned none of the new blocks under the old view")
	}
	st, err := c.Put(ctx, ns, fresh)
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range st {
		if s != StatusStored {
			t.Fatalf("put %d after the view change: %s", i, s)
		}
	}
	s := c.Stats()
	if s.WrongEpoch-before.WrongEpoch != 1 || s.Retries-before.Retries != 1 || s.Refreshes-before.Refreshes != 1 {
		t.Fatalf("stats %+v (before %+v): want one WRONG_EPOCH, one refresh, one retry", s, before)
	}
	if got := c.View(); got.Epoch != 2 || !got.Members[1].Draining {
		t.Fatalf("client view %+v, want epoch 2 with %s draining", got, x.id)
	}
	for _, b := range fresh {
		if tc.owner(v2, b.Key) == x {
			t.Fatal("a draining node owns a key")
		}
	}
	checkGet(t, c.Get(ctx, ns, keysOf(fresh)), fresh, all)
	// The old blocks of the drained node are misses now (their new owner
	// never had them), the others still hit: never another block's bytes.
	checkGet(t, c.Get(ctx, ns, keysOf(old)), old, func(i int) bool { return tc.owner(tc.view(1), old[i].Key) != x })
	if s2 := c.Stats(); s2.WrongEpoch != s.WrongEpoch {
		t.Fatalf("WRONG_EPOCH after the refresh: %+v", s2)
	}
}

// TestClusterSecondWrongEpochDegrades: only the drained node knows the new
// view, so the nodes the client re-routes to refuse the keys too (under
// the old view they belong to the drained node): the client does not
// retry again, the keys are misses and NO_SPACE.
func TestClusterSecondWrongEpochDegrades(t *testing.T) {
	tc := startCluster(t, 3)
	c, ctx, ns, blocks := tc.dialAndPut(t, 3)
	x := tc.nodes[2]
	tc.install(tc.view(2, x), x) // the others stay at epoch 1
	onX := func(i int) bool { return tc.owner(tc.view(1), blocks[i].Key) == x }
	before := c.Stats()
	res := c.Get(ctx, ns, keysOf(blocks))
	checkGet(t, res, blocks, func(i int) bool { return !onX(i) })
	for i, r := range res {
		if !onX(i) {
			continue
		}
		if e, ok := WrongEpoch(r.Reason); !ok || e != 1 {
			t.Fatalf("block %d: reason %v, want WRONG_EPOCH from a node at epoch 1", i, r.Reason)
		}
		if !errors.Is(r.Reason, ErrServer) {
			t.Fatalf("block %d: reason %v does not wrap ErrServer", i, r.Reason)
		}
	}
	s := c.Stats()
	if s.Retries-before.Retries != 1 || s.WrongEpoch-before.WrongEpoch < 2 || s.Refreshes-before.Refreshes != 1 {
		t.Fatalf("stats %+v (before %+v): want one retry after one refresh, and a second refusal", s, before)
	}
	// PUT degrades to NO_SPACE, not an error.
	more := testBlocks(t, ns, 30, 8<<10, 4)
	st, err := c.Put(ctx, ns, more)
	if err != nil {
		t.Fatal(err)
	}
	// The client routes by epoch 2 now. A node at epoch 1 refuses a whole
	// batch that holds a key moved off x, twice: that batch is NO_SPACE.
	// Batches to owners that got no moved key are stored.
	v1, v2 := tc.view(1), tc.view(2, x)
	refusing := map[*tnode]bool{}
	for _, b := range more {
		if tc.owner(v1, b.Key) == x {
			refusing[tc.owner(v2, b.Key)] = true
		}
	}
	for i, s := range st {
		want := StatusStored
		if refusing[tc.owner(v2, more[i].Key)] {
			want = StatusNoSpace
		}
		if s != want {
			t.Fatalf("put %d: %s, want %s", i, s, want)
		}
	}
}

// TestClusterNodeDown: a stopped node's keys are misses (and NO_SPACE, and
// the end of a Lookup run) well within the deadline; the others still hit.
func TestClusterNodeDown(t *testing.T) {
	tc := startCluster(t, 3)
	c, ctx, ns, blocks := tc.dialAndPut(t, 5)
	x := tc.nodes[1]
	x.rs.Stop()
	onX := func(i int) bool { return tc.owner(tc.view(1), blocks[i].Key) == x }

	dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	start := time.Now()
	res := c.Get(dctx, ns, keysOf(blocks))
	if took := time.Since(start); took > time.Second {
		t.Fatalf("Get took %v with one node down", took)
	}
	checkGet(t, res, blocks, func(i int) bool { return !onX(i) })
	for i, r := range res {
		if onX(i) && !errors.Is(r.Reason, ErrUnavailable) {
			t.Fatalf("block %d: reason %v, want ErrUnavailable", i, r.Reason)
		}
	}
	if c.Stats().Unreachable == 0 {
		t.Fatal("no unreachable owner counted")
	}
	st, err := c.Put(dctx, ns, testBlocks(t, ns, 30, 8<<10, 6))
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range st {
		if s != StatusStored && s != StatusNoSpace {
			t.Fatalf("put %d: %s", i, s)
		}
	}
	first := 0
	for first < len(blocks) && !onX(first) {
		first++
	}
	if hits, _, err := c.Lookup(dctx, ns, keysOf(blocks), 0); err != nil || hits != first {
		t.Fatalf("lookup: %d %v, want the run to stop at %d", hits, err, first)
	}
}

// TestClusterSilentNodeBoundedByContext: a member that accepts connections
// but never answers costs a call no more than its context.
func TestClusterSilentNodeBoundedByContext(t *testing.T) {
	tc := startCluster(t, 2)
	tc.nodes = append(tc.nodes, &tnode{id: "node-z", addr: silentPeer(t), proto: 2})
	v := tc.view(2)
	tc.install(v, tc.nodes[:2]...)
	c := dialCluster(t, []string{tc.nodes[0].addr}, func(cfg *ClusterConfig) { cfg.Node.DialTimeout = 10 * time.Second })
	if c.View().Epoch != 2 {
		t.Fatalf("view %+v", c.View())
	}
	ns := testNS("acme")
	blocks := testBlocks(t, ns, 30, 4<<10, 7)
	onZ := func(i int) bool { return tc.owner(v, blocks[i].Key).id == "node-z" }
	const limit = 300 * time.Millisecond
	ctx, cancel := context.WithTimeout(testCtx(t), limit)
	defer cancel()
	start := time.Now()
	st, err := c.Put(ctx, ns, blocks)
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	if took > limit+100*time.Millisecond {
		t.Fatalf("Put took %v, context allowed %v", took, limit)
	}
	for i, s := range st {
		if want := map[bool]Status{true: StatusNoSpace, false: StatusStored}[onZ(i)]; s != want {
			t.Fatalf("put %d: %s, want %s", i, s, want)
		}
	}
}

// TestClusterMixedVersions: one member speaks only version 1. Placement
// still routes to it (its session is of version 1 and never refuses), the
// seed of version 1 is skipped for the view, and payloads are right.
func TestClusterMixedVersions(t *testing.T) {
	tc := startCluster(t, 3, wire.Version1)
	old := tc.nodes[0]
	c := dialCluster(t, []string{old.addr, tc.nodes[2].addr}, nil)
	if v := c.View(); v.Epoch != 1 || v.Members[0].ProtoVersion != 1 {
		t.Fatalf("view %+v", v)
	}
	ctx := testCtx(t)
	ns := testNS("acme")
	blocks := testBlocks(t, ns, 30, 8<<10, 8)
	st, err := c.Put(ctx, ns, blocks)
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range st {
		if s != StatusStored {
			t.Fatalf("put %d: %s", i, s)
		}
	}
	checkGet(t, c.Get(ctx, ns, keysOf(blocks)), blocks, all)
	want := 0
	for _, b := range blocks {
		if tc.owner(tc.view(1), b.Key) == old {
			want++
		}
	}
	if want == 0 || old.blocksOn() != uint64(want) {
		t.Fatalf("the version-1 node holds %d blocks, owns %d", old.blocksOn(), want)
	}
	direct := dialTest(t, old.addr, nil)
	if direct.ProtocolVersion() != wire.Version1 {
		t.Fatalf("session version %d with a pinned server", direct.ProtocolVersion())
	}
	if _, err := direct.Members(ctx); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("Members on a version-1 session: %v", err)
	}

	t.Run("version-1 seeds only: single node", func(t *testing.T) {
		single := dialCluster(t, []string{old.addr}, nil)
		if v := single.View(); v.Epoch != 0 || len(v.Members) != 0 {
			t.Fatalf("view %+v, want the single-node fallback", v)
		}
		more := testBlocks(t, ns, 10, 4<<10, 9)
		before := old.blocksOn()
		if _, err := single.Put(ctx, ns, more); err != nil {
			t.Fatal(err)
		}
		if old.blocksOn() != before+10 {
			t.Fatalf("the single node holds %d blocks, want %d", old.blocksOn(), before+10)
		}
		checkGet(t, single.Get(ctx, ns, keysOf(more)), more, all)
	})
}

// TestClusterSingleNode: a seed that is no cluster (epoch 0) takes every
// key.
func TestClusterSingleNode(t *testing.T) {
	rs := startServer(t, "127.0.0.1:0", wire.Limits{})
	c := dialCluster(t, []string{"127.0.0.1:1", rs.Addr}, func(cfg *ClusterConfig) { cfg.Node.DialTimeout = time.Second })
	if v := c.View(); v.Epoch != 0 {
		t.Fatalf("view %+v", v)
	}
	ctx := testCtx(t)
	ns := testNS("acme")
	blocks := testBlocks(t, ns, 12, 4<<10, 10)
	if _, err := c.Put(ctx, ns, blocks); err != nil {
		t.Fatal(err)
	}
	if rs.Store.Stats().Blocks != 12 {
		t.Fatalf("the node holds %d blocks", rs.Store.Stats().Blocks)
	}
	checkGet(t, c.Get(ctx, ns, keysOf(blocks)), blocks, all)
	if hits, _, err := c.Lookup(ctx, ns, keysOf(blocks), 0); hits != 12 || err != nil {
		t.Fatalf("lookup %d %v", hits, err)
	}
	if err := c.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := DialCluster(ctx, ClusterConfig{}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("no seeds: %v", err)
	}
	if _, err := DialCluster(ctx, ClusterConfig{Seeds: []string{"127.0.0.1:1"}}); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("dead seed: %v", err)
	}
	c.Close()
	if _, err := c.Put(ctx, ns, blocks); !errors.Is(err, ErrClosed) {
		t.Fatalf("put after close: %v", err)
	}
	if r := c.Get(ctx, ns, keysOf(blocks[:1])); r[0].Hit || !errors.Is(r[0].Reason, ErrClosed) {
		t.Fatalf("get after close: %+v", r[0])
	}
}

// TestClusterGetOrFill: the chain's blocks are split over their owners;
// across two concurrent callers every block is computed once, each result
// is in chain order, and the fill's indices are chain indices.
func TestClusterGetOrFill(t *testing.T) {
	tc := startCluster(t, 3)
	ns := testNS("acme")
	const blocks, size = 24, 4 << 10
	tokens, keys := chainOf(t, ns, blocks)
	cf := newCountingFill(keys, size)
	var mu sync.Mutex
	var seen [][]int
	fill := func(ctx context.Context, idx []int) ([][]byte, error) {
		mu.Lock()
		seen = append(seen, append([]int(nil), idx...))
		mu.Unlock()
		return cf.fill(ctx, idx)
	}
	var wg sync.WaitGroup
	results := make([][][]byte, 2)
	reports := make([]FillReport, 2)
	for i := range 2 {
		c := dialCluster(t, []string{tc.nodes[i].addr}, nil)
		wg.Go(func() {
			var err error
			results[i], reports[i], err = c.GetOrFill(testCtx(t), ns, tokens, fill)
			if err != nil {
				t.Errorf("caller %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	for i, res := range results {
		if len(res) != blocks {
			t.Fatalf("caller %d: %d blocks", i, len(res))
		}
		for j, b := range res {
			if !bytes.Equal(b, blockPayload(keys[j], size)) {
				t.Fatalf("caller %d block %d: wrong bytes", i, j)
			}
		}
		r := reports[i]
		if r.Hits+r.Led+r.Joined+r.Promoted+r.Local != blocks {
			t.Fatalf("caller %d report %+v does not add up to %d", i, r, blocks)
		}
	}
	for j := range keys {
		if n := cf.calls[j].Load(); n != 1 {
			t.Fatalf("block %d computed %d times, want 1", j, n)
		}
	}
	// Every fill call got the blocks of one owner.
	v := tc.view(1)
	for _, idx := range seen {
		for _, i := range idx {
			if tc.owner(v, keys[i]) != tc.owner(v, keys[idx[0]]) {
				t.Fatalf("one fill call spans owners: %v", idx)
			}
		}
	}
	// Now everything is cached, on its owner.
	c := dialCluster(t, []string{tc.nodes[2].addr}, nil)
	res, rep, err := c.GetOrFill(testCtx(t), ns, tokens, fill)
	if err != nil || rep.Hits != blocks {
		t.Fatalf("second GetOrFill: %+v %v", rep, err)
	}
	for j, b := range res {
		if !bytes.Equal(b, blockPayload(keys[j], size)) {
			t.Fatalf("cached block %d: wrong bytes", j)
		}
	}
}

// TestClusterGetOrFillAfterViewChange: the servers drain a node the client
// still routes to; its blocks are re-routed once and filled on their new
// owners. With the drained node then stopped and a client that never
// learns the view, its blocks are computed locally.
func TestClusterGetOrFillAfterViewChange(t *testing.T) {
	tc := startCluster(t, 3)
	ns := testNS("acme")
	const blocks, size = 24, 4 << 10
	tokens, keys := chainOf(t, ns, blocks)
	cf := newCountingFill(keys, size)
	c := dialCluster(t, []string{tc.nodes[0].addr}, nil)
	stale := dialCluster(t, []string{tc.nodes[0].addr}, nil) // never refreshed below
	x := tc.nodes[0]
	v2 := tc.view(2, x)
	tc.install(v2, tc.nodes...)
	onX := 0
	for _, k := range keys {
		if tc.owner(tc.view(1), k) == x {
			onX++
		}
	}
	if onX == 0 {
		t.Fatal("the drained node owned no block")
	}
	res, rep, err := c.GetOrFill(testCtx(t), ns, tokens, cf.fill)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Led != blocks || rep.Local != 0 {
		t.Fatalf("report %+v, want every block led on its owner", rep)
	}
	if s := c.Stats(); s.WrongEpoch != 1 || s.Retries != 1 {
		t.Fatalf("stats %+v", s)
	}
	for j, b := range res {
		if !bytes.Equal(b, blockPayload(keys[j], size)) {
			t.Fatalf("block %d: wrong bytes", j)
		}
		if n := cf.calls[j].Load(); n != 1 {
			t.Fatalf("block %d computed %d times", j, n)
		}
	}
	if x.blocksOn() != 0 {
		t.Fatalf("the draining node holds %d blocks", x.blocksOn())
	}

	// A client still at epoch 1 whose owner (the drained node) is now
	// gone: its blocks are computed here, the others are hits on owners
	// whose keys did not move.
	x.rs.Stop()
	res, rep, err = stale.GetOrFill(testCtx(t), ns, tokens, cf.fill)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Hits+rep.Local != blocks || rep.Local != onX {
		t.Fatalf("stale client report %+v, want %d local (owner down) and the rest hits", rep, onX)
	}
	for j, b := range res {
		if !bytes.Equal(b, blockPayload(keys[j], size)) {
			t.Fatalf("stale client block %d: wrong bytes", j)
		}
	}
}

// TestClientVersionAndWrongEpoch: a Client negotiates version 2 with a new
// server and reads a single node's MEMBERS as epoch 0; a cluster node's
// WRONG_EPOCH reaches the caller of Get, Put and Lookup with its epoch.
func TestClientVersionAndWrongEpoch(t *testing.T) {
	rs := startServer(t, "127.0.0.1:0", wire.Limits{})
	c := dialTest(t, rs.Addr, nil)
	ctx := testCtx(t)
	if c.ProtocolVersion() != wire.VersionMax {
		t.Fatalf("version %d", c.ProtocolVersion())
	}
	if v, err := c.Members(ctx); err != nil || v.Epoch != 0 || len(v.Members) != 0 {
		t.Fatalf("single node MEMBERS: %+v %v", v, err)
	}
	if _, ok := WrongEpoch(errors.New("x")); ok {
		t.Fatal("WrongEpoch of a plain error")
	}

	tc := startCluster(t, 2)
	tc.install(tc.view(9), tc.nodes...)
	a := tc.nodes[0]
	direct := dialTest(t, a.addr, nil)
	v, err := direct.Members(ctx)
	if err != nil || v.Epoch != 9 || len(v.Members) != 2 || v.Members[1].Addr != tc.nodes[1].addr {
		t.Fatalf("MEMBERS: %+v %v", v, err)
	}
	ns := testNS("acme")
	blocks := testBlocks(t, ns, 20, 4<<10, 11)
	var foreign []PutBlock
	for _, b := range blocks {
		if tc.owner(tc.view(9), b.Key) != a {
			foreign = append(foreign, b)
		}
	}
	if len(foreign) == 0 {
		t.Fatal("node a owns every block")
	}
	r := direct.Get(ctx, ns, keysOf(foreign))
	if e, ok := WrongEpoch(r[0].Reason); !ok || e != 9 || r[0].Hit {
		t.Fatalf("get: %+v", r[0])
	}
	if _, err := direct.Put(ctx, ns, foreign); err == nil {
		t.Fatal("put of a foreign key succeeded")
	} else if e, ok := WrongEpoch(err); !ok || e != 9 {
		t.Fatalf("put: %v", err)
	}
	if _, _, err := direct.Lookup(ctx, ns, keysOf(foreign), 0); err == nil {
		t.Fatal("lookup of a foreign key succeeded")
	} else if e, ok := WrongEpoch(err); !ok || e != 9 {
		t.Fatalf("lookup: %v", err)
	}
}
