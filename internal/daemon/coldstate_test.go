package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpucache/gpucache/client"
	"github.com/gpucache/gpucache/internal/cold/s3store/s3test"
	"github.com/gpucache/gpucache/internal/config"
	"github.com/gpucache/gpucache/internal/degrade"
)

// watchLog is a log destination that keeps every line and lets a test
// wait for a line containing a string, so tests wait on the event itself.
type watchLog struct {
	mu      sync.Mutex
	lines   []string
	waiters []logWaiter
}

type logWaiter struct {
	sub string
	ch  chan struct{}
}

func (w *watchLog) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for l := range strings.SplitSeq(strings.TrimRight(string(p), "\n"), "\n") {
		w.lines = append(w.lines, l)
		kept := w.waiters[:0]
		for _, wt := range w.waiters {
			if strings.Contains(l, wt.sub) {
				close(wt.ch)
			} else {
				kept = append(kept, wt)
			}
		}
		w.waiters = kept
	}
	return len(p), nil
}

// when returns a channel closed once a line containing sub is logged
// (at once if one was).
func (w *watchLog) when(sub string) <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	ch := make(chan struct{})
	for _, l := range w.lines {
		if strings.Contains(l, sub) {
			close(ch)
			return ch
		}
	}
	w.waiters = append(w.waiters, logWaiter{sub, ch})
	return ch
}

func (w *watchLog) count(sub string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, l := range w.lines {
		if strings.Contains(l, sub) {
			n++
		}
	}
	return n
}

// runLogged starts a node logging (at Debug) to w and stops it when the
// test ends.
func runLogged(t *testing.T, c config.Config, opts Options, w *watchLog) Addrs {
	t.Helper()
	opts.Logger = slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
	return mustStart(t, c, opts).Addrs()
}

func waitFor(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-t.Context().Done():
		t.Fatalf("never happened: %s", what)
	}
}

// closedAddr returns a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

