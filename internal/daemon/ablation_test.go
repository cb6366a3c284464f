package daemon

import (
	"bytes"
	"context"
	"crypto/sha256"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpucache/gpucache/client"
	"github.com/gpucache/gpucache/internal/config"
)

// lockedBuffer is a log sink safe for the node's goroutines.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// ablationArm runs one node with the knobs set, stores the cold tests'
// blocks (more than its 4 MiB hot tier holds, so some are written behind
// and the rest spilled at shutdown), reads every block back while it runs,
// then restarts it on the same cold directory and reads them all again. It
// returns what the two rounds of GETs served, the cold tier's objects
// (path to digest) and the nodes' log.
func ablationArm(t *testing.T, p2p, dpa bool) (hot, refilled [][]byte, objects map[string][32]byte, logged string) {
	t.Helper()
	c := testConfig()
	c.ColdStore, c.ColdDir = "fs", t.TempDir()
	c.HotCapacity, c.HotSlab, c.HotMaxClass = 4<<20, 1<<20, 1<<20
	c.ColdFlushInterval = time.Hour // flushed at shutdown
	c.AblationP2P, c.AblationDPA = p2p, dpa
	ns, _, ids, keys, payloads := coldBlocks(t)

	var lb lockedBuffer
	log := slog.New(slog.NewTextHandler(&lb, nil))
	runArmNode(t, c, log, func(addr string) {
		writeBlocks(t, addr, ns, ids, payloads).Close()
		hot = getAll(t, addr, ns, keys) // the hot tier's blocks hit; the rest wait to be written behind
	})
	objects = coldObjects(t, c.ColdDir) // before the second node, whose drain spills again
	runArmNode(t, c, log, func(addr string) {
		refilled = getAll(t, addr, ns, keys) // an empty hot tier: every block refilled from the cold tier
	})

	return hot, refilled, objects, lb.String()
}

// runArmNode runs a node with log until body returns.
func runArmNode(t *testing.T, c config.Config, log *slog.Logger, body func(addr string)) {
	t.Helper()
	n := mustStart(t, c, Options{Logger: log})
	body(n.Addrs().Data)
	stopNode(t, n)
}

// getAll GETs every key, in small batches on one connection (see
// readBack), and returns each answer's bytes (nil for a miss).
func getAll(t *testing.T, addr string, ns client.Namespace, keys []client.BlockKey) [][]byte {
	t.Helper()
	cl, err := client.Dial(context.Background(), client.Config{Addr: addr, Conns: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	out := make([][]byte, 0, len(keys))
	for off := 0; off < len(keys); off += 8 {
		for _, r := range cl.Get(context.Background(), ns, keys[off:off+8]) {
			if !r.Hit {
				out = append(out, nil)
				continue
			}
			out = append(out, r.Data)
		}
	}
	return out
}

// TestAblationKnobsChangeNoStoredByte: the same blocks stored by a node
// with ablation_p2p and ablation_dpa off and by one with both on give the
// same bytes back from the hot tier (and refills) and the same cold
// objects, name for name and byte for byte; the knobs' only effect is one
// NOT_RUN_HARDWARE line each in the log.
func TestAblationKnobsChangeNoStoredByte(t *testing.T) {
	offHot, offRefilled, offObjects, offLog := ablationArm(t, false, false)
	onHot, onRefilled, onObjects, onLog := ablationArm(t, true, true)

	if strings.Contains(offLog, "NOT_RUN_HARDWARE") {
		t.Fatalf("knobs off, yet the log says NOT_RUN_HARDWARE:\n%s", offLog)
	}
	for _, want := range []string{"p2p=NOT_RUN_HARDWARE", "dpa=NOT_RUN_HARDWARE"} {
		if !strings.Contains(onLog, want) {
			t.Fatalf("knobs on, the log lacks %q:\n%s", want, onLog)
		}
	}
	_, _, _, _, payloads := coldBlocks(t)
	hits := 0
	for i := range payloads {
		for _, arm := range [][2][]byte{{offHot[i], onHot[i]}, {offRefilled[i], onRefilled[i]}} {
			if !bytes.Equal(arm[0], arm[1]) {
				t.Fatalf("block %d: served bytes differ between the arms (off %d bytes, on %d bytes)", i, len(arm[0]), len(arm[1]))
			}
			if arm[0] != nil && !bytes.Equal(arm[0], payloads[i]) {
				t.Fatalf("block %d served with other bytes than stored", i)
			}
		}
		if offHot[i] != nil {
			hits++
		}
		if offRefilled[i] == nil {
			t.Fatalf("block %d not refilled after the restart", i)
		}
	}
	if hits == 0 || hits == len(payloads) {
		t.Fatalf("%d of %d blocks hit the hot tier: the test wants some in DRAM and some evicted", hits, len(payloads))
	}
	if !maps.Equal(offObjects, onObjects) {
		t.Fatalf("cold objects differ between the arms:\noff %v\non  %v", slices.Sorted(maps.Keys(offObjects)), slices.Sorted(maps.Keys(onObjects)))
	}
}

// coldObjects maps each file under dir (the fs cold tier) to its digest.
func coldObjects(t *testing.T, dir string) map[string][32]byte {
	t.Helper()
	objects := make(map[string][32]byte)
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		objects[rel] = sha256.Sum256(b)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(objects) == 0 {
		t.Fatal("no cold objects written")
	}
	return objects
}
