package clienttest_test

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/gpucache/gpucache/api/wire"
	. "github.com/gpucache/gpucache/client"
	"github.com/gpucache/gpucache/internal/control"
	"github.com/gpucache/gpucache/internal/server"
	"github.com/gpucache/gpucache/internal/server/servertest"
)

// TestPutOpaque: a block stored by name is read back by its OpaqueKey, a
// second store is StatusExists with the first bytes kept, another tenant's
// namespace misses it, and Delete removes it.
func TestPutOpaque(t *testing.T) {
	rs := startServer(t, "127.0.0.1:0", wire.Limits{})
	c := dialTest(t, rs.Addr, nil)
	ctx := testCtx(t)
	ns := testNS("acme")
	name := []byte("llama@00000000@0@ab12cd")
	d, err := ns.Digest()
	if err != nil {
		t.Fatal(err)
	}
	key := OpaqueKey(d, name)
	one, two := bytes.Repeat([]byte{1}, 5000), bytes.Repeat([]byte{2}, 5000)
	if st, err := c.PutOpaque(ctx, ns, name, one); err != nil || st != StatusStored {
		t.Fatalf("first store: %v %v", st, err)
	}
	if st, err := c.PutOpaque(ctx, ns, name, two); err != nil || st != StatusExists {
		t.Fatalf("second store: %v %v", st, err)
	}
	if r := c.Get(ctx, ns, []BlockKey{key})[0]; !r.Hit || !bytes.Equal(r.Data, one) {
		t.Fatalf("get: hit %v reason %v", r.Hit, r.Reason)
	}
	other := dialTest(t, rs.Addr, func(c *Config) { c.Tenant = "beta" })
	od, _ := testNS("beta").Digest()
	if r := other.Get(ctx, testNS("beta"), []BlockKey{OpaqueKey(od, name)})[0]; r.Hit {
		t.Fatal("tenant beta reads acme's opaque block")
	}
	if st, err := c.Delete(ctx, ns, []BlockKey{key}); err != nil || st[0] != StatusDeleted {
		t.Fatalf("delete: %v %v", st, err)
	}
	for _, bad := range [][]byte{nil, make([]byte, wire.MaxOpaqueName+1)} {
		if _, err := c.PutOpaque(ctx, ns, bad, one); !errors.Is(err, ErrInvalid) {
			t.Fatalf("name of %d bytes: %v", len(bad), err)
		}
	}
}

// TestPutOpaqueOldServer: against a server pinned to version 2 PutOpaque
// is ErrUnsupported and sends nothing.
func TestPutOpaqueOldServer(t *testing.T) {
	rs := servertest.StartWith(t, "127.0.0.1:0", wire.Limits{}, func(c *server.Config) { c.MaxVersion = wire.Version2 })
	c := dialTest(t, rs.Addr, nil)
	if st, err := c.PutOpaque(testCtx(t), testNS("acme"), []byte("k"), []byte("v")); !errors.Is(err, ErrUnsupported) || st != StatusMiss {
		t.Fatalf("PutOpaque on a version-2 server: %v %v", st, err)
	}
}

// TestGetWithAlloc: WithAlloc hands each hit's length to the allocator;
// a refused buffer is a miss with ErrShortBuffer, and the connection stays
// in sync for the next block and the next call.
func TestGetWithAlloc(t *testing.T) {
	rs := startServer(t, "127.0.0.1:0", wire.Limits{})
	c := dialTest(t, rs.Addr, func(c *Config) { c.Conns = 1 })
	ctx := testCtx(t)
	ns := testNS("acme")
	blocks := testBlocks(t, ns, 3, 3000, 7)
	if _, err := c.Put(ctx, ns, blocks); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var asked []int
	calls := 0
	alloc := func(n int) []byte {
		mu.Lock()
		defer mu.Unlock()
		asked = append(asked, n)
		calls++
		if calls == 2 {
			return nil // refuse the second block
		}
		return make([]byte, n)
	}
	res := c.Get(ctx, ns, keysOf(blocks), WithAlloc(alloc))
	if !res[0].Hit || !bytes.Equal(res[0].Data, blocks[0].Data) || res[1].Hit || !errors.Is(res[1].Reason, ErrShortBuffer) ||
		!res[2].Hit || !bytes.Equal(res[2].Data, blocks[2].Data) {
		t.Fatalf("results: %v %v / %v %v / %v %v", res[0].Hit, res[0].Reason, res[1].Hit, res[1].Reason, res[2].Hit, res[2].Reason)
	}
	if len(asked) != 3 || asked[0] != 3000 {
		t.Fatalf("allocator asked %v", asked)
	}
	if r := c.Get(ctx, ns, keysOf(blocks[1:2]))[0]; !r.Hit || !bytes.Equal(r.Data, blocks[1].Data) {
		t.Fatalf("next call: %v", r.Reason)
	}
}

