package server

import (
	"testing"
	"time"

	"github.com/gpucache/gpucache/api/wire"
	"github.com/gpucache/gpucache/internal/hot"
	"github.com/gpucache/gpucache/internal/security"
	"github.com/gpucache/gpucache/internal/security/audit"
	"github.com/gpucache/gpucache/internal/security/seal"
	"github.com/gpucache/gpucache/internal/testfix"
)

// TestHotSealCatchesCorruptionAndExpiry: with hot seals on, a bit flipped
// in slab memory is a miss with 0 bytes, the block is dropped, and an
// integrity event is audited; after a key rotation the old seals verify
// through the grace period and not after it.
func TestHotSealCatchesCorruptionAndExpiry(t *testing.T) {
	clock := testfix.NewClock(time.Unix(1_800_000_000, 0))
	ring := seal.New(clock.Now)
	if err := ring.Add("k1", []byte("0123456789abcdef0123456789abcdef"), time.Time{}); err != nil {
		t.Fatal(err)
	}
	sink := &syncBuffer{}
	g, err := security.NewGuard(&security.Policy{}, nil, audit.New(sink), nil)
	if err != nil {
		t.Fatal(err)
	}
	var store *hot.Store
	ts := startServerStore(t, hot.Config{CapacityBytes: 32 << 20, MinClass: 16 << 10, MaxClass: 1 << 20, SlabBytes: 2 << 20, TagSize: HotTagSize},
		func(c *Config) { c.HotSeal, c.Guard = ring, g; store = c.Store })
	c := helloConn(t, ts.addr, "acme")
	blob := mustCanonical(t, testNamespace("acme"))
	ns, _ := testNamespace("acme").Digest()
	ids, keys := chainIDs(t, testNamespace("acme"), 3, 9)
	payloads := [][]byte{testfix.Payload(20<<10, 1), testfix.Payload(20<<10, 2), testfix.Payload(20<<10, 3)}
	for i := range ids {
		if st := c.put(blob, ids[i], payloads[i]); st != wire.StatusStored {
			t.Fatalf("put: %s", st)
		}
	}
	resp, data, _ := c.get(blob, 0, keys...)
	if hits(resp) != 3 || len(data) != 60<<10 {
		t.Fatalf("sealed blocks read back: %d hits", hits(resp))
	}
	// Flip one bit of block 1 in slab memory.
	v, ok := store.Acquire(ns, keys[1])
	if !ok {
		t.Fatal("block 1 absent")
	}
	v.Bytes[1234] ^= 0x04
	store.Release(v)
	resp, data, _ = c.get(blob, 0, keys...)
	if resp.Blocks[1].Status != wire.StatusMiss || hits(resp) != 2 || len(data) != 40<<10 {
		t.Fatalf("corrupt block: statuses %+v, %d bytes", resp.Blocks, len(data))
	}
	if _, ok := store.Acquire(ns, keys[1]); ok {
		t.Fatal("the corrupt block was kept")
	}
	if evs := sink.events(t, audit.EventIntegrity); len(evs) != 1 || evs[0]["kind"] != "hot_seal_invalid" || evs[0]["key_id"] != "k1" {
		t.Fatalf("integrity events: %v", evs)
	}
	// It can be written again, and reads back.
	if st := c.put(blob, ids[1], payloads[1]); st != wire.StatusStored {
		t.Fatalf("re-put: %s", st)
	}
	// Rotation with a 1h grace: old seals verify until it ends.
	if err := ring.Rotate("k2", []byte("fedcba9876543210fedcba9876543210"), time.Hour); err != nil {
		t.Fatal(err)
	}
	extra, extraKeys := chainIDs(t, testNamespace("acme"), 4, 9)
	if st := c.put(blob, extra[3], testfix.Payload(1000, 4)); st != wire.StatusStored {
		t.Fatalf("put under k2: %s", st)
	}
	if resp, _, _ := c.get(blob, 0, extraKeys...); hits(resp) != 4 {
		t.Fatalf("during the grace: %d hits", hits(resp))
	}
	clock.Advance(time.Hour)
	resp, _, _ = c.get(blob, 0, extraKeys...)
	if hits(resp) != 1 || resp.Blocks[3].Status != wire.StatusHit {
		t.Fatalf("after the grace: %+v, want only the k2 block", resp.Blocks)
	}
	if n := len(sink.events(t, audit.EventIntegrity)); n != 4 {
		t.Fatalf("%d integrity events, want 4 (one corrupt, three expired)", n)
	}
}

func hits(r wire.GetResponse) int {
	n := 0
	for _, b := range r.Blocks {
		if b.Status == wire.StatusHit {
			n++
		}
	}
	return n
}
