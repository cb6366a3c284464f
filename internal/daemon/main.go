package daemon

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/gpucache/gpucache/internal/config"
	"github.com/gpucache/gpucache/internal/version"
)

// Main is the whole gpucached command: it loads the config, runs the node
// until SIGINT or SIGTERM, and returns the exit code.
func Main(args []string, stderr io.Writer) int {
	for _, a := range args {
		if a == "--version" || a == "-version" {
			fmt.Fprintln(stderr, version.Line("gpucached"))
			return 0
		}
	}
	cfg, err := config.Load(args, os.LookupEnv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "gpucached:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	reload := func() (config.Config, error) { return config.Load(args, os.LookupEnv, io.Discard) }
	if err := RunWith(ctx, cfg, NewLogger(cfg, stderr), Options{Reload: reload, Stderr: stderr}); err != nil {
		fmt.Fprintln(stderr, "gpucached:", err)
		return 1
	}
	return 0
}
