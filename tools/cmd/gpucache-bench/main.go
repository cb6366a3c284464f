// Command gpucache-bench runs gpucache's demos and load tools: bench,
// noisy, replay, soak, report, shard-demo, cold-demo and dpu-demo.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/gpucache/gpucache/internal/cli"
	"github.com/gpucache/gpucache/tools/internal/benchcli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := benchcli.Main(ctx, os.Args[1:], cli.Stdio{In: os.Stdin, Out: os.Stdout, Err: os.Stderr})
	stop()
	os.Exit(code)
}
