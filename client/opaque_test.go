package client

import (
	"bytes"
	"errors"
	"sync"
	"testing"

	"github.com/gpucache/gpucache/api/wire"
	"github.com/gpucache/gpucache/internal/server"
	"github.com/gpucache/gpucache/internal/servertest"
)

// TestPutOpaque: a block stored by name is read back by its OpaqueKey, a
// second store is StatusExists with the first bytes kept, another tenant's
// namespace misses it, and Delete removes it.
func TestPutOpaque(t *testing.T) {
	rs := startServer(t, "127.0.0.1:0", wire.Limits{})
	c := dialTest(t, rs.Addr, nil)
	ctx := testCtx(t)
	ns := testNS("acme")
	name := []byte("llama@00000000@0@ab12cd")
	d, err := ns.Digest()
	if err != nil {
		t.Fatal(err)
	}
	key := OpaqueKey(d, name)
	one, two := bytes.Repeat([]byte{1}, 5000), bytes.Repeat([]byte{2}, 5000)
	if st, err := c.PutOpaque(ctx, ns, name, one); err != nil || st != StatusStored {
		t.Fatalf("first store: %v %v", st, err)
	}
	if st, err := c.PutOpaque(ctx, ns, name, two); err != nil || st != StatusExists {
		t.Fatalf("second store: %v %v", st, err)
	}
	if r := c.Get(ctx, ns, []BlockKey{key})[0]; !r.Hit || !bytes.Equal(r.Data, one) {
		t.Fatalf("get: hit %v reason %v", r.Hit, r.Reason)
	}
	other := dialTest(t, rs.Addr, func(c *Config) { c.Tenant = "beta" })
	od, _ := testNS("beta").Digest()
	if r := other.Get(ctx, testNS("beta"), []BlockKey{OpaqueKey(od, name)})[0]; r.Hit {
		t.Fatal("tenant beta reads acme's opaque block")
	}
	if st, err := c.Delete(ctx, ns, []BlockKey{key}); err != nil || st[0] != StatusDeleted {
		t.Fatalf("delete: %v %v", st, err)
	}
	for _, bad := range [][]byte{nil, make([]byte, wire.MaxOpaqueName+1)} {
		if _, err := c.PutOpaque(ctx, ns, bad, one); !errors.Is(err, ErrInvalid) {
			t.Fatalf("name of %d bytes: %v", len(bad), err)
		}
	}
}

// TestPutOpaqueOldServer: against a server pinned to version 2 PutOpaque
// is ErrUnsupported and sends nothing.
func TestPutOpaqueOldServer(t *testing.T) {
	rs := servertest.StartWith(t, "127.0.0.1:0", wire.Limits{}, func(c *server.Config) { c.MaxVersion = wire.Version2 })
	c := dialTest(t, rs.Addr, nil)
	if st, err := c.PutOpaque(testCtx(t), testNS("acme"), []byte("k"), []byte("v")); !errors.Is(err, ErrUnsupported) || st != StatusMiss {
		t.Fatalf("PutOpaque on a version-2 server: %v %v", st, err)
	}
}

// TestGetWithAlloc: WithAlloc hands each hit's length to the allocator;
// a refused buffer is a miss with ErrShortBuffer, and the connection stays
// in sync for the next block and the next call.
func TestGetWithAlloc(t *testing.T) {
	rs := startServer(t, "127.0.0.1:0", wire.Limits{})
	c := dialTest(t, rs.Addr, func(c *Config) { c.Conns = 1 })
	ctx := testCtx(t)
	ns := testNS("acme")
	blocks := testBlocks(t, ns, 3, 3000, 7)
	if _, err := c.Put(ctx, ns, blocks); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var asked []int
	calls := 0
	alloc := func(n int) []byte {
		mu.Lock()
		defer mu.Unlock()
		asked = append(asked, n)
		calls++
		if calls == 2 {
			return nil // refuse the second block
		}
		return make([]byte, n)
	}
	res := c.Get(ctx, ns, keysOf(blocks), WithAlloc(alloc))
	if !res[0].Hit || !bytes.Equal(res[0].Data, blocks[0].Data) || res[1].Hit || !errors.Is(res[1].Reason, ErrShortBuffer) ||
		!res[2].Hit || !bytes.Equal(res[2].Data, blocks[2].Data) {
		t.Fatalf("results: %v %v / %v %v / %v %v", res[0].Hit, res[0].Reason, res[1].Hit, res[1].Reason, res[2].Hit, res[2].Reason)
	}
	if len(asked) != 3 || asked[0] != 3000 {
		t.Fatalf("allocator asked %v", asked)
	}
	if r := c.Get(ctx, ns, keysOf(blocks[1:2]))[0]; !r.Hit || !bytes.Equal(r.Data, blocks[1].Data) {
		t.Fatalf("next call: %v", r.Reason)
	}
}
