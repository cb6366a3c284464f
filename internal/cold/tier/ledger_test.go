package tier

import (
	"crypto/sha256"
	"encoding/binary"
	"runtime"
	"testing"
	"time"

	"github.com/gpucache/gpucache/api/identity"
	"github.com/gpucache/gpucache/internal/cold/pack"
)

// ledgerGroup returns the i-th group of tenant as the publisher builds it:
// its own manifest and pack key strings.
func ledgerGroup(tenant string, i int) *coldGroup {
	var seed [8]byte
	binary.LittleEndian.PutUint64(seed[:], uint64(i))
	sum := pack.Digest(sha256.Sum256(seed[:]))
	var ns identity.NamespaceDigest
	ns[0] = 1
	return &coldGroup{tenant: tenant, ns: ns, manifestKey: pack.ManifestKey(ns, sum), packKey: pack.PackKey(ns, sum),
		manifestBytes: 4 << 10, packBytes: 1 << 20, pointerBytes: int64(64 * pack.PointerLen)}
}

// publish queues and commits g, as admitQuota and the sink's publication do.
func (l *coldLedger) publish(g *coldGroup) {
	l.mu.Lock()
	queued := l.queueLocked(g)
	l.mu.Unlock()
	if queued {
		l.commit(g.manifestKey, time.Unix(0, 0))
	}
}

// The ledger tracks at most its bound of packs, however many are published
// or found; the rest are counted as untracked, and a pack it already tracks
// is not counted twice.
func TestColdLedgerBounded(t *testing.T) {
	const max, extra = 100, 40
	l := newColdLedger(max)
	for i := range max + extra {
		l.publish(ledgerGroup("a", i))
	}
	for i := range extra {
		l.found(ledgerGroup("b", max+extra+i))
		l.found(ledgerGroup("a", i)) // known: ignored
	}
	if len(l.groups) != max || len(l.byPack) != max || len(l.tenants["a"].live) != max {
		t.Fatalf("groups %d, by pack %d, live %d: want %d each", len(l.groups), len(l.byPack), len(l.tenants["a"].live), max)
	}
	if l.untracked != 2*extra {
		t.Fatalf("untracked %d, want %d", l.untracked, 2*extra)
	}
	if b := l.tenants["b"]; b != nil && b.committed != 0 {
		t.Fatalf("b counted %d bytes past the bound", b.committed)
	}
}

// TestLedgerGroupBytes checks LedgerGroupBytes against the heap one tracked
// pack costs: the group, its two key strings and its entries in the
// ledger's three maps, growth slack included.
func TestLedgerGroupBytes(t *testing.T) {
	for _, n := range []int{1 << 14, 1<<14 + 1<<13, 1 << 15} {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		l := newColdLedger(MaxColdGroups)
		for i := range n {
			l.publish(ledgerGroup("a", i))
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		per := float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / float64(n)
		t.Logf("%d packs: %.0f heap bytes per tracked pack", n, per)
		if per > LedgerGroupBytes {
			t.Fatalf("%d packs: %.0f heap bytes per tracked pack, LedgerGroupBytes says %d", n, per, LedgerGroupBytes)
		}
		runtime.KeepAlive(l)
	}
}
