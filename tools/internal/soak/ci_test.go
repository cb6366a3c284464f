package soak

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpucache/gpucache/internal/cold/s3store/s3test"
)

// testLog writes progress lines to the test log.
type testLog struct {
	mu sync.Mutex
	t  *testing.T
}

func (w *testLog) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// buildBinaries builds gpucached and gpucache-bench (the soak's helper:
// `gpucache-bench soak etcd|node`) into a temp dir: the nodes run the
// release code, not this race-instrumented test binary.
func buildBinaries(t *testing.T) (gpucached, helper string) {
	t.Helper()
	dir := t.TempDir()
	for cmd, pkg := range map[string]string{
		"gpucached":      "github.com/gpucache/gpucache/cmd/gpucached",
		"gpucache-bench": "github.com/gpucache/gpucache/tools/cmd/gpucache-bench",
	} {
		out, err := exec.Command("go", "build", "-o", filepath.Join(dir, cmd), pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("build %s: %v\n%s", cmd, err, out)
		}
	}
	return filepath.Join(dir, "gpucached"), filepath.Join(dir, "gpucache-bench")
}

// TestSoakCI is CI's soak: about a minute of mixed load on three cluster
// nodes and an open node, with real etcd and a real S3 server, while every
// fault runs once on a compressed schedule (kill -9, etcd, S3, full disk,
// partition, the five failpoints). It asserts behaviour, not throughput:
// no wrong payload, every block exact bytes or a miss with a reason, no
// call more than 50 ms past its deadline, every fault recovered (or
// NOT_RUN here, with the reason: the namespace and the tmpfs need root),
// no node crashed or grew within a phase. The load is paced so that a
// loaded two-core machine keeps up.
func TestSoakCI(t *testing.T) {
	if testing.Short() {
		t.Skip("runs five processes and a minute of load")
	}
	s3bin, err := s3test.Binary()
	if err != nil {
		t.Fatal(err)
	}
	if s3bin == "" {
		// Same rule as the cold tier's S3 tests: skipped without the
		// server, failed in CI.
		s3test.Start(t)
		return
	}
	gpucached, gpucache := buildBinaries(t)
	cfg := Config{
		Duration: 4 * time.Minute, // a bound: one cycle of the schedule ends the load first
		Workers:  3, Rate: 250, OpTimeout: time.Second, OverrunSlack: 50 * time.Millisecond,
		HotChains: 64, ScanChains: 1024, ScanShare: 0.2,
		Schedule:    Schedule{Warmup: 3 * time.Second, Hold: 2 * time.Second, Recover: 45 * time.Second, Settle: time.Second, Cycles: 1},
		SampleEvery: time.Second,
		HotCapacity: 16 << 20,
		Gpucached:   gpucached, Helper: []string{gpucache, "soak"}, Versitygw: s3bin,
		Dir: t.TempDir(), Progress: &testLog{t: t},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	rep, err := Run(ctx, cfg)
	if rep != nil {
		var b strings.Builder
		rep.WriteText(&b)
		t.Logf("soak report:\n%s", b.String())
	}
	if err != nil {
		logTails(t, cfg.Dir)
		t.Fatalf("soak: %v", err)
	}
	if rep.Blocks.Wrong != 0 || rep.Blocks.Unexplained != 0 || rep.Overruns != 0 {
		t.Fatalf("wrong %d, unexplained %d, overruns %d", rep.Blocks.Wrong, rep.Blocks.Unexplained, rep.Overruns)
	}
	if rep.Blocks.Verified == 0 || rep.Blocks.Missed == 0 {
		t.Fatalf("the load never hit or never missed: %+v", rep.Blocks)
	}
	seen := map[string]string{}
	for _, f := range rep.Faults {
		switch {
		case f.NotRun != "":
			seen[f.Fault] = f.NotRun
			t.Logf("fault %s: %s", f.Fault, f.NotRun)
		case !f.Recovered:
			t.Errorf("fault %s not recovered: %s", f.Fault, f.status())
			logTails(t, cfg.Dir)
		default:
			seen[f.Fault] = fmt.Sprintf("recovered in %.1fs", f.RecoverySec)
		}
	}
	for _, f := range AllFaults() {
		if _, ok := seen[f]; !ok {
			t.Errorf("fault %s never ran", f)
		}
	}
}

// logTails logs the end of every log the soak wrote (the work dir is
// removed with the test).
func logTails(t *testing.T, dir string) {
	t.Helper()
	for _, name := range []string{"n1/gpucached.log", "n2/gpucached.log", "n3/gpucached.log", "open/gpucached.log", "etcd.log", "versitygw.log"} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			continue
		}
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		t.Logf("%s (last %d lines):\n%s", name, min(40, len(lines)), strings.Join(lines[max(0, len(lines)-40):], "\n"))
	}
}
