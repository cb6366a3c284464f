package clienttest_test

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/gpucache/gpucache/api/wire"
	"github.com/gpucache/gpucache/internal/control"
	"github.com/gpucache/gpucache/internal/server"
	"github.com/gpucache/gpucache/internal/server/servertest"
)

// The servers the Example functions talk to, started by TestMain: one
// node, and a cluster of three nodes under a static view. Examples get no
// testing.T, so they cannot start servers of their own.
var (
	nodeAddr     string   // the single node
	clusterSeeds []string // the cluster's first member, as a seed
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(withServers{m}) }

// withServers runs the tests with the example servers up, and stops them
// before goleak looks for goroutines left behind.
type withServers struct{ m *testing.M }

func (w withServers) Run() int {
	stop, err := startExampleServers()
	defer stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "example servers:", err)
		return 1
	}
	return w.m.Run()
}

// startExampleServers starts the servers; stop (never nil) stops those
// that started, also after an error.
func startExampleServers() (stop func(), err error) {
	var servers []*servertest.Server
	stop = func() {
		for _, s := range servers {
			if err := s.Close(); err != nil {
				fmt.Fprintln(os.Stderr, "example server:", err)
			}
		}
	}
	node, err := servertest.Launch("127.0.0.1:0", wire.Limits{}, nil)
	if err != nil {
		return stop, err
	}
	servers = append(servers, node)
	nodeAddr = node.Addr

	var members []control.Member
	for i := range 3 {
		id := control.MemberID(fmt.Sprintf("node-%c", 'a'+i))
		cl := server.NewCluster(id, control.View{})
		s, err := servertest.Launch("127.0.0.1:0", wire.Limits{}, func(c *server.Config) { c.Cluster = cl })
		if err != nil {
			return stop, err
		}
		servers = append(servers, s)
		members = append(members, control.Member{ID: id, Addr: s.Addr, FaultDomain: fmt.Sprintf("rack-%d", i),
			ProtoVersion: wire.VersionMax, CapacityBytes: 1 << 30})
	}
	v, err := control.NewView(1, members)
	if err != nil {
		return stop, err
	}
	for _, s := range servers[1:] {
		if _, err := s.Srv.AdvanceView(v); err != nil {
			return stop, err
		}
	}
	clusterSeeds = []string{members[0].Addr}
	return stop, nil
}
