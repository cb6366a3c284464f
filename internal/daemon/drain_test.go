package daemon

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpucache/gpucache/internal/cold"
	"github.com/gpucache/gpucache/internal/config"
)

// heldStore is a cold store whose Puts wait until the test releases them
// or their context ends: with release never closed, a store that never
// completes a write. Each Put announces itself on started first.
type heldStore struct {
	cold.Store
	started chan string
	release chan struct{}
}

func newHeldStore() *heldStore {
	return &heldStore{started: make(chan string, 1<<12), release: make(chan struct{})}
}

func (s *heldStore) wrap(inner cold.Store) cold.Store {
	s.Store = inner
	return s
}

func (s *heldStore) Put(ctx context.Context, key string, body []byte, opts cold.PutOptions) error {
	s.started <- key
	select {
	case <-s.release:
		return s.Store.Put(ctx, key, body, opts)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// drainClock is Options.DrainDeadline for tests: the drain's deadlines
// pass when the test says so, never on a timer.
type drainClock struct {
	mu      sync.Mutex
	cancels map[string]context.CancelFunc
}

func (c *drainClock) deadline(what string, parent context.Context, _ time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(parent)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cancels == nil {
		c.cancels = make(map[string]context.CancelFunc)
	}
	c.cancels[what] = cancel
	return ctx, cancel
}

// pass ends the deadline named what, which the drain must have set.
func (c *drainClock) pass(t *testing.T, what string) {
	t.Helper()
	c.mu.Lock()
	cancel := c.cancels[what]
	c.mu.Unlock()
	if cancel == nil {
		t.Fatalf("the drain set no %q deadline", what)
	}
	cancel()
}

// hangLimit only detects a hang: every wait below ends at an event the
// node causes (a Put starting, Close returning) long before it.
const hangLimit = 20 * time.Second

func await[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(hangLimit):
		t.Fatalf("hung waiting for %s", what)
		panic("unreachable")
	}
}

// drainFixture is a node on an fs cold tier whose writes go through hs,
// with the drain's deadlines on clk (drain_timeout is an hour: no timer
// ends them), holding 32 blocks in DRAM.
func drainFixture(t *testing.T, hs *heldStore, clk *drainClock, lb *lockedBuffer) (config.Config, *Node) {
	c := testConfig()
	c.ColdStore, c.ColdDir = "fs", t.TempDir()
	c.ColdFlushInterval = time.Hour // nothing written before the drain
	c.DrainTimeout = time.Hour
	opts := Options{Logger: slog.New(slog.NewTextHandler(lb, nil)), ColdStore: hs.wrap, DrainDeadline: clk.deadline}
	n := mustStart(t, c, opts)
	ns, _, ids, _, payloads := coldBlocks(t)
	writeBlocks(t, n.Addrs().Data, ns, ids[:32], payloads[:32]).Close()
	return c, n
}

func closeAsync(n *Node) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- n.Close(context.Background()) }()
	return ch
}

// logLine is the first line of log containing msg, "" if none.
func logLine(log, msg string) string {
	for l := range strings.SplitSeq(log, "\n") {
		if strings.Contains(l, msg) {
			return l
		}
	}
	return ""
}

func wantAttrs(t *testing.T, line string, attrs ...string) {
	t.Helper()
	for _, a := range attrs {
		if !strings.Contains(line, " "+a) {
			t.Errorf("log line lacks %s: %s", a, line)
		}
	}
}

