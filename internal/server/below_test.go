package server

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/gpucache/gpucache/api/identity"
	"github.com/gpucache/gpucache/api/wire"
	"github.com/gpucache/gpucache/internal/lower"
	"github.com/gpucache/gpucache/internal/testfix"
)

// fakeCold is a tier below DRAM as its presence and delete see it.
type fakeCold struct {
	mu      sync.Mutex
	present map[identity.NamespaceDigest]map[identity.BlockKey]bool
	fail    error // Delete's answer when set
	deletes int
}

func (f *fakeCold) has(d identity.NamespaceDigest, k identity.BlockKey) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.present[d][k]
}

func (f *fakeCold) add(d identity.NamespaceDigest, k identity.BlockKey) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.present[d] == nil {
		f.present[d] = map[identity.BlockKey]bool{}
	}
	f.present[d][k] = true
}

func (f *fakeCold) del(_ context.Context, _ identity.Namespace, d identity.NamespaceDigest, k identity.BlockKey) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.deletes++
	if f.fail != nil {
		return f.fail
	}
	delete(f.present[d], k)
	return nil
}

func (f *fakeCold) deleteCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.deletes
}

func startColdPresence(t *testing.T) (*testServer, *fakeCold) {
	fc := &fakeCold{present: map[identity.NamespaceDigest]map[identity.BlockKey]bool{}}
	ts := startServer(t, func(c *Config) {
		c.Lower = &tierFuncs{present: fc.has, del: fc.del}
	})
	return ts, fc
}

func deleteKeys(t *testing.T, c *rawConn, blob []byte, keys []wire.Key) []wire.Status {
	t.Helper()
	h, body := c.roundTrip(wire.OpDelete, (&wire.DeleteRequest{Namespace: blob, Keys: keys}).AppendTo(nil))
	if h.Flags&wire.FlagError != 0 {
		t.Fatalf("delete: %v", decodeErr(t, body))
	}
	var resp wire.StatusResponse
	if err := resp.Decode(body, wire.DefaultMaxBatch); err != nil {
		t.Fatal(err)
	}
	return resp.Statuses
}

// LOOKUP counts the blocks after the DRAM run that the cold tier holds,
// and leases only the DRAM run; another tenant's namespace gets nothing.
func TestLookupCountsColdBlocks(t *testing.T) {
	ts, fc := startColdPresence(t)
	ns := testNamespace("acme")
	d, _ := ns.Digest()
	blob := mustCanonical(t, ns)
	ids := tenantChain(t, "acme", 3, 5)
	c := helloConn(t, ts.addr, "acme")
	// Block 0 in DRAM, 1-2 cold, 3 in DRAM, 4 nowhere.
	for _, i := range []int{0, 3} {
		if st := c.put(blob, ids[i], testfix.Payload(4096, byte(i))); st != wire.StatusStored {
			t.Fatalf("put %d: %s", i, st)
		}
	}
	fc.add(d, mustKey(t, ids[1]))
	fc.add(d, mustKey(t, ids[2]))
	keys := wireKeysOf(t, ids...)
	l := c.lookup(blob, 10_000, keys)
	if l.Hits != 4 || l.LeaseID == 0 {
		t.Fatalf("lookup: hits %d lease %d, want 4 hits and a lease", l.Hits, l.LeaseID)
	}
	// The lease covers the DRAM run (block 0) only: block 3, in DRAM after
	// the cold blocks, is not pinned by it.
	if _, busy := ts.store.Delete(d, mustKey(t, ids[0])); !busy {
		t.Fatal("block 0 is not leased")
	}
	if deleted, busy := ts.store.Delete(d, mustKey(t, ids[3])); !deleted || busy {
		t.Fatalf("block 3: deleted %v busy %v; the lease must cover the DRAM run only", deleted, busy)
	}
	// A run that starts in the cold tier.
	if l := c.lookup(blob, 0, keys[1:]); l.Hits != 2 || l.LeaseID != 0 {
		t.Fatalf("cold-first lookup: %+v", l)
	}

	// Another tenant sends the same keys under its own namespace: misses.
	o := helloConn(t, ts.addr, "other")
	if l := o.lookup(mustCanonical(t, testNamespace("other")), 0, keys[1:3]); l.Hits != 0 {
		t.Fatalf("another tenant: %d hits", l.Hits)
	}
}

