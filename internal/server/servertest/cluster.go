package servertest

import (
	"fmt"
	"testing"

	"github.com/gpucache/gpucache/api/wire"
	"github.com/gpucache/gpucache/internal/control"
	"github.com/gpucache/gpucache/internal/server"
)

// StartCluster runs n servers on free loopback ports as members gpu-1 ..
// gpu-n of one fault domain, each at view epoch 1 of all n members (1 GiB
// of capacity each), so a cluster client can route over them.
func StartCluster(t testing.TB, n int) []*Server {
	t.Helper()
	nodes := make([]*Server, n)
	ms := make([]control.Member, n)
	for i := range n {
		id := control.MemberID(fmt.Sprintf("gpu-%d", i+1))
		cl := server.NewCluster(id, control.View{})
		nodes[i] = StartWith(t, "127.0.0.1:0", wire.Limits{}, func(c *server.Config) { c.Cluster = cl })
		ms[i] = control.Member{ID: id, Addr: nodes[i].Addr, FaultDomain: "r", ProtoVersion: wire.VersionMax, CapacityBytes: 1 << 30}
	}
	v, err := control.NewView(1, ms)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range nodes {
		if _, err := s.Srv.AdvanceView(v); err != nil {
			t.Fatal(err)
		}
	}
	return nodes
}