// opaqueNames returns n opaque names whose keys in ns are owned, under v,
// by the node owner reports true for.
func opaqueNames(t *testing.T, tc *testCluster, v control.View, ns Namespace, n int, want func(*tnode) bool) [][]byte {
	t.Helper()
	d, err := ns.Digest()
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	for i := 0; len(out) < n; i++ {
		if i > 10000 {
			t.Fatal("placement never picked a wanted owner")
		}
		name := []byte(fmt.Sprintf("llama@00000000@0@%08x", i))
		if want(tc.owner(v, OpaqueKey(d, name))) {
			out = append(out, name)
		}
	}
	return out
}

// TestClusterPutOpaque: Cluster.PutOpaque stores each block on its owner
// only, where Cluster.Get reads it back byte-identical; a second store is
// StatusExists with the first bytes kept; an invalid name is ErrInvalid
// and a closed Cluster ErrClosed.
func TestClusterPutOpaque(t *testing.T) {
	tc := startCluster(t, 3)
	c := dialCluster(t, []string{tc.nodes[1].addr}, nil)
	ctx := testCtx(t)
	ns := testNS("acme")
	d, _ := ns.Digest()
	v := tc.view(1)
	for _, nd := range tc.nodes {
		for i, name := range opaqueNames(t, tc, v, ns, 2, func(o *tnode) bool { return o == nd }) {
			key := OpaqueKey(d, name)
			payload := bytes.Repeat([]byte{byte(i + 1)}, 3000+i)
			before := [3]uint64{tc.nodes[0].blocksOn(), tc.nodes[1].blocksOn(), tc.nodes[2].blocksOn()}
			if st, err := c.PutOpaque(ctx, ns, name, payload); err != nil || st != StatusStored {
				t.Fatalf("%s on %s: %v %v", name, nd.id, st, err)
			}
			for j, other := range tc.nodes {
				if grew := other.blocksOn() - before[j]; grew != map[bool]uint64{true: 1, false: 0}[other == nd] {
					t.Fatalf("%s: node %s gained %d blocks, owner %s", name, other.id, grew, nd.id)
				}
			}
			if st, err := c.PutOpaque(ctx, ns, name, []byte("other bytes")); err != nil || st != StatusExists {
				t.Fatalf("second store of %s: %v %v", name, st, err)
			}
			if r := c.Get(ctx, ns, []BlockKey{key})[0]; !r.Hit || !bytes.Equal(r.Data, payload) {
				t.Fatalf("get %s: hit %v (%v), %d bytes", name, r.Hit, r.Reason, len(r.Data))
			}
		}
	}
	for _, bad := range [][]byte{nil, make([]byte, wire.MaxOpaqueName+1)} {
		if _, err := c.PutOpaque(ctx, ns, bad, []byte("v")); !errors.Is(err, ErrInvalid) {
			t.Fatalf("name of %d bytes: %v", len(bad), err)
		}
	}
	c.Close()
	if _, err := c.PutOpaque(ctx, ns, []byte("k"), []byte("v")); !errors.Is(err, ErrClosed) {
		t.Fatalf("PutOpaque on a closed Cluster: %v", err)
	}
}

