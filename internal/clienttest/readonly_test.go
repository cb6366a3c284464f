package clienttest_test

import (
	"testing"

	"github.com/gpucache/gpucache/api/wire"
	. "github.com/gpucache/gpucache/client"
	"github.com/gpucache/gpucache/internal/server"
)

// TestClusterPutReadOnly: with both nodes read-only (control plane
// unreachable), Cluster.Put reports StatusReadOnly for the blocks owned by
// the version-4 node and StatusNoSpace for those of the node pinned to
// version 3, which does not know READ_ONLY; nothing is stored and no
// error is returned.
func TestClusterPutReadOnly(t *testing.T) {
	tc := startCluster(t, 2, 0, wire.Version3)
	c := dialCluster(t, []string{tc.nodes[0].addr}, nil)
	for _, nd := range tc.nodes {
		nd.cl.SetMode(server.ControlReadOnly)
	}
	ctx := testCtx(t)
	ns := testNS("acme")
	blocks := testBlocks(t, ns, 30, 4<<10, 3)
	st, err := c.Put(ctx, ns, blocks)
	if err != nil {
		t.Fatal(err)
	}
	v := tc.view(1)
	seen := map[Status]int{}
	for i, b := range blocks {
		want := StatusReadOnly
		if tc.owner(v, b.Key).proto < wire.Version4 {
			want = StatusNoSpace
		}
		if st[i] != want {
			t.Fatalf("block %d on %s: %s, want %s", i, tc.owner(v, b.Key).id, st[i], want)
		}
		seen[st[i]]++
	}
	if seen[StatusReadOnly] == 0 || seen[StatusNoSpace] == 0 {
		t.Fatalf("statuses %v: both nodes should own some of 30 blocks", seen)
	}
	for _, nd := range tc.nodes {
		if nd.blocksOn() != 0 {
			t.Fatalf("%s stored %d blocks while read-only", nd.id, nd.blocksOn())
		}
	}
}
