package torture

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestTortureShort is the short torture of the test suite: six kill -9
// loops (two of them during the drain spill) on one flash directory.
// Every acknowledged block is served byte for byte or absent, nothing is
// served under an identity nothing stored, and flash served blocks right
// after a restart. The full run (100 loops) is `gpucache-bench torture`,
// recorded in docs/FAILURES.md.
func TestTortureShort(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "gpucached")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/gpucache/gpucache/cmd/gpucached").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	var log strings.Builder
	rep, err := Run(context.Background(), Config{Daemon: bin, Dir: t.TempDir(), Loops: 6, MaxBatches: 60, Log: &log})
	t.Logf("%+v\n%s", rep, log.String())
	if err != nil {
		t.Fatal(err)
	}
	if rep.Corrupt != 0 || rep.Phantom != 0 {
		t.Fatalf("corrupt %d, phantom %d: want 0 and 0", rep.Corrupt, rep.Phantom)
	}
	if rep.DrainKills != 2 || rep.Loops != 6 || rep.Acked == 0 || rep.PhantomReads == 0 {
		t.Fatalf("the run did not do what it should: %+v", rep)
	}
	if rep.FlashServed == 0 {
		t.Fatal("no acknowledged block was served right after a restart: flash kept nothing")
	}
}
