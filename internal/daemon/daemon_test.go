package daemon

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/gpucache/gpucache/internal/config"
	"github.com/gpucache/gpucache/internal/version"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func testConfig() config.Config {
	c := config.Default()
	c.Listen, c.AdminListen = "127.0.0.1:0", "127.0.0.1:0"
	c.HotCapacity, c.HotSlab, c.HotMaxClass = 64<<20, 4<<20, 4<<20 // the test sizes predate the 64 MiB default class
	c.ColdStore = "off"
	return c
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// mustStart starts a node (logging nowhere unless opts.Logger says) and
// closes it when the test ends, failing the test if the node stopped with
// an error; a test may close it first.
func mustStart(t *testing.T, c config.Config, opts Options) *Node {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = quiet()
	}
	n, err := Start(t.Context(), c, opts)
	if err != nil {
		t.Fatalf("node did not start: %v", err)
	}
	t.Cleanup(func() {
		if err := n.Close(context.Background()); err != nil {
			t.Errorf("node: %v", err)
		}
	})
	return n
}

// stopNode closes n and fails the test if it stopped with an error.
func stopNode(t *testing.T, n *Node) {
	t.Helper()
	if err := n.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// startErr is the error Start returns for c; a node that starts is closed
// and reported.
func startErr(t *testing.T, c config.Config, opts Options) error {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = quiet()
	}
	n, err := Start(t.Context(), c, opts)
	if err == nil {
		n.Close(context.Background())
		t.Errorf("node started")
	}
	return err
}

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestStartServesAdminAndDrainsOnClose(t *testing.T) {
	n, err := Start(t.Context(), testConfig(), Options{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-n.Ready():
	default:
		t.Fatal("Start returned a node that is not ready")
	}
	a := n.Addrs()
	if code, body := httpGet(t, "http://"+a.Admin+"/healthz"); code != 200 || body != "ok\n" {
		t.Fatalf("healthz %d %q", code, body)
	}
	if code, _ := httpGet(t, "http://"+a.Admin+"/readyz"); code != 200 {
		t.Fatalf("readyz %d", code)
	}
	code, metrics := httpGet(t, "http://"+a.Admin+"/metrics")
	for _, want := range []string{"gpucache_hot_capacity_bytes 6.7108864e+07", "gpucache_requests_get_total", "go_gc_duration_seconds"} {
		if code != 200 || !strings.Contains(metrics, want) {
			t.Fatalf("metrics lack %q (status %d)", want, code)
		}
	}
	if code, _ := httpGet(t, "http://"+a.Admin+"/debug/pprof/cmdline"); code != 200 {
		t.Fatalf("pprof %d", code)
	}
	nc, err := net.Dial("tcp", a.Data)
	if err != nil {
		t.Fatal(err)
	}
	nc.Close()
	if err := n.Close(t.Context()); err != nil {
		t.Fatalf("Close: %v", err)
	}
	select {
	case <-n.Done():
	default:
		t.Fatal("Close returned before the node was done")
	}
	if err := n.Err(); err != nil {
		t.Fatalf("Err after Close: %v", err)
	}
	if _, err := net.Dial("tcp", a.Data); err == nil {
		t.Fatal("data port still open after shutdown")
	}
}

func TestStartupErrorsAreClear(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c := testConfig()
	c.Listen = ln.Addr().String()
	err = startErr(t, c, Options{})
	if err == nil || !strings.Contains(err.Error(), "address already in use") || !strings.Contains(err.Error(), "--listen") {
		t.Fatalf("port in use: %v", err)
	}
	c = testConfig()
	c.AdminListen = ln.Addr().String()
	err = startErr(t, c, Options{})
	if err == nil || !strings.Contains(err.Error(), "--admin-listen") {
		t.Fatalf("admin port in use: %v", err)
	}
	c = testConfig()
	c.HotCapacity = 1 << 50
	if err := startErr(t, c, Options{}); err == nil || !strings.Contains(err.Error(), "memory") {
		t.Fatalf("capacity beyond memory: %v", err)
	}
}

func TestMainExitCodes(t *testing.T) {
	var out, sb strings.Builder
	if code := Main([]string{"--hot-capacity", "lots"}, &out, &sb); code != 2 || !strings.Contains(sb.String(), "bad size") {
		t.Fatalf("bad flag: exit %d, %q", code, sb.String())
	}
	sb.Reset()
	if code := Main([]string{"--version"}, &out, &sb); code != 0 || strings.TrimSpace(sb.String()) != version.Line("gpucached") {
		t.Fatalf("version: exit %d, %q", code, sb.String())
	}
	sb.Reset()
	if code := Main([]string{"--listen", "0.0.0.0:9400"}, &out, &sb); code != 2 || !strings.Contains(sb.String(), "loopback") {
		t.Fatalf("remote bind: exit %d, %q", code, sb.String())
	}
}

// TestMainUsage: --help is an answer (stdout, exit 0); a typo'd flag is one
// line on stderr that names the flag meant (exit 2), not the usage.
func TestMainUsage(t *testing.T) {
	for _, arg := range []string{"--help", "-h"} {
		var out, errOut strings.Builder
		if code := Main([]string{arg}, &out, &errOut); code != 0 || !strings.HasPrefix(out.String(), "Usage: gpucached") ||
			!strings.Contains(out.String(), "-hot-capacity") || errOut.Len() != 0 {
			t.Fatalf("%s: exit %d, stdout %d bytes %.40q, stderr %q", arg, code, out.Len(), out.String(), errOut.String())
		}
	}
	var out, errOut strings.Builder
	code := Main([]string{"--hot-capcity", "2GiB"}, &out, &errOut)
	want := "unknown flag --hot-capcity; did you mean --hot-capacity? (gpucached --help lists every flag)\n"
	if code != 2 || out.Len() != 0 || errOut.String() != "gpucached: "+want {
		t.Fatalf("typo'd flag: exit %d, stdout %q, stderr %q; want gpucached: %q", code, out.String(), errOut.String(), want)
	}
}

// TestMainRefusesTypoedEnv: a GPUCACHE_* variable one edit from a setting
// stops the daemon before it starts, naming the setting meant.
func TestMainRefusesTypoedEnv(t *testing.T) {
	t.Setenv("GPUCACHE_HOT_CAPCITY", "2GiB")
	var out, errOut strings.Builder
	code := Main([]string{"--listen", "127.0.0.1:0", "--admin-listen", "off", "--cold-store", "off"}, &out, &errOut)
	if code != 2 || !strings.Contains(errOut.String(), "GPUCACHE_HOT_CAPCITY is not a gpucached setting; did you mean GPUCACHE_HOT_CAPACITY?") {
		t.Fatalf("exit %d, stderr %q", code, errOut.String())
	}
}

func TestStartWithFSColdTier(t *testing.T) {
	c := testConfig()
	c.ColdStore, c.ColdDir = "fs", t.TempDir()+"/cold"
	n := mustStart(t, c, Options{})
	if err := n.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	c.ColdDir = "/proc/no-such/cold" // cannot be created
	if err := startErr(t, c, Options{}); err == nil || !strings.Contains(err.Error(), "cold_dir") {
		t.Fatalf("unusable cold_dir: %v", err)
	}
}