// TestDrainKeepsDeadlineWhenColdStoreHangs: a node whose cold store never
// completes a write still stops once the drain's deadline passes: the
// spill's write is cut at the spill's deadline, the final flush's at the
// drain's, and Close returns without another store call (before the fix
// the cold tier's close flushed again without a deadline, and Close waited
// for the store's 30 s put timeout). The log counts the 32 blocks as lost,
// none as written.
func TestDrainKeepsDeadlineWhenColdStoreHangs(t *testing.T) {
	hs, clk, lb := newHeldStore(), &drainClock{}, &lockedBuffer{}
	_, n := drainFixture(t, hs, clk, lb)
	closed := closeAsync(n)
	await(t, hs.started, "the spill's first write")
	clk.pass(t, "spill")
	await(t, hs.started, "the final flush's write")
	clk.pass(t, "drain")
	if err := await(t, closed, "Close after the drain's deadline"); err != nil {
		t.Fatalf("Close: %v", err)
	}
	select {
	case key := <-hs.started:
		t.Fatalf("a write started after the drain's deadline: %s", key)
	default:
	}
	log := lb.String()
	if l := logLine(log, "drain spill incomplete"); l != "" {
		t.Errorf("every block was copied, the spill is not incomplete: %s", l)
	}
	wantAttrs(t, logLine(log, "drain spill: DRAM blocks copied"), "blocks=32", "packs=0", "queued=1")
	wantAttrs(t, logLine(log, "drain: cold tier not flushed by the drain's deadline"), "blocks_written=0", "packs_written=0", "blocks_spilled=32", "blocks_lost=32", "packs_lost=1")
}

// TestDrainCountsPacksWrittenByTheFinalFlush is the report of issue 29: the
// spill's deadline passes while its pack is still being written, and the
// final flush writes it. The spill logs the pack as queued (not
// "incomplete ... packs=0"), the drain's last cold tier line counts the 32
// blocks written and none lost, and a restarted node serves all of them
// from the cold tier.
func TestDrainCountsPacksWrittenByTheFinalFlush(t *testing.T) {
	hs, clk, lb := newHeldStore(), &drainClock{}, &lockedBuffer{}
	c, n := drainFixture(t, hs, clk, lb)
	closed := closeAsync(n)
	await(t, hs.started, "the spill's first write")
	clk.pass(t, "spill")
	close(hs.release) // the store answers again: the final flush writes
	if err := await(t, closed, "Close"); err != nil {
		t.Fatalf("Close: %v", err)
	}
	log := lb.String()
	if l := logLine(log, "incomplete"); l != "" {
		t.Errorf("a drain that wrote every block logged: %s", l)
	}
	wantAttrs(t, logLine(log, "drain spill: DRAM blocks copied"), "blocks=32", "packs=0", "queued=1")
	wantAttrs(t, logLine(log, "drain: cold tier flushed"), "blocks_written=32", "packs_written=1", "blocks_spilled=32", "blocks_lost=0", "packs_lost=0")

	runNode(t, c, Options{}, func(addr string) {
		ns, _, _, keys, payloads := coldBlocks(t)
		cl, hits := readBack(t, addr, ns, keys[:32], payloads[:32])
		cl.Close()
		if hits != 32 {
			t.Fatalf("after the restart %d of 32 blocks served from the cold tier", hits)
		}
	})
}

// TestDrainSpillCompleteLogsCounts: with a store that answers and the real
// deadlines, the spill writes every block within its budget and the log
// says so, with the counts.
func TestDrainSpillCompleteLogsCounts(t *testing.T) {
	c := testConfig()
	c.ColdStore, c.ColdDir = "fs", t.TempDir()
	c.ColdFlushInterval = time.Hour
	lb := &lockedBuffer{}
	n := mustStart(t, c, Options{Logger: slog.New(slog.NewTextHandler(lb, nil))})
	ns, _, ids, _, payloads := coldBlocks(t)
	writeBlocks(t, n.Addrs().Data, ns, ids[:32], payloads[:32]).Close()
	stopNode(t, n)
	log := lb.String()
	wantAttrs(t, logLine(log, "drain spill: DRAM blocks written to the cold tier"), "blocks=32", "packs=1", "failed=0", "queued=0")
	wantAttrs(t, logLine(log, "drain: cold tier flushed"), "blocks_written=32", "packs_written=1", "blocks_spilled=32", "blocks_lost=0", "packs_lost=0")
}
