package server

import (
	"testing"

	"github.com/gpucache/gpucache/api/wire"
)

// TestForwardStatsInSTAT: Config.ForwardStats's entries (the cluster
// forwarder's counters) are part of STAT, after the server's own, read
// afresh on every call.
func TestForwardStatsInSTAT(t *testing.T) {
	var ops uint64 = 7
	ts := startServer(t, func(c *Config) {
		c.ForwardStats = func() []wire.StatEntry {
			return []wire.StatEntry{{Name: "forward_ops", Value: ops}, {Name: "forward_clients", Value: 2}}
		}
	})
	if st := statsOf(ts.srv); st["forward_ops"] != 7 || st["forward_clients"] != 2 || st["resp_forwarded"] != 0 {
		t.Fatalf("STAT %v: want the forwarder's entries", st)
	}
	ops = 9
	e := ts.srv.Stats()
	if last := e[len(e)-2]; last.Name != "forward_ops" || last.Value != 9 {
		t.Fatalf("entry %+v: want forward_ops 9 among the last entries", last)
	}
}
