package daemon

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/gpucache/gpucache/internal/control"
)

func testView(t *testing.T, epoch uint64, ms ...control.Member) control.View {
	t.Helper()
	for i := range ms {
		ms[i].FaultDomain, ms[i].ProtoVersion, ms[i].CapacityBytes = "r", 5, 1<<30
	}
	v, err := control.NewView(epoch, ms)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestLogViewChange: a new view is one log line that says which members
// left (a kill -9 ends its lease), joined and started draining, each with
// its id and address, and the epochs; a member leaving is a warning.
func TestLogViewChange(t *testing.T) {
	g1 := control.Member{ID: "gpu-1", Addr: "10.0.0.1:9400"}
	g2 := control.Member{ID: "gpu-2", Addr: "10.0.0.2:9400"}
	g3 := control.Member{ID: "gpu-3", Addr: "10.0.0.3:9400"}
	g4 := control.Member{ID: "gpu-4", Addr: "10.0.0.4:9400"}
	g2d := g2
	g2d.Draining = true
	cases := []struct {
		name       string
		prev, next control.View
		want       []string
		not        []string
	}{
		{"kill -9 of gpu-3", testView(t, 7, g1, g2, g3), testView(t, 8, g1, g2),
			[]string{"level=WARN", `msg="cluster view"`, "epoch=8", "prev_epoch=7", "members=2", "left=gpu-3@10.0.0.3:9400", "self_member=true"},
			[]string{"joined=", "draining="}},
		{"gpu-4 joins, gpu-2 drains", testView(t, 8, g1, g2), testView(t, 9, g1, g2d, g4),
			[]string{"level=INFO", "epoch=9", "prev_epoch=8", "joined=gpu-4@10.0.0.4:9400", "draining=gpu-2@10.0.0.2:9400"},
			[]string{"left="}},
		{"first view", control.View{}, testView(t, 1, g1, g2),
			[]string{"level=INFO", "epoch=1", "prev_epoch=0", "joined=gpu-1@10.0.0.1:9400,gpu-2@10.0.0.2:9400"},
			[]string{"left="}},
	}
	for _, c := range cases {
		var buf bytes.Buffer
		log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
		logViewChange(log, c.prev, c.next, "gpu-1", 0)
		line := buf.String()
		if strings.Count(line, "\n") != 1 {
			t.Errorf("%s: %d lines, want one: %q", c.name, strings.Count(line, "\n"), line)
		}
		for _, w := range c.want {
			if !strings.Contains(line, w) {
				t.Errorf("%s: %q lacks %q", c.name, line, w)
			}
		}
		for _, w := range c.not {
			if strings.Contains(line, w) {
				t.Errorf("%s: %q has %q", c.name, line, w)
			}
		}
	}
}
