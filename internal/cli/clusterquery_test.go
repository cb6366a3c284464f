package cli

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/gpucache/gpucache/api/wire"
	"github.com/gpucache/gpucache/internal/control"
	"github.com/gpucache/gpucache/internal/server"
	"github.com/gpucache/gpucache/internal/server/servertest"
)

// TestQueryCommandsHonourCluster: members, stat and ping follow --cluster
// (and GPUCACHE_CLUSTER) instead of quietly talking to --addr's default:
// members asks the first seed that answers; stat prints one section per
// member of the view (--json one object per member); ping pings every
// member. A member that does not answer is reported, the others still
// are, and the command exits 4; no seed answering is exit 4 too.
func TestQueryCommandsHonourCluster(t *testing.T) {
	nodes := servertest.StartCluster(t, 3)
	dead := closedLoopback(t)
	t.Setenv("GPUCACHE_ADDR", dead) // the default address: nothing listens there
	seeds := dead + "," + nodes[1].Addr

	r := run(t, "", "members", "--cluster", seeds)
	if r.code != exitOK || !strings.Contains(r.stdout, "epoch 1, 3 members (view of "+nodes[1].Addr+")") {
		t.Fatalf("members --cluster: %+v", r)
	}
	for _, n := range nodes {
		if !strings.Contains(r.stdout, n.Addr) {
			t.Errorf("members --cluster lacks %s: %s", n.Addr, r.stdout)
		}
	}

	t.Setenv("GPUCACHE_CLUSTER", seeds)
	r = run(t, "", "stat")
	if r.code != exitOK {
		t.Fatalf("stat with GPUCACHE_CLUSTER: %+v", r)
	}
	for i, n := range nodes {
		head := "== gpu-" + string(rune('1'+i)) + " " + n.Addr + "\n"
		at := strings.Index(r.stdout, head)
		if at < 0 {
			t.Fatalf("stat --cluster lacks the section %q:\n%s", head, r.stdout)
		}
		if sec := r.stdout[at:]; !strings.Contains(sec, "cluster_epoch") {
			t.Errorf("section %q has no counters", head)
		}
	}
	r = run(t, "", "stat", "--json")
	var doc struct {
		Members []struct {
			ID, Addr string
			Stat     map[string]uint64
		}
	}
	if err := json.Unmarshal([]byte(r.stdout), &doc); r.code != exitOK || err != nil || len(doc.Members) != 3 {
		t.Fatalf("stat --cluster --json: %v %+v", err, r)
	}
	for i, m := range doc.Members {
		if m.Addr != nodes[i].Addr || m.Stat["cluster_epoch"] != 1 {
			t.Errorf("stat --json member %d: %+v", i, m)
		}
	}
	r = run(t, "", "ping", "--count", "2")
	for i, n := range nodes {
		for _, want := range []string{"pong 1 from gpu-" + string(rune('1'+i)) + " " + n.Addr, "pong 2 from gpu-" + string(rune('1'+i)) + " " + n.Addr} {
			if r.code != exitOK || !strings.Contains(r.stdout, want) {
				t.Fatalf("ping --cluster lacks %q: %+v", want, r)
			}
		}
	}

	// One member down: the others are still reported, and the exit is 4.
	nodes[2].Stop()
	r = run(t, "", "stat")
	if r.code != exitUnavailable || !strings.Contains(r.stdout, "== gpu-3 "+nodes[2].Addr+"\nerror: ") ||
		!strings.Contains(r.stdout, "== gpu-1 ") || !strings.Contains(r.stderr, "1 of 3 members did not answer") {
		t.Fatalf("stat with a member down: %+v", r)
	}
	r = run(t, "", "ping")
	if r.code != exitUnavailable || !strings.Contains(r.stdout, "pong 1 from gpu-2 ") || !strings.Contains(r.stdout, "gpu-3 "+nodes[2].Addr+": ") {
		t.Fatalf("ping with a member down: %+v", r)
	}

	// No seed answers: said, exit 4.
	r = run(t, "", "members", "--cluster", dead)
	if r.code != exitUnavailable || r.stdout != "" {
		t.Fatalf("members, no seed: %+v", r)
	}
	r = run(t, "", "stat", "--cluster", dead+","+nodes[2].Addr)
	if r.code != exitUnavailable || !strings.Contains(r.stderr, "no seed of --cluster answered") {
		t.Fatalf("stat, no seed: %+v", r)
	}

	// A single node given as --cluster: its one section.
	t.Setenv("GPUCACHE_CLUSTER", "")
	single := startServer(t)
	if r := run(t, "", "stat", "--cluster", single); r.code != exitOK || !strings.HasPrefix(r.stdout, "== "+single+"\n") {
		t.Fatalf("stat --cluster of a single node: %+v", r)
	}
}

// TestMembersShowsControlMode: the view comes from etcd and carries no
// member's control mode, but members says when the node that answered is
// read-only or unknown (its STAT control_mode): its view may be stale.
func TestMembersShowsControlMode(t *testing.T) {
	cl := server.NewCluster("gpu-1", control.View{})
	node := servertest.StartWith(t, "127.0.0.1:0", wire.Limits{}, func(c *server.Config) { c.Cluster = cl })
	v, err := control.NewView(3, []control.Member{{ID: "gpu-1", Addr: node.Addr, FaultDomain: "r", ProtoVersion: wire.VersionMax, CapacityBytes: 1 << 30}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := node.Srv.AdvanceView(v); err != nil {
		t.Fatal(err)
	}
	if r := run(t, "", "members", "--cluster", node.Addr); r.code != exitOK || strings.Contains(r.stdout, "control mode") {
		t.Fatalf("members of a live node: %+v", r)
	}
	for _, tc := range []struct {
		mode server.ControlMode
		want string
	}{
		{server.ControlReadOnly, "is in control mode read-only"},
		{server.ControlUnknown, "is in control mode unknown"},
	} {
		cl.SetMode(tc.mode)
		if r := run(t, "", "members", "--addr", node.Addr); r.code != exitOK || !strings.Contains(r.stdout, node.Addr+" "+tc.want) {
			t.Errorf("members of a %s node: %+v", tc.mode, r)
		}
		if r := run(t, "", "members", "--addr", node.Addr, "--json"); r.code != exitOK || !strings.Contains(r.stderr, tc.want) || !json.Valid([]byte(r.stdout)) {
			t.Errorf("members --json of a %s node: %+v", tc.mode, r)
		}
	}
}
