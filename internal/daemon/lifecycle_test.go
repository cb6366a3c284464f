package daemon

import (
	"strings"
	"testing"
	"time"

	"github.com/gpucache/gpucache/internal/admin"
)

// TestColdRetentionRunsOnTick: with cold_retention set, each tick of the
// retention loop expires the cold blocks last written before now minus the
// retention (the test's clock is a day ahead, so all of them), logs the
// run, and counts it in STAT and /metrics; GETs then miss.
func TestColdRetentionRunsOnTick(t *testing.T) {
	c := testConfig()
	c.ColdStore, c.ColdDir = "fs", t.TempDir()
	c.HotCapacity, c.HotSlab, c.HotMaxClass = 4<<20, 1<<20, 1<<20
	c.ColdFlushInterval = time.Hour
	ns, _, ids, keys, payloads := coldBlocks(t)
	runNode(t, c, Options{}, func(addr string) {
		cl := writeBlocks(t, addr, ns, ids[:32], payloads[:32])
		cl.Close()
	}) // the drain spill writes the 32 blocks

	c.ColdRetention = time.Hour
	tick := make(chan time.Time)
	done := make(chan admin.ExpireSummary, 1)
	w := &watchLog{}
	a := runLogged(t, c, Options{Retention: RetentionHooks{
		Tick: tick,
		Now:  func() time.Time { return time.Now().Add(24 * time.Hour) },
		Done: func(s admin.ExpireSummary, err error) {
			if err != nil {
				t.Errorf("retention run: %v", err)
			}
			done <- s
		},
	}}, w)
	tick <- time.Now()
	sum := <-done
	if sum.Pointers != 32 {
		t.Fatalf("retention expired %d pointers, want 32: %+v", sum.Pointers, sum)
	}
	if w.count("cold retention run") != 1 {
		t.Fatalf("no log line for the run:\n%s", strings.Join(w.lines, "\n"))
	}
	st := stat(t, a.Data)
	if st["cold_retention_runs"] != 1 || st["cold_retention_pointers_expired"] != 32 {
		t.Fatalf("STAT cold_retention_runs %d, pointers %d", st["cold_retention_runs"], st["cold_retention_pointers_expired"])
	}
	_, metrics := httpGet(t, "http://"+a.Admin+"/metrics")
	if !strings.Contains(metrics, "\ngpucache_cold_retention_pointers_expired_total 32\n") {
		t.Fatal("metrics lack gpucache_cold_retention_pointers_expired_total 32")
	}
	cl, hits := readBack(t, a.Data, ns, keys[:32], payloads[:32])
	defer cl.Close()
	if hits != 0 {
		t.Fatalf("%d expired blocks still served", hits)
	}
}
