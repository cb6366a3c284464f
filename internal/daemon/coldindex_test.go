package daemon

import (
	"bytes"
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/gpucache/gpucache/client"
	"github.com/gpucache/gpucache/internal/cold/s3store/s3test"
	"github.com/gpucache/gpucache/internal/config"
)

// runIndexed is runNode for a node whose log the body can wait on: it
// returns once the cold presence index has listed the store.
func runIndexed(t *testing.T, c config.Config, body func(addr string)) {
	t.Helper()
	runIndexedAddrs(t, c, func(a Addrs) { body(a.Data) })
}

// runIndexedAddrs is runIndexed for a body that needs every listener.
func runIndexedAddrs(t *testing.T, c config.Config, body func(a Addrs)) {
	t.Helper()
	w := &watchLog{}
	log := slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelInfo}))
	n := mustStart(t, c, Options{Logger: log})
	waitFor(t, w.when("cold presence index listed"), "the cold presence index listed the store")
	body(n.Addrs())
	stopNode(t, n)
}

// TestColdLookupAfterRestart: blocks evicted and written behind, and the
// blocks DRAM still held when the node drained (spilled at shutdown), are
// counted by LOOKUP on a node restarted over the same fs cold directory,
// and GET returns them byte-identical. DELETE then hides a block for good:
// GET misses, also after another restart, and a block deleted while still
// pending write-behind is not brought back by the shutdown flush.
func TestColdLookupAfterRestart(t *testing.T) {
	c := testConfig()
	c.ColdStore, c.ColdDir = "fs", t.TempDir()
	coldLookupRestart(t, c)
}

// TestS3ColdLookupAfterRestart is the same against a real S3 server
// (versitygw) on 127.0.0.1.
func TestS3ColdLookupAfterRestart(t *testing.T) {
	endpoint, ak, sk := s3test.Start(t)
	c := testConfig()
	c.ColdStore, c.S3Endpoint, c.S3Bucket, c.S3Prefix = "s3", endpoint, s3test.Bucket, "index/"
	c.S3AccessKey, c.S3SecretKey = ak, sk
	coldLookupRestart(t, c)
}

func coldLookupRestart(t *testing.T, c config.Config) {
	c.HotCapacity, c.HotSlab, c.HotMaxClass = 4<<20, 1<<20, 1<<20
	c.ColdFlushInterval = time.Hour // evicted blocks wait in batches until the shutdown flush
	ns, _, ids, keys, payloads := coldBlocks(t)
	ctx := context.Background()
	other := ns
	other.Tenant = "other"
	last := len(keys) - 1

	var evicted uint64
	runIndexed(t, c, func(addr string) {
		cl := writeBlocks(t, addr, ns, ids, payloads)
		defer cl.Close()
		stat, err := cl.Stat(ctx)
		if err != nil {
			t.Fatal(err)
		}
		evicted = stat["hot_evictions"]
		// Block 0 was evicted and waits in a batch; the last block is in
		// DRAM and would be spilled at shutdown. Delete both now.
		if r := cl.Get(ctx, ns, keys[:1])[0]; r.Hit {
			t.Fatal("block 0 is still in DRAM: the test stores too little")
		}
		if _, err := cl.Delete(ctx, ns, []client.BlockKey{keys[0], keys[last]}); err != nil {
			t.Fatal(err)
		}
		if r := cl.Get(ctx, ns, keys[last:])[0]; r.Hit {
			t.Fatal("GET hit right after DELETE")
		}
	})
	if evicted == 0 || evicted >= uint64(len(keys)) {
		t.Fatalf("%d of %d blocks evicted: the test needs some evicted and some in DRAM at shutdown", evicted, len(keys))
	}

	// Restart: DRAM is empty, every block left is only in the cold tier.
	runIndexed(t, c, func(addr string) {
		cl, err := client.Dial(ctx, client.Config{Addr: addr, Conns: 1})
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		hits, _, err := cl.Lookup(ctx, ns, keys[1:last], 0)
		if err != nil || hits != last-1 {
			t.Fatalf("LOOKUP after restart: %d hits of %d (%v); %d were evicted, the rest spilled at drain", hits, last-1, err, evicted)
		}
		stat, _ := cl.Stat(ctx)
		if stat["cold_index_entries"] != uint64(last-1) || stat["cold_index_ready"] != 1 {
			t.Fatalf("index: %d entries, ready %d; want %d, 1", stat["cold_index_entries"], stat["cold_index_ready"], last-1)
		}
		// The deleted blocks: not counted, and GET misses.
		if hits, _, _ := cl.Lookup(ctx, ns, keys[:2], 0); hits != 0 {
			t.Fatalf("LOOKUP counts a block deleted while pending write-behind: %d hits", hits)
		}
		if hits, _, _ := cl.Lookup(ctx, ns, keys[last:], 0); hits != 0 {
			t.Fatal("LOOKUP counts a block deleted in DRAM before the drain spill")
		}
		for _, k := range []client.BlockKey{keys[0], keys[last]} {
			if r := cl.Get(ctx, ns, []client.BlockKey{k})[0]; r.Hit {
				t.Fatal("GET of a deleted block hit after a restart")
			}
		}
		// Another tenant, same keys: nothing.
		ocl, err := client.Dial(ctx, client.Config{Addr: addr, Tenant: "other"})
		if err != nil {
			t.Fatal(err)
		}
		defer ocl.Close()
		if hits, _, _ := ocl.Lookup(ctx, other, keys[1:last], 0); hits != 0 {
			t.Fatalf("another tenant's LOOKUP: %d hits", hits)
		}
		// GET returns what LOOKUP counted, byte for byte.
		for i := 1; i < last; i++ {
			r := cl.Get(ctx, ns, keys[i:i+1])[0]
			if !r.Hit || !bytes.Equal(r.Data, payloads[i]) {
				t.Fatalf("GET of block %d after restart: hit %v, identical %v", i, r.Hit, bytes.Equal(r.Data, payloads[i]))
			}
		}
		// DELETE a block that is only cold (refilled into DRAM by the GET
		// above, so both copies go).
		st, err := cl.Delete(ctx, ns, keys[1:2])
		if err != nil || st[0] != client.StatusDeleted {
			t.Fatalf("DELETE: %v %v", st, err)
		}
		if r := cl.Get(ctx, ns, keys[1:2])[0]; r.Hit {
			t.Fatal("GET hit after DELETE")
		}
		if hits, _, _ := cl.Lookup(ctx, ns, keys[1:3], 0); hits != 0 {
			t.Fatalf("LOOKUP counts a deleted block: %d", hits)
		}
	})

	// Another restart: the deleted pointer is gone from the store.
	runIndexed(t, c, func(addr string) {
		cl, err := client.Dial(ctx, client.Config{Addr: addr, Conns: 1})
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		if r := cl.Get(ctx, ns, keys[1:2])[0]; r.Hit {
			t.Fatal("GET of a deleted block hit after a restart")
		}
		if hits, _, _ := cl.Lookup(ctx, ns, keys[2:last], 0); hits != last-2 {
			t.Fatalf("LOOKUP after the second restart: %d of %d", hits, last-2)
		}
	})
}
