package server

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"log/slog"
	"runtime"
	"testing"

	"github.com/gpucache/gpucache/api/identity"
	"github.com/gpucache/gpucache/api/wire"
	"github.com/gpucache/gpucache/internal/cold"
	"github.com/gpucache/gpucache/internal/cold/tier"
	"github.com/gpucache/gpucache/internal/hot"
	"github.com/gpucache/gpucache/internal/lower"
	"github.com/gpucache/gpucache/internal/testfix"
)

// getInto sends a GET for one key and reads the response frame into buf,
// which must hold it, so the test itself allocates nothing per GET. It
// returns the block's status and payload (a slice of buf).
func (c *rawConn) getInto(nsBlob []byte, key identity.BlockKey, buf []byte) (wire.Status, []byte) {
	c.t.Helper()
	req := wire.GetRequest{Namespace: nsBlob, Keys: []wire.Key{key}}
	c.send(wire.OpGet, req.AppendTo(nil))
	var hb [wire.HeaderSize]byte
	if _, err := io.ReadFull(c.nc, hb[:]); err != nil {
		c.t.Fatalf("read header: %v", err)
	}
	h, err := wire.DecodeHeader(hb[:])
	if err != nil || h.Flags&wire.FlagError != 0 || int(h.BodyLen) > len(buf) {
		c.t.Fatalf("GET response: %+v %v", h, err)
	}
	body := buf[:h.BodyLen]
	if _, err := io.ReadFull(c.nc, body); err != nil {
		c.t.Fatalf("read body: %v", err)
	}
	// u32 table length | table: u32 n, n × (u8 status, u32 len) | payload
	metaLen := binary.LittleEndian.Uint32(body)
	table := body[4 : 4+metaLen]
	st := wire.Status(table[4])
	n := binary.LittleEndian.Uint32(table[5:])
	return st, body[4+metaLen : 4+metaLen+n]
}

// TestLargeColdRefillReadsIntoTheSlot: a 32 MiB block (an LMCache chunk of
// Llama-3-8B) in the cold tier refills on a hot miss, byte-identical, and
// the refill reads it straight into the reserved hot-tier slot: across 8
// refills the Go heap allocates far less than one block (before, every
// refill went through a MaxPayload-sized heap buffer: 64 MiB, more than the
// block itself, per concurrent refill).
func TestLargeColdRefillReadsIntoTheSlot(t *testing.T) {
	const size = 32 << 20
	ct, err := tier.New(tier.Config{Store: cold.NewMem(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer ct.Close()
	id := testID(1)
	ns := id.Namespace
	d, _ := ns.Digest()
	key := mustKey(t, id)
	want := testfix.Payload(size, 7)
	ct.Remember(id)
	ct.Evicted(d, key, id.Parent, id.ValidLength, want)
	if rep := ct.Flush(context.Background(), true); rep.Completed != 1 {
		t.Fatalf("the 32 MiB block was not written to the cold tier: %+v, %+v", rep, ct.Stats())
	}

	hc := hot.Config{CapacityBytes: 128 << 20, MinClass: 16 << 10, MaxClass: 64 << 20, SlabBytes: 64 << 20, Prefault: hot.PrefaultNone}
	ts := startServerStore(t, hc, func(c *Config) {
		c.Lower = &tierFuncs{refill: func(ctx context.Context, ns identity.Namespace, key identity.BlockKey, alloc lower.Alloc) (int, bool) {
			n, res, _ := ct.RefillInto(ctx, ns, key, alloc)
			return n, res.Hit
		}}
	})
	c := helloConn(t, ts.addr, "acme")
	blob := mustCanonical(t, ns)
	buf := make([]byte, size+1<<20)

	const refills = 8
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for i := range refills {
		if del, busy := ts.store.Delete(d, key); i > 0 && (!del || busy) {
			t.Fatalf("refill %d: cannot drop the hot copy (deleted %v, busy %v)", i, del, busy)
		}
		st, got := c.getInto(blob, key, buf)
		if st != wire.StatusHit || !bytes.Equal(got, want) {
			t.Fatalf("refill %d: status %v, %d bytes, identical %v", i, st, len(got), bytes.Equal(got, want))
		}
	}
	runtime.ReadMemStats(&after)
	if hits := ct.Stats().RefillHits; hits != refills {
		t.Fatalf("%d cold refills, want %d", hits, refills)
	}
	allocated := after.TotalAlloc - before.TotalAlloc
	t.Logf("%d refills of %d MiB: %d KiB allocated on the Go heap, heap in use %d -> %d MiB",
		refills, size>>20, allocated>>10, before.HeapInuse>>20, after.HeapInuse>>20)
	if allocated > size/8 {
		t.Fatalf("%d refills of a %d MiB block allocated %d MiB on the Go heap: the payload goes through the heap", refills, size>>20, allocated>>20)
	}
}