// TestClusterPutOpaqueReroutes: a name whose owner moved (a node drains
// under a view the client has not seen) is refused with WRONG_EPOCH once;
// the Cluster refreshes and stores it on the new owner only. When only the
// drained node knows the new view, the node the Cluster re-routes to
// refuses too: StatusNoSpace, not an error, and nothing stored.
func TestClusterPutOpaqueReroutes(t *testing.T) {
	ns := testNS("acme")
	d, _ := ns.Digest()
	for _, everyone := range []bool{true, false} {
		tc := startCluster(t, 3)
		c := dialCluster(t, []string{tc.nodes[0].addr}, nil) // epoch 1
		ctx := testCtx(t)
		x := tc.nodes[2]
		v2 := tc.view(2, x)
		name := opaqueNames(t, tc, tc.view(1), ns, 1, func(o *tnode) bool { return o == x })[0]
		if everyone {
			tc.install(v2, tc.nodes...)
		} else {
			tc.install(v2, x)
		}
		before := c.Stats()
		st, err := c.PutOpaque(ctx, ns, name, []byte("moved"))
		s := c.Stats()
		if err != nil {
			t.Fatalf("everyone at epoch 2 %v: %v", everyone, err)
		}
		if s.Retries-before.Retries != 1 || s.Refreshes-before.Refreshes != 1 {
			t.Fatalf("everyone at epoch 2 %v: stats %+v (before %+v): want one refresh and one retry", everyone, s, before)
		}
		newOwner := tc.owner(v2, OpaqueKey(d, name))
		if !everyone {
			if st != StatusNoSpace || s.WrongEpoch-before.WrongEpoch != 2 {
				t.Fatalf("refused twice: %s after %d refusals, want NO_SPACE after 2", st, s.WrongEpoch-before.WrongEpoch)
			}
			for _, nd := range tc.nodes {
				if n := nd.blocksOn(); n != 0 {
					t.Fatalf("refused twice: node %s stored %d blocks", nd.id, n)
				}
			}
			continue
		}
		if st != StatusStored || s.WrongEpoch-before.WrongEpoch != 1 {
			t.Fatalf("moved: %s after %d refusals, want STORED after 1", st, s.WrongEpoch-before.WrongEpoch)
		}
		for _, nd := range tc.nodes {
			if want := map[bool]uint64{true: 1}[nd == newOwner]; nd.blocksOn() != want {
				t.Fatalf("moved: node %s holds %d blocks, want %d (new owner %s)", nd.id, nd.blocksOn(), want, newOwner.id)
			}
		}
		if r := c.Get(ctx, ns, []BlockKey{OpaqueKey(d, name)})[0]; !r.Hit || string(r.Data) != "moved" {
			t.Fatalf("get after the move: %v %v", r.Hit, r.Reason)
		}
	}
}

// TestClusterPutOpaqueOwnerDown: a name whose owner is down, or speaks a
// protocol older than 3, is StatusNoSpace without an error; the others
// are stored.
func TestClusterPutOpaqueOwnerDown(t *testing.T) {
	tc := startCluster(t, 3, 0, wire.Version2)
	c := dialCluster(t, []string{tc.nodes[0].addr}, nil)
	ctx := testCtx(t)
	ns := testNS("acme")
	v := tc.view(1)
	down, old := tc.nodes[2], tc.nodes[1]
	down.rs.Stop()
	for _, nd := range tc.nodes {
		name := opaqueNames(t, tc, v, ns, 1, func(o *tnode) bool { return o == nd })[0]
		want := StatusStored
		if nd == down || nd == old {
			want = StatusNoSpace
		}
		if st, err := c.PutOpaque(ctx, ns, name, []byte("v")); err != nil || st != want {
			t.Fatalf("owner %s: %v %v, want %s", nd.id, st, err, want)
		}
	}
	if c.Stats().Unreachable == 0 {
		t.Fatal("the down owner was not counted unreachable")
	}
}
