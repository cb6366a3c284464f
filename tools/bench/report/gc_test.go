package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestGCRuns: gc/gc.json is the default run the targets use, each
// gc/gc-procs<N>.json adds a row, and a server without the pause split (no
// go_gc_stop_p99_ns) leaves those columns NOT_RUN instead of printing zeros.
func TestGCRuns(t *testing.T) {
	dir := t.TempDir()
	gc := filepath.Join(dir, "gc")
	if err := os.Mkdir(gc, 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(name, body string) {
		if err := os.WriteFile(filepath.Join(gc, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("gc.json", `{"cases":[],"server_stat":{"go_gc_pause_p99_ns":200000,"go_heap_inuse_bytes":1,"hot_bytes_cached":2}}`)
	write("gc-procs1.json", `{"cases":[],"server_stat":{"go_gc_pause_p99_ns":50000,"go_gc_stop_p99_ns":1024,"go_gc_pauses":40,"go_gc_cycles":20,"go_gc_pause_max_ns":70000}}`)
	write("gc-procs1.forced", "18\n")
	write("other.json", `{"cases":[]}`)
	r, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !r.GC.Ran || r.GC.Procs != "default" || r.GC.HasSplit || r.GC.GCPauseP99Ns != 200000 {
		t.Fatalf("default run: %+v", r.GC)
	}
	if len(r.GCMore) != 1 {
		t.Fatalf("%d extra runs, want 1 (other.json is not a GC run)", len(r.GCMore))
	}
	g := r.GCMore[0]
	if g.Procs != "1" || !g.HasSplit || g.StopP99Ns != 1024 || g.Pauses != 40 || g.Cycles != 20 || g.Forced != 18 || g.PauseMaxNs != 70000 {
		t.Fatalf("procs1 run: %+v", g)
	}
	out := render(r)
	if !strings.Contains(out, "| default | NOT_RUN | 1 B | 2 B | 50.000% | NOT_RUN | NOT_RUN | NOT_RUN | 200.0 µs | NOT_RUN |") {
		t.Errorf("default row without the split:\n%s", out)
	}
	if !strings.Contains(out, "| 1 | NOT_RUN | NOT_RUN | NOT_RUN | NOT_RUN | 20 (18) | 40 | 1.0 µs | 50.0 µs | 70.0 µs |") {
		t.Errorf("procs1 row:\n%s", out)
	}
	for _, tg := range r.Targets() {
		if strings.HasPrefix(tg.Name, "GC run: GC pause") && (tg.Verdict != Miss || strings.Contains(tg.Measured, "stopping")) {
			t.Errorf("pause target from the default run: %+v", tg)
		}
	}
}

// TestGCPauseTargetNeedsPauses: a run with no GC pause, or whose hold fell
// short of the request, does not pass the pause target.
func TestGCPauseTargetNeedsPauses(t *testing.T) {
	for name, c := range map[string]struct {
		json string
		why  string
	}{
		"no pause":   {`{"cases":[],"hold":{"requested_bytes":4096,"held_bytes":4096},"server_stat":{"go_gc_pause_p99_ns":0,"go_gc_stop_p99_ns":0,"go_gc_pauses":0}}`, "no GC pause recorded"},
		"short hold": {`{"cases":[],"hold":{"requested_bytes":4096,"held_bytes":2048},"server_stat":{"go_gc_pause_p99_ns":50000,"go_gc_stop_p99_ns":1024,"go_gc_pauses":40}}`, "the hold reached 2.00 KiB of 4.00 KiB"},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.Mkdir(filepath.Join(dir, "gc"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "gc", "gc.json"), []byte(c.json), 0o644); err != nil {
				t.Fatal(err)
			}
			r, err := Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			found := false
			for _, tg := range r.Targets() {
				if strings.HasPrefix(tg.Name, "GC run: GC pause") {
					found = true
					if tg.Verdict != NotRun || !strings.Contains(tg.Measured, c.why) {
						t.Errorf("%+v, want NOT_RUN saying %q", tg, c.why)
					}
				}
			}
			if !found {
				t.Error("no pause target")
			}
		})
	}
}
