package daemon

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/gpucache/gpucache/client"
	"github.com/gpucache/gpucache/internal/config"
)

// TestDefaultNodeStores64MiBBlocks (ADR 0015): a node with the embedded
// default settings (only its ports and cold_dir changed) stores a 64 MiB
// block over the native protocol, one PUT frame and one GET frame, and
// after a restart serves it again from the fs cold tier (the shutdown
// spill wrote it), byte-identical.
func TestDefaultNodeStores64MiBBlocks(t *testing.T) {
	c := config.Default()
	c.Listen, c.AdminListen = "127.0.0.1:0", "127.0.0.1:0"
	c.ColdDir = t.TempDir()
	c.ColdFlushInterval = time.Hour // written by the shutdown spill
	ns, _, ids, keys, _ := coldBlocks(t)
	const size = 64 << 20
	payload := coldPayload(keys[0], size)
	get := func(addr string) client.GetResult {
		cl, err := client.Dial(context.Background(), client.Config{Addr: addr, Conns: 1})
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		if lim := cl.Limits(); lim.MaxPayload < size {
			t.Fatalf("the default node announces MaxPayload %d, below 64 MiB", lim.MaxPayload)
		}
		return cl.Get(context.Background(), ns, keys[:1])[0]
	}
	runNode(t, c, Options{}, func(addr string) {
		cl := writeBlocksOf(t, addr, ns, ids[:1], [][]byte{payload})
		cl.Close()
		if r := get(addr); !r.Hit || !bytes.Equal(r.Data, payload) {
			t.Fatalf("64 MiB block from DRAM: hit %v, %d bytes", r.Hit, len(r.Data))
		}
	})
	runNode(t, c, Options{}, func(addr string) {
		if r := get(addr); !r.Hit || !bytes.Equal(r.Data, payload) {
			t.Fatalf("64 MiB block from the cold tier after a restart: hit %v, %d bytes", r.Hit, len(r.Data))
		}
	})
}

// writeBlocksOf PUTs the blocks in one request and checks each was stored.
func writeBlocksOf(t *testing.T, addr string, ns client.Namespace, ids []client.CacheIdentity, payloads [][]byte) *client.Client {
	t.Helper()
	cl, err := client.Dial(context.Background(), client.Config{Addr: addr})
	if err != nil {
		t.Fatal(err)
	}
	st, err := cl.Put(context.Background(), ns, client.BlocksOf(ids, payloads))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range st {
		if s != client.StatusStored {
			t.Fatalf("put: %s", s)
		}
	}
	return cl
}