// TestLeaseHoldsLocalTierBlocks: a LOOKUP that asks for a lease reads the
// blocks of its run that DRAM misses and a local tier (flash) holds into
// DRAM first, so the lease pins them and the GET needs no read below; a
// tier that is not local (cold) is never read by a LOOKUP.
func TestLeaseHoldsLocalTierBlocks(t *testing.T) {
	ns := testNamespace("acme")
	d, _ := ns.Digest()
	blob := mustCanonical(t, ns)
	ids := tenantChain(t, "acme", 9, 4)
	below := map[identity.BlockKey][]byte{}
	for i, id := range ids[1:3] {
		below[mustKey(t, id)] = testfix.Payload(4096, byte(10+i))
	}
	for _, local := range []bool{true, false} {
		var refills atomic.Int32
		ts := startServer(t, func(c *Config) {
			c.Lower = &tierFuncs{local: local,
				present: func(_ identity.NamespaceDigest, k identity.BlockKey) bool { _, ok := below[k]; return ok },
				refill: func(_ context.Context, _ identity.Namespace, k identity.BlockKey, alloc lower.Alloc) (int, bool) {
					refills.Add(1)
					p, ok := below[k]
					if !ok {
						return 0, false
					}
					dst, ok := alloc(len(p))
					if !ok {
						return 0, false
					}
					return copy(dst, p), true
				}}
		})
		c := helloConn(t, ts.addr, "acme")
		// Block 0 in DRAM, 1-2 below, 3 nowhere.
		if st := c.put(blob, ids[0], testfix.Payload(4096, 1)); st != wire.StatusStored {
			t.Fatalf("put: %s", st)
		}
		keys := wireKeysOf(t, ids...)
		l := c.lookup(blob, 10_000, keys)
		if l.Hits != 3 || l.LeaseID == 0 {
			t.Fatalf("local %v: lookup hits %d lease %d, want 3 hits and a lease", local, l.Hits, l.LeaseID)
		}
		_, busy := ts.store.Delete(d, mustKey(t, ids[2]))
		if busy != local {
			t.Fatalf("local %v: block 2 leased %v; a lease holds a local tier's blocks, never a cold one's", local, busy)
		}
		if got := refills.Load(); (got == 2) != local || (!local && got != 0) {
			t.Fatalf("local %v: %d reads below DRAM during the LOOKUP", local, got)
		}
		if local {
			resp, _, _ := c.get(blob, l.LeaseID, mustKey(t, ids[0]), mustKey(t, ids[1]), mustKey(t, ids[2]))
			for i, b := range resp.Blocks {
				if b.Status != wire.StatusHit {
					t.Fatalf("GET under the lease: block %d %s", i, b.Status)
				}
			}
			if got := refills.Load(); got != 2 {
				t.Fatalf("the GET read below DRAM again (%d reads): the lease should have held the blocks", got)
			}
		}
	}
}

// DELETE removes the DRAM copy and hides the cold copy; a cold tier that
// cannot confirm answers BUSY.
func TestDeleteHidesColdCopy(t *testing.T) {
	ts, fc := startColdPresence(t)
	ns := testNamespace("acme")
	d, _ := ns.Digest()
	blob := mustCanonical(t, ns)
	ids := tenantChain(t, "acme", 4, 3)
	c := helloConn(t, ts.addr, "acme")
	if st := c.put(blob, ids[0], testfix.Payload(4096, 1)); st != wire.StatusStored {
		t.Fatal(st)
	}
	fc.add(d, mustKey(t, ids[0]))
	fc.add(d, mustKey(t, ids[1]))
	sts := deleteKeys(t, c, blob, wireKeysOf(t, ids...))
	want := []wire.Status{wire.StatusDeleted, wire.StatusDeleted, wire.StatusMiss}
	for i := range want {
		if sts[i] != want[i] {
			t.Fatalf("statuses %v, want %v", sts, want)
		}
	}
	if fc.deleteCount() != 3 || fc.has(d, mustKey(t, ids[0])) || fc.has(d, mustKey(t, ids[1])) {
		t.Fatalf("cold deletes %d, present after %v %v", fc.deleteCount(), fc.has(d, mustKey(t, ids[0])), fc.has(d, mustKey(t, ids[1])))
	}
	if l := c.lookup(blob, 0, wireKeysOf(t, ids...)); l.Hits != 0 {
		t.Fatalf("lookup after delete: %d hits", l.Hits)
	}

	// The cold tier cannot be reached: the DRAM copy goes, BUSY says so.
	if st := c.put(blob, ids[2], testfix.Payload(4096, 2)); st != wire.StatusStored {
		t.Fatal(st)
	}
	fc.mu.Lock()
	fc.fail = errors.New("store unreachable (test)")
	fc.mu.Unlock()
	if sts := deleteKeys(t, c, blob, wireKeysOf(t, ids[2])); sts[0] != wire.StatusBusy {
		t.Fatalf("delete with the cold tier down: %v, want BUSY", sts)
	}
	if l := c.lookup(blob, 0, wireKeysOf(t, ids[2])); l.Hits != 0 {
		t.Fatal("the DRAM copy survived a delete whose cold part failed")
	}
}