func stat(t *testing.T, addr string) map[string]uint64 {
	t.Helper()
	cl, err := client.Dial(context.Background(), client.Config{Addr: addr})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	st, err := cl.Stat(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestS3UnreachableAtStartServesDegraded: an S3 endpoint that refuses
// connections at start does not stop the node. It serves (hot PUT and GET
// work, a block it does not hold is a miss), says so once in the log,
// /readyz answers 200 "ready, degraded: cold tier unreachable", and STAT
// and /metrics show the store as not connected.
func TestS3UnreachableAtStartServesDegraded(t *testing.T) {
	c := testConfig()
	c.ColdStore, c.S3Endpoint, c.S3Bucket = "s3", "http://"+closedAddr(t), "gpucache-test"
	c.S3AccessKey, c.S3SecretKey = "ak", "sk"
	w := &watchLog{}
	a := runLogged(t, c, Options{}, w)

	if n := w.count("cold tier unreachable at start"); n != 1 {
		t.Fatalf("%d 'unreachable at start' lines, want 1:\n%s", n, strings.Join(w.lines, "\n"))
	}
	if code, body := httpGet(t, "http://"+a.Admin+"/readyz"); code != 200 || body != "ready, degraded: cold tier unreachable\n" {
		t.Fatalf("readyz %d %q", code, body)
	}
	ns, _, ids, keys, payloads := coldBlocks(t)
	cl := writeBlocks(t, a.Data, ns, ids[:16], payloads[:16])
	defer cl.Close()
	for i, r := range cl.Get(context.Background(), ns, keys[:17]) {
		if hit := i < 16; r.Hit != hit {
			t.Fatalf("block %d: hit %v, want %v", i, r.Hit, hit)
		}
	}
	if st := stat(t, a.Data); st["cold_store_connected"] != 0 || st["cold_bytes_limit"] != uint64(c.ColdPending) {
		t.Fatalf("STAT cold_store_connected %d, cold_bytes_limit %d", st["cold_store_connected"], st["cold_bytes_limit"])
	}
	_, metrics := httpGet(t, "http://"+a.Admin+"/metrics")
	if !strings.Contains(metrics, "\ngpucache_cold_store_connected 0\n") {
		t.Fatal("metrics lack gpucache_cold_store_connected 0")
	}
}

// TestS3ComesUpAfterStart: the node started while S3 was down connects on
// its own once the server comes up, and /readyz is plain "ready" again.
func TestS3ComesUpAfterStart(t *testing.T) {
	srv := s3test.NewServer(t) // not started: its port refuses connections
	c := testConfig()
	c.ColdStore, c.S3Endpoint, c.S3Bucket, c.S3Prefix = "s3", srv.Endpoint, s3test.Bucket, "late/"
	c.S3AccessKey, c.S3SecretKey = srv.AccessKey, srv.SecretKey
	c.HotCapacity, c.HotSlab, c.HotMaxClass = 4<<20, 1<<20, 1<<20
	connected := make(chan struct{})
	w := &watchLog{}
	a := runLogged(t, c, Options{OnColdConnected: func(bool) { close(connected) }}, w)
	if code, body := httpGet(t, "http://"+a.Admin+"/readyz"); code != 200 || body != "ready, degraded: cold tier unreachable\n" {
		t.Fatalf("readyz before S3 is up: %d %q", code, body)
	}
	srv.Start(t)
	waitFor(t, connected, "the cold tier connects")
	if code, body := httpGet(t, "http://"+a.Admin+"/readyz"); code != 200 || body != "ready\n" {
		t.Fatalf("readyz once S3 is up: %d %q", code, body)
	}
	if st := stat(t, a.Data); st["cold_store_connected"] != 1 {
		t.Fatalf("STAT cold_store_connected %d", st["cold_store_connected"])
	}
	if n := w.count("cold tier connected"); n != 1 {
		t.Fatalf("%d 'connected' lines, want 1", n)
	}
}

// TestColdTempCleanedAtStart: temp files a crashed Put left in the fs cold
// tier's tmp/ are removed when the node starts, before any write; files
// there that are not ours stay.
func TestColdTempCleanedAtStart(t *testing.T) {
	c := testConfig()
	c.ColdStore, c.ColdDir = "fs", t.TempDir()
	tmp := filepath.Join(c.ColdDir, "tmp")
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		t.Fatal(err)
	}
	for i := range 8 {
		if err := os.WriteFile(filepath.Join(tmp, fmt.Sprintf("put-%d", 1000+i)), []byte("half a pa"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(tmp, "README"), []byte("not ours"), 0o600); err != nil {
		t.Fatal(err)
	}
	w := &watchLog{}
	runLogged(t, c, Options{}, w)
	entries, err := os.ReadDir(tmp)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != "README" {
		t.Fatalf("tmp/ after start holds %d entries, want only README", len(entries))
	}
	if n := w.count("files=8"); n != 1 {
		t.Fatalf("the start did not log the 8 removed files:\n%s", strings.Join(w.lines, "\n"))
	}
}

// TestColdWriteFailuresAreVisible: with the cold store failing (the
// storage_loss failpoint) while blocks are evicted, the node logs the
// write-behind going degraded once and its recovery once, /readyz says
// "cold tier writes failing" meanwhile, and STAT and /metrics carry the
// cold tier's counters (gauges without _total, counters with it).
func TestColdWriteFailuresAreVisible(t *testing.T) {
	c := testConfig()
	c.ColdStore, c.ColdDir = "fs", t.TempDir()
	c.HotCapacity, c.HotSlab, c.HotMaxClass = 4<<20, 1<<20, 1<<20
	c.ColdFlushInterval = 10 * time.Millisecond
	faults := &degrade.Registry{}
	w := &watchLog{}
	failing, recovered := w.when("writes failing"), w.when("writes recovered")
	a := runLogged(t, c, Options{Faults: faults}, w)

	disarm := faults.Arm(degrade.StorageLoss, degrade.Fail)
	ns, _, ids, _, payloads := coldBlocks(t) // 10 MiB through a 4 MiB hot tier: many evictions
	cl := writeBlocks(t, a.Data, ns, ids, payloads)
	defer cl.Close()
	waitFor(t, failing, "the write-behind reports the store failing")
	st := stat(t, a.Data)
	if st["cold_write_degraded"] != 1 || st["cold_blocks_offered"] == 0 || st["cold_write_outages"] != 1 || st["cold_packs_written"] != 0 {
		t.Fatalf("STAT during the outage: degraded %d offered %d outages %d written %d", st["cold_write_degraded"],
			st["cold_blocks_offered"], st["cold_write_outages"], st["cold_packs_written"])
	}
	if st["cold_bytes_held"] == 0 || st["cold_bytes_held"] > st["cold_bytes_limit"] {
		t.Fatalf("STAT cold_bytes_held %d, limit %d", st["cold_bytes_held"], st["cold_bytes_limit"])
	}
	if code, body := httpGet(t, "http://"+a.Admin+"/readyz"); code != 200 || body != "ready, degraded: cold tier writes failing\n" {
		t.Fatalf("readyz during the outage: %d %q", code, body)
	}
	_, metrics := httpGet(t, "http://"+a.Admin+"/metrics")
	for _, want := range []string{"\ngpucache_cold_write_degraded 1\n", "\ngpucache_cold_bytes_held ", "\ngpucache_cold_bytes_limit ",
		"\ngpucache_cold_blocks_offered_total ", "\ngpucache_cold_packs_given_up_total 0\n", "\ngpucache_cold_write_outages_total 1\n"} {
		if !strings.Contains(metrics, want) {
			t.Fatalf("metrics lack %q", strings.TrimSpace(want))
		}
	}

	disarm()
	waitFor(t, recovered, "the write-behind reports the store recovered")
	if n, m := w.count("writes failing"), w.count("writes recovered"); n != 1 || m != 1 {
		t.Fatalf("%d 'writes failing' and %d 'writes recovered' lines, want 1 each", n, m)
	}
	if st := stat(t, a.Data); st["cold_write_degraded"] != 0 || st["cold_packs_given_up"] != 0 {
		t.Fatalf("STAT after recovery: degraded %d, given up %d", st["cold_write_degraded"], st["cold_packs_given_up"])
	}
}
