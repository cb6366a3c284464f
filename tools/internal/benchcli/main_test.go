package benchcli

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/gpucache/gpucache/api/wire"
	"github.com/gpucache/gpucache/internal/cli"
	"github.com/gpucache/gpucache/internal/server/servertest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The exit codes gpucache-bench shares with gpucache (cli's Usage).
const (
	exitOK     = 0
	exitUsage  = 2
	exitFailed = 5
)

// startServer runs a real server on 127.0.0.1:0 over a small hot store.
func startServer(t *testing.T) string {
	return servertest.Start(t, "127.0.0.1:0", wire.Limits{}).Addr
}

type result struct {
	code           int
	stdout, stderr string
}

func run(t *testing.T, stdin string, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	code := Main(ctx, args, cli.Stdio{In: strings.NewReader(stdin), Out: &out, Err: &errb})
	return result{code, out.String(), errb.String()}
}
