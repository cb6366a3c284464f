package flash

import (
	"bytes"
	"context"
	"encoding/binary"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"go.uber.org/goleak"

	"github.com/gpucache/gpucache/internal/lower"
	"github.com/gpucache/gpucache/internal/lower/lowertest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	kib = 1 << 10
	mib = 1 << 20
)

// testConfig is a small tier in a fresh directory: 4 MiB segments.
func testConfig(t testing.TB) Config {
	return Config{Dir: t.TempDir(), Capacity: 64 * mib, SegmentBytes: 4 * mib, WriteBuffer: 16 * mib}
}

// openTier opens cfg and closes the tier when the test ends.
func openTier(t testing.TB, cfg Config) *Tier {
	t.Helper()
	tr, err := Open(cfg)
	if err != nil {
		t.Fatalf("open %s: %v", cfg.Dir, err)
	}
	t.Cleanup(func() { tr.Close() })
	return tr
}

func flush(t testing.TB, tr *Tier) {
	t.Helper()
	if err := tr.Flush(context.Background()); err != nil {
		t.Fatalf("flush: %v", err)
	}
}

func closeTier(t testing.TB, tr *Tier) {
	t.Helper()
	if err := tr.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
}

// stat is one of the tier's STAT values.
func stat(t testing.TB, tr lower.Tier, name string) uint64 {
	t.Helper()
	for _, e := range append(tr.Stats(), tr.TenantStats("acme")...) {
		if e.Name == name {
			return e.Value
		}
	}
	t.Fatalf("no STAT entry %q", name)
	return 0
}

// blocks is a chain of n blocks whose payloads are all different (each
// starts with a stamp of tenant, model and index), sizes cycling.
func blocks(t testing.TB, tenant, model string, n int, sizes ...int) []lowertest.Block {
	t.Helper()
	bs := lowertest.Chain(t, tenant, model, n, sizes...)
	for i := range bs {
		var stamp [24]byte
		copy(stamp[:16], tenant+"/"+model)
		binary.LittleEndian.PutUint64(stamp[16:], uint64(i))
		copy(bs[i].Payload, stamp[:])
	}
	return bs
}

func put(t testing.TB, tr *Tier, bs ...lowertest.Block) {
	t.Helper()
	for _, b := range bs {
		if !lowertest.Put(tr, b) {
			t.Fatalf("block %s/%d declined", b.ID.Tenant, b.ID.Position)
		}
	}
}

// read refills b; ok is false on a miss. A hit with other bytes fails the
// test: the tier never serves bytes that are not the block's.
func read(t testing.TB, tr lower.Tier, b lowertest.Block) bool {
	t.Helper()
	got, err := lower.ReadAll(context.Background(), tr, b.ID.Namespace, b.Digest, b.Key)
	if err != nil {
		return false
	}
	if !bytes.Equal(got, b.Payload) {
		t.Fatalf("block %s/%d: served %d bytes that are not its %d", b.ID.Tenant, b.ID.Position, len(got), len(b.Payload))
	}
	return true
}

// mustRead fails the test unless every block reads back.
func mustRead(t testing.TB, tr lower.Tier, bs ...lowertest.Block) {
	t.Helper()
	for _, b := range bs {
		if !read(t, tr, b) {
			t.Fatalf("block %s/%d missing", b.ID.Tenant, b.ID.Position)
		}
	}
}

// mustMiss fails the test if any block reads back.
func mustMiss(t testing.TB, tr lower.Tier, bs ...lowertest.Block) {
	t.Helper()
	for _, b := range bs {
		if read(t, tr, b) {
			t.Fatalf("block %s/%d still served", b.ID.Tenant, b.ID.Position)
		}
	}
}

// location is where the tier wrote b: its segment and offset.
func location(t testing.TB, tr *Tier, b lowertest.Block) (*segment, int64) {
	t.Helper()
	tr.mu.Lock()
	defer tr.mu.Unlock()
	e := tr.mu.index[blockID{b.Digest, b.Key}]
	if e == nil || e.state != stOnDisk {
		t.Fatalf("block %s/%d not on flash", b.ID.Tenant, b.ID.Position)
	}
	return e.seg, e.off
}

// testFS is the real file system with faults: a full disk, and a file
// system that refuses O_DIRECT (as tmpfs did before Linux 6.6).
type testFS struct {
	refuseDirect bool
	noSpace      atomic.Bool
}

func (f *testFS) OpenFile(name string, flag int, perm os.FileMode) (file, error) {
	if f.refuseDirect && oDirect != 0 && flag&oDirect != 0 {
		return nil, &os.PathError{Op: "open", Path: name, Err: syscall.EINVAL}
	}
	fl, err := osFS{}.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return &testFile{file: fl, fs: f}, nil
}

type testFile struct {
	file
	fs *testFS
}

func (f *testFile) WriteVAt(b [][]byte, off int64) (int, error) {
	if f.fs.noSpace.Load() {
		return 0, syscall.ENOSPC
	}
	return f.file.WriteVAt(b, off)
}

// logCounter is a slog handler counting records whose message holds a
// word, to check what is logged once.
type logCounter struct {
	mu   sync.Mutex
	msgs []string
}

func (l *logCounter) Enabled(context.Context, slog.Level) bool { return true }
func (l *logCounter) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.msgs = append(l.msgs, r.Message)
	return nil
}
func (l *logCounter) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logCounter) WithGroup(string) slog.Handler      { return l }

func (l *logCounter) count(word string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, m := range l.msgs {
		if strings.Contains(m, word) {
			n++
		}
	}
	return n
}
