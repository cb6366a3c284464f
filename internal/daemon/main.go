package daemon

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"github.com/gpucache/gpucache/internal/config"
	"github.com/gpucache/gpucache/internal/version"
)

// Main is the whole gpucached command: it loads the config, starts the
// node, drains it on SIGINT or SIGTERM, and returns the exit code: 0, 1
// when the node fails, 2 for a bad flag, setting or environment variable.
// --help writes the usage to stdout; everything else goes to stderr.
func Main(args []string, stdout, stderr io.Writer) int {
	for _, a := range args {
		if a == "--version" || a == "-version" {
			fmt.Fprintln(stderr, version.Line("gpucached"))
			return 0
		}
	}
	cfg, err := config.Load(args, os.LookupEnv, stdout)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	var envWarnings []string
	if err == nil {
		envWarnings, err = config.CheckEnv(cfg, os.Environ())
	}
	if err != nil {
		fmt.Fprintln(stderr, "gpucached:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	logger := NewLogger(cfg, stderr)
	for _, w := range envWarnings {
		logger.Warn(w)
	}
	if _, set := os.LookupEnv("GOGC"); !set {
		// The payload lives off-heap: keep the tiny Go heap from starting
		// a GC cycle every few MiB of request garbage (gcfloor.go).
		floor := gcFloorFor(int64(cfg.HotCapacity))
		gt := newGCTuner(floor, 100, debug.SetGCPercent)
		gt.start()
		defer gt.stop()
		logger.Info("gc heap floor", "floor_bytes", floor, "gogc_base", 100)
	}
	reload := func() (config.Config, error) { return config.Load(args, os.LookupEnv, io.Discard) }
	n, err := Start(ctx, cfg, Options{Logger: logger, Reload: reload, Stderr: stderr})
	if err != nil {
		fmt.Fprintln(stderr, "gpucached:", err)
		return 1
	}
	select {
	case <-ctx.Done(): // SIGINT or SIGTERM: drain
	case <-n.Done(): // POST /admin/drain, or a listener failed
	}
	if err := n.Close(context.Background()); err != nil {
		fmt.Fprintln(stderr, "gpucached:", err)
		return 1
	}
	return 0
}
