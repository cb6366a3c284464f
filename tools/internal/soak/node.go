package soak

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"

	"github.com/gpucache/gpucache/internal/config"
	"github.com/gpucache/gpucache/internal/daemon"
	"github.com/gpucache/gpucache/internal/degrade"
)

// NodeMain runs a gpucached node whose failpoints (internal/degrade) the
// soak arms over stdin. It is the daemon itself (daemon.Start, the same
// code as gpucached) with a degrade.Registry: the release binary has none,
// so its failpoints cannot be armed from outside. args are gpucached's
// flags. One command per line on stdin, one answer per line on stdout:
//
//	arm FAULT fail|hang   ->  ok armed FAULT MODE
//	disarm FAULT          ->  ok disarmed FAULT hits=N
//	hits FAULT            ->  ok hits=N
//
// anything else answers "error ...". When stdin closes (the soak is gone)
// the node drains and exits, as on SIGTERM. It returns the exit code.
func NodeMain(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	cfg, err := config.Load(args, os.LookupEnv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "gpucache-bench soak node:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	reg := &degrade.Registry{}
	fp := &failpoints{reg: reg, disarm: map[degrade.Fault]func(){}}
	go func() {
		fp.serve(stdin, stdout)
		stop() // the soak closed our stdin: leave
	}()
	reload := func() (config.Config, error) { return config.Load(args, os.LookupEnv, io.Discard) }
	n, err := daemon.Start(ctx, cfg, daemon.Options{Logger: daemon.NewLogger(cfg, stderr), Reload: reload, Stderr: stderr, Faults: reg})
	if err != nil {
		fmt.Fprintln(stderr, "gpucache-bench soak node:", err)
		return 1
	}
	select {
	case <-ctx.Done(): // SIGINT, SIGTERM, or the soak closed stdin: drain
	case <-n.Done():
	}
	if err := n.Close(context.Background()); err != nil {
		fmt.Fprintln(stderr, "gpucache-bench soak node:", err)
		return 1
	}
	return 0
}

// failpoints serves the arm/disarm commands.
type failpoints struct {
	reg    *degrade.Registry
	mu     sync.Mutex
	disarm map[degrade.Fault]func() // guarded by mu
}

func (f *failpoints) serve(in io.Reader, out io.Writer) {
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		fmt.Fprintln(out, f.do(strings.Fields(sc.Text())))
	}
}

// do runs one command and returns its answer.
func (f *failpoints) do(cmd []string) string {
	if len(cmd) < 2 {
		return "error: want arm FAULT MODE, disarm FAULT or hits FAULT"
	}
	fault := degrade.Fault(cmd[1])
	if !slices.Contains(degrade.Faults(), fault) {
		return fmt.Sprintf("error: unknown fault %q", cmd[1])
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case cmd[0] == "arm" && len(cmd) == 3:
		mode := degrade.Fail
		switch cmd[2] {
		case "fail":
		case "hang":
			mode = degrade.Hang
		default:
			return fmt.Sprintf("error: mode %q is not fail or hang", cmd[2])
		}
		if d := f.disarm[fault]; d != nil {
			d()
		}
		f.disarm[fault] = f.reg.Arm(fault, mode)
		return fmt.Sprintf("ok armed %s %s", fault, mode)
	case cmd[0] == "disarm" && len(cmd) == 2:
		if d := f.disarm[fault]; d != nil {
			d()
			delete(f.disarm, fault)
		}
		return fmt.Sprintf("ok disarmed %s hits=%d", fault, f.reg.Hits(fault))
	case cmd[0] == "hits" && len(cmd) == 2:
		return fmt.Sprintf("ok hits=%d", f.reg.Hits(fault))
	}
	return "error: want arm FAULT MODE, disarm FAULT or hits FAULT"
}
