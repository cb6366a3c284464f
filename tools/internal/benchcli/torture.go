package benchcli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"

	"github.com/gpucache/gpucache/internal/cli"
	"github.com/gpucache/gpucache/tools/internal/torture"
)

// runTorture is `gpucache-bench torture`: the flash tier's kill -9 loops
// (tools/internal/torture) against a gpucached binary.
func runTorture(ctx context.Context, args []string, std cli.Stdio) error {
	fs := newFlagSet("torture", "torture --daemon BIN [--loops N] [--dir DIR] [--seed S] [--json FILE]", std.Out)
	daemon := fs.String("daemon", "bin/gpucached", "the gpucached binary to start and kill")
	loops := fs.Int("loops", 100, "kill -9 loops (every third kills during the drain spill)")
	dir := fs.String("dir", "", "directory of the flash tier across loops (default: a temporary directory, removed afterwards)")
	seed := fs.Uint64("seed", 1, "seed of the kill moments")
	batches := fs.Int("max-batches", 200, "most PUT batches (8 blocks of 16 KiB) a loop writes before its kill")
	jsonOut := fs.String("json", "", "write the report as JSON to `file`")
	if err := cli.ParseNoArgs(fs, args); err != nil {
		return err
	}
	if *loops < 1 {
		return fmt.Errorf("%w: --loops must be at least 1", cli.ErrUsage)
	}
	root := *dir
	if root == "" {
		var err error
		if root, err = os.MkdirTemp("", "gpucache-torture-"); err != nil {
			return err
		}
		defer os.RemoveAll(root)
	}
	rep, err := torture.Run(ctx, torture.Config{Daemon: *daemon, Dir: root, Loops: *loops, Seed: *seed, MaxBatches: *batches, Log: std.Out})
	fmt.Fprintf(std.Out, "loops %d (%d killed during the drain spill): acknowledged %d blocks; read back %d times: served %d byte for byte (%d right after a restart), absent %d, corrupt %d; never-stored identities read %d times, phantom %d\n",
		rep.Loops, rep.DrainKills, rep.Acked, rep.Checks, rep.Served, rep.FlashServed, rep.Absent, rep.Corrupt, rep.PhantomReads, rep.Phantom)
	if *jsonOut != "" {
		b, _ := json.MarshalIndent(rep, "", "  ")
		if werr := os.WriteFile(*jsonOut, append(b, '\n'), 0o644); werr != nil && err == nil {
			err = werr
		}
	}
	if err != nil {
		return err
	}
	if rep.Corrupt != 0 || rep.Phantom != 0 {
		fmt.Fprintln(std.Out, "FLASH_CRASH_CONTRACT_FAIL")
		return cli.ErrReported
	}
	fmt.Fprintln(std.Out, "FLASH_CRASH_CONTRACT_OK")
	return nil
}
