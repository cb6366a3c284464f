package server

import (
	"testing"

	"github.com/gpucache/gpucache/api/wire"
	"github.com/gpucache/gpucache/internal/hot"
	"github.com/gpucache/gpucache/internal/testfix"
)

// TestDeleteRightAfterGet: a DELETE pipelined right behind a GET of the
// same 1 MiB block finds the block still pinned by the GET's response
// (the writer releases its View only after writing the bytes). It waits
// for that release and answers DELETED, where it used to answer BUSY
// (seen as a flaky BUSY in a client's GET-then-DELETE).
func TestDeleteRightAfterGet(t *testing.T) {
	ts := startServerStore(t, hot.Config{CapacityBytes: 32 << 20, MinClass: 16 << 10, MaxClass: 1 << 20, SlabBytes: 2 << 20}, nil)
	c := helloConn(t, ts.addr, "acme")
	blob := mustCanonical(t, testNamespace("acme"))
	ids, keys := chainIDs(t, testNamespace("acme"), 1, 3)
	payload := testfix.Payload(1<<20, 7)
	if st := c.put(blob, ids[0], payload); st != wire.StatusStored {
		t.Fatalf("put: %s", st)
	}
	for round := range 5 {
		if round > 0 {
			if st := c.put(blob, ids[0], payload); st != wire.StatusStored {
				t.Fatalf("round %d put: %s", round, st)
			}
		}
		get := wire.GetRequest{Namespace: blob, Keys: []wire.Key{keys[0]}}
		gid := c.send(wire.OpGet, get.AppendTo(nil))
		did := c.send(wire.OpDelete, (&wire.DeleteRequest{Namespace: blob, Keys: []wire.Key{keys[0]}}).AppendTo(nil))
		for range 2 {
			h, body := c.recv()
			switch h.RequestID {
			case gid:
				if h.Flags&wire.FlagError != 0 || len(body) < 1<<20 {
					t.Fatalf("round %d GET: flags %x, %d bytes", round, h.Flags, len(body))
				}
			case did:
				var resp wire.StatusResponse
				if err := resp.Decode(body, wire.DefaultMaxBatch); err != nil {
					t.Fatal(err)
				}
				if resp.Statuses[0] != wire.StatusDeleted {
					t.Fatalf("round %d: DELETE right after GET answered %s, want DELETED", round, resp.Statuses[0])
				}
			default:
				t.Fatalf("response to request %d", h.RequestID)
			}
		}
	}
}
