package server

import (
	"testing"

	"github.com/gpucache/gpucache/api/wire"
	"github.com/gpucache/gpucache/internal/security/antireplay"
	"github.com/gpucache/gpucache/internal/testfix"
)

// TestReplayFloodIsolation: one tenant cannot exhaust the replay window
// for the others, checked at the server: a read-only
// tenant sends more future-dated stamped requests than the whole nonce
// memory holds. Before per-tenant budgets every other tenant's PUT and
// DELETE then answered REPLAY for the whole window; now they are served,
// and replays are still refused.
func TestReplayFloodIsolation(t *testing.T) {
	f := startSecure(t, nil)
	nsG := testNamespace("gamma")
	blobG := mustCanonical(t, nsG)
	_, keysG := chainIDs(t, nsG, 1, 5)
	g := f.dial(t, secretGamma)
	ahead := f.clock.Now().Add(antireplay.DefaultMaxFuture)
	const flood = 1100 // more than the fixture's MaxNonces (1024), all tenants together
	refused := 0
	for i := range flood {
		op, body := wire.OpLookup, lookupBody(blobG, 0, keysG...)
		if i%2 == 1 { // a DELETE gamma may not do: DENIED, after the stamp is checked
			op, body = wire.OpDelete, (&wire.DeleteRequest{Namespace: blobG, Keys: []wire.Key{keysG[0]}}).AppendTo(nil)
		}
		id := g.sendStamped(op, body, freshStamp(ahead))
		h, b := g.recv()
		if h.RequestID != id {
			t.Fatalf("answer to %d, want %d", h.RequestID, id)
		}
		switch e := errOf(t, answer{h, b}); {
		case e == nil && op == wire.OpLookup:
		case e != nil && e.Code == wire.CodeDenied && op == wire.OpDelete:
		case e != nil && e.Code == wire.CodeReplay:
			refused++ // gamma over its own budget: its problem alone
		default:
			t.Fatalf("flood request %d (%s): %v", i, op, e)
		}
	}
	if refused == 0 {
		t.Fatalf("the flood never reached gamma's own nonce budget")
	}

	// acme and beta, stamping with the server's clock (older than every
	// flood stamp): PUT, DELETE and a replay.
	for _, tenant := range []struct {
		name   string
		secret []byte
	}{{"acme", secretA}, {"beta", secretB}} {
		ns := testNamespace(tenant.name)
		blob := mustCanonical(t, ns)
		ids, keys := chainIDs(t, ns, 2, 9)
		c := f.dial(t, tenant.secret)
		if st := c.putID(blob, ids[0], testfix.Payload(100, 1)); st != wire.StatusStored {
			t.Fatalf("%s PUT after gamma's flood: %s", tenant.name, st)
		}
		del := c.do(wire.OpDelete, (&wire.DeleteRequest{Namespace: blob, Keys: []wire.Key{keys[0]}}).AppendTo(nil))
		if e := errOf(t, del); e != nil {
			t.Fatalf("%s DELETE after gamma's flood: %v", tenant.name, e)
		}
		id := c.sendStamped(wire.OpPut, putBody(blob, []wire.PutBlock{putBlock(keys[1], ids[1], 100)}, [][]byte{testfix.Payload(100, 2)}), c.last)
		h, b := c.recv()
		if h.RequestID != id {
			t.Fatal("out of order")
		}
		wantErr(t, tenant.name+" replayed stamp", answer{h, b}, wire.CodeReplay)
	}
	if n := f.guard.Replay().TenantLen("gamma"); n > 256 {
		t.Fatalf("gamma holds %d nonces, over its budget of 256", n)
	}
}
