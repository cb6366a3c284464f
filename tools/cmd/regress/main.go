// Command regress is the regression runner behind scripts/regress: it runs
// the gates of a profile and writes the run's artifacts. See
// docs/REGRESSION.md.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/gpucache/gpucache/tools/internal/regress"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := regress.Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
