package clienttest_test

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpucache/gpucache/api/wire"
	. "github.com/gpucache/gpucache/client"
)

// cacheImpl starts servers for one test and returns a Cache over them.
type cacheImpl struct {
	name string
	open func(t *testing.T) Cache
}

// cacheImpls are the implementations of Cache the shared suite runs on: a
// Client of one node and a Cluster over a static view of three nodes. Each
// has one connection per node, so that an answer on it also tells that the
// node finished writing (and releasing the pins of) every earlier answer.
var cacheImpls = []cacheImpl{
	{"Client", func(t *testing.T) Cache {
		s := startServer(t, "127.0.0.1:0", wire.Limits{})
		c, err := Dial(testCtx(t), Config{Addr: s.Addr, Tenant: "acme", Conns: 1})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}},
	{"Cluster", func(t *testing.T) Cache {
		tc := startCluster(t, 3)
		return dialCluster(t, []string{tc.nodes[0].addr}, func(cfg *ClusterConfig) { cfg.Node.Conns = 1 })
	}},
}

// TestCache runs the behaviour every Cache shares on every implementation.
func TestCache(t *testing.T) {
	tests := []struct {
		name string
		run  func(t *testing.T, c Cache)
	}{
		{"PutGet", testCachePutGet},
		{"Miss", testCacheMiss},
		{"Delete", testCacheDelete},
		{"Lookup", testCacheLookup},
		{"Lease", testCacheLease},
		{"GetOrFill", testCacheGetOrFill},
		{"IdentityIsolation", testCacheIdentityIsolation},
		{"PutOpaque", testCachePutOpaque},
		{"Closed", testCacheClosed},
	}
	for _, impl := range cacheImpls {
		t.Run(impl.name, func(t *testing.T) {
			for _, tt := range tests {
				t.Run(tt.name, func(t *testing.T) { tt.run(t, impl.open(t)) })
			}
		})
	}
}

// suiteBlocks is a chain long enough (24 blocks) to span every node of
// the cluster.
const suiteBlocks = 24

func putAll(t *testing.T, c Cache, ns Namespace, blocks []PutBlock) {
	t.Helper()
	st, err := c.Put(testCtx(t), ns, blocks)
	if err != nil {
		t.Fatalf("put: %v", err)
	}
	for i, s := range st {
		if s != StatusStored {
			t.Fatalf("put block %d: %s", i, s)
		}
	}
}

// wantHits checks that res holds exactly blocks' payloads.
func wantHits(t *testing.T, res []GetResult, blocks []PutBlock) {
	t.Helper()
	if len(res) != len(blocks) {
		t.Fatalf("%d results for %d keys", len(res), len(blocks))
	}
	for i, r := range res {
		if !r.Hit || r.Reason != nil || !bytes.Equal(r.Data, blocks[i].Data) {
			t.Fatalf("block %d: hit %v reason %v, %d bytes", i, r.Hit, r.Reason, len(r.Data))
		}
	}
}

func wantMisses(t *testing.T, res []GetResult) {
	t.Helper()
	for i, r := range res {
		if r.Hit || r.Data != nil || !errors.Is(r.Reason, ErrNotCached) {
			t.Fatalf("block %d: hit %v reason %v, %d bytes; want a plain miss", i, r.Hit, r.Reason, len(r.Data))
		}
	}
}

func testCachePutGet(t *testing.T, c Cache) {
	ctx, ns := testCtx(t), testNS("acme")
	blocks := testBlocks(t, ns, suiteBlocks, 3000, 1)
	putAll(t, c, ns, blocks)
	wantHits(t, c.Get(ctx, ns, keysOf(blocks)), blocks)

	// Chunks are immutable: the same keys again are StatusExists.
	st, err := c.Put(ctx, ns, blocks)
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range st {
		if s != StatusExists {
			t.Fatalf("second put of block %d: %s", i, s)
		}
	}
	// A block whose key does not derive from its identity is refused.
	bad := slices.Clone(blocks[:1])
	bad[0].Key[0] ^= 1
	if st, err := c.Put(ctx, ns, bad); err != nil || st[0] != StatusKeyMismatch {
		t.Fatalf("mismatched key: %v %v", st, err)
	}
	// WithAlloc: every hit's payload comes from the caller's allocator.
	var allocs atomic.Int32
	res := c.Get(ctx, ns, keysOf(blocks), WithAlloc(func(n int) []byte {
		allocs.Add(1)
		return make([]byte, n)
	}))
	wantHits(t, res, blocks)
	if allocs.Load() != suiteBlocks {
		t.Fatalf("WithAlloc called %d times for %d hits", allocs.Load(), suiteBlocks)
	}
}

func testCacheMiss(t *testing.T, c Cache) {
	ctx, ns := testCtx(t), testNS("acme")
	blocks := testBlocks(t, ns, suiteBlocks, 1000, 2)
	wantMisses(t, c.Get(ctx, ns, keysOf(blocks)))
	if res := c.Get(ctx, ns, nil); len(res) != 0 {
		t.Fatalf("Get of no keys: %d results", len(res))
	}
	// Half stored: the others still miss, in place.
	putAll(t, c, ns, blocks[:suiteBlocks/2])
	res := c.Get(ctx, ns, keysOf(blocks))
	wantHits(t, res[:suiteBlocks/2], blocks[:suiteBlocks/2])
	wantMisses(t, res[suiteBlocks/2:])
}

func testCacheDelete(t *testing.T, c Cache) {
	ctx, ns := testCtx(t), testNS("acme")
	blocks := testBlocks(t, ns, suiteBlocks, 1000, 3)
	putAll(t, c, ns, blocks[:suiteBlocks-1])
	st, err := c.Delete(ctx, ns, keysOf(blocks))
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range st {
		want := StatusDeleted
		if i == suiteBlocks-1 {
			want = StatusMiss // never stored
		}
		if s != want {
			t.Fatalf("delete block %d: %s, want %s", i, s, want)
		}
	}
	wantMisses(t, c.Get(ctx, ns, keysOf(blocks)))
}

func testCacheLookup(t *testing.T, c Cache) {
	ctx, ns := testCtx(t), testNS("acme")
	blocks := testBlocks(t, ns, suiteBlocks, 1000, 4)
	keys := keysOf(blocks)
	if hits, lease, err := c.Lookup(ctx, ns, keys, 0); err != nil || hits != 0 || lease != 0 {
		t.Fatalf("lookup of nothing cached: %d %d %v", hits, lease, err)
	}
	putAll(t, c, ns, blocks)
	if hits, lease, err := c.Lookup(ctx, ns, keys, 0); err != nil || hits != suiteBlocks || lease != 0 {
		t.Fatalf("lookup: %d lease %d %v, want %d and no lease", hits, lease, err, suiteBlocks)
	}
	// A hole ends the run, wherever its owner is.
	for _, hole := range []int{0, 7, suiteBlocks - 1} {
		if _, err := c.Delete(ctx, ns, keys[hole:hole+1]); err != nil {
			t.Fatal(err)
		}
		if hits, _, err := c.Lookup(ctx, ns, keys, 0); err != nil || hits != hole {
			t.Fatalf("lookup with block %d deleted: %d %v", hole, hits, err)
		}
		putAll(t, c, ns, blocks[hole:hole+1])
	}
	if hits, _, err := c.Lookup(ctx, ns, nil, time.Second); err != nil || hits != 0 {
		t.Fatalf("lookup of no keys: %d %v", hits, err)
	}
}

// testCacheLease: Lookup pins the run and returns a lease; a Get with
// WithLease reads under it and releases it, on every node that pinned a
// part of the run, so that the blocks can then be deleted.
func testCacheLease(t *testing.T, c Cache) {
	ctx, ns := testCtx(t), testNS("acme")
	blocks := testBlocks(t, ns, suiteBlocks, 1000, 5)
	keys := keysOf(blocks)
	putAll(t, c, ns, blocks)
	hits, lease, err := c.Lookup(ctx, ns, keys, time.Minute)
	if err != nil || hits != suiteBlocks || lease == 0 {
		t.Fatalf("lookup: %d lease %d %v", hits, lease, err)
	}
	// Pinned: a delete is refused while the lease holds.
	if st, err := c.Delete(ctx, ns, keys); err != nil || slices.ContainsFunc(st, func(s Status) bool { return s != StatusBusy }) {
		t.Fatalf("delete under a lease: %v %v, want every block busy", st, err)
	}
	wantHits(t, c.Get(ctx, ns, keys[:hits], WithLease(lease)), blocks)
	// A Lookup on the same (single) connection is answered after the
	// leased GET's answer was written and its lease released.
	if hits, _, err := c.Lookup(ctx, ns, keys, 0); err != nil || hits != suiteBlocks {
		t.Fatalf("lookup after the leased get: %d %v", hits, err)
	}
	st, err := c.Delete(ctx, ns, keys)
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range st {
		if s != StatusDeleted {
			t.Fatalf("block %d: %s after the lease was spent, want deleted", i, s)
		}
	}
	// A lease is spent once; an unknown one reads as a plain Get.
	putAll(t, c, ns, blocks)
	wantHits(t, c.Get(ctx, ns, keys, WithLease(lease)), blocks)
	wantHits(t, c.Get(ctx, ns, keys, WithLease(lease+1000)), blocks)
}

func testCacheGetOrFill(t *testing.T, c Cache) {
	ctx, ns := testCtx(t), testNS("acme")
	tokens := make([]uint32, 4*suiteBlocks)
	for i := range tokens {
		tokens[i] = uint32(i) + 6<<24
	}
	payload := func(i int) []byte { return bytes.Repeat([]byte{byte(i), 0xfe}, 700) }
	var filled atomic.Int32
	fill := func(_ context.Context, idx []int) ([][]byte, error) {
		filled.Add(int32(len(idx)))
		out := make([][]byte, len(idx))
		for k, i := range idx {
			out[k] = payload(i)
		}
		return out, nil
	}
	check := func(out [][]byte) {
		t.Helper()
		if len(out) != suiteBlocks {
			t.Fatalf("%d blocks, want %d", len(out), suiteBlocks)
		}
		for i := range out {
			if !bytes.Equal(out[i], payload(i)) {
				t.Fatalf("block %d: wrong bytes", i)
			}
		}
	}
	out, rep, err := c.GetOrFill(ctx, ns, tokens, fill)
	if err != nil {
		t.Fatal(err)
	}
	check(out)
	if rep.Led != suiteBlocks || rep.Hits != 0 || filled.Load() != suiteBlocks {
		t.Fatalf("first fill: %+v, %d computed", rep, filled.Load())
	}
	out, rep, err = c.GetOrFill(ctx, ns, tokens, fill)
	if err != nil {
		t.Fatal(err)
	}
	check(out)
	if rep.Hits != suiteBlocks || rep.Led != 0 || filled.Load() != suiteBlocks {
		t.Fatalf("second fill: %+v, %d computed", rep, filled.Load())
	}
	// The filled blocks are the chain's blocks: a plain Get finds them.
	keys, err := Chain(ns, tokens)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range c.Get(ctx, ns, keys) {
		if !r.Hit || !bytes.Equal(r.Data, payload(i)) {
			t.Fatalf("get of filled block %d: %v", i, r.Reason)
		}
	}
	// A fill error is GetOrFill's error.
	boom := errors.New("boom")
	tokens[0]++
	if _, _, err := c.GetOrFill(ctx, ns, tokens, func(context.Context, []int) ([][]byte, error) { return nil, boom }); !errors.Is(err, boom) {
		t.Fatalf("failing fill: %v", err)
	}
}

// testCacheIdentityIsolation: a block is served only under the identity it
// was stored with; another model's namespace never sees its bytes, even
// under the same key.
func testCacheIdentityIsolation(t *testing.T, c Cache) {
	ctx, ns := testCtx(t), testNS("acme")
	blocks := testBlocks(t, ns, suiteBlocks, 1000, 7)
	keys := keysOf(blocks)
	putAll(t, c, ns, blocks)
	other := ns
	other.ModelID = "other"
	wantMisses(t, c.Get(ctx, other, keys))
	if hits, _, err := c.Lookup(ctx, other, keys, 0); err != nil || hits != 0 {
		t.Fatalf("lookup under another identity: %d %v", hits, err)
	}
	if st, err := c.Delete(ctx, other, keys); err != nil || slices.ContainsFunc(st, func(s Status) bool { return s != StatusMiss }) {
		t.Fatalf("delete under another identity: %v %v", st, err)
	}
	wantHits(t, c.Get(ctx, ns, keys), blocks)
	// An invalid namespace is refused up front.
	bad := ns
	bad.ModelID = ""
	if _, err := c.Put(ctx, bad, blocks); !errors.Is(err, ErrInvalid) {
		t.Fatalf("put with an invalid namespace: %v", err)
	}
	if r := c.Get(ctx, bad, keys[:1])[0]; r.Hit || !errors.Is(r.Reason, ErrInvalid) {
		t.Fatalf("get with an invalid namespace: %+v", r)
	}
}

func testCachePutOpaque(t *testing.T, c Cache) {
	ctx, ns := testCtx(t), testNS("acme")
	d, err := ns.Digest()
	if err != nil {
		t.Fatal(err)
	}
	for i := range 6 {
		name := []byte{'k', byte('0' + i)}
		if st, err := c.PutOpaque(ctx, ns, name, pattern(500, byte(i))); err != nil || st != StatusStored {
			t.Fatalf("put opaque %q: %s %v", name, st, err)
		}
		r := c.Get(ctx, ns, []BlockKey{OpaqueKey(d, name)})[0]
		if !r.Hit || !bytes.Equal(r.Data, pattern(500, byte(i))) {
			t.Fatalf("get opaque %q: %v", name, r.Reason)
		}
	}
	if _, err := c.PutOpaque(ctx, ns, nil, []byte("x")); !errors.Is(err, ErrInvalid) {
		t.Fatalf("empty opaque name: %v", err)
	}
}

func testCacheClosed(t *testing.T, c Cache) {
	ctx, ns := testCtx(t), testNS("acme")
	blocks := testBlocks(t, ns, 2, 100, 8)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
	if _, err := c.Put(ctx, ns, blocks); !errors.Is(err, ErrClosed) {
		t.Fatalf("put after close: %v", err)
	}
	if r := c.Get(ctx, ns, keysOf(blocks))[0]; r.Hit || !errors.Is(r.Reason, ErrClosed) {
		t.Fatalf("get after close: %+v", r)
	}
	if _, _, err := c.Lookup(ctx, ns, keysOf(blocks), 0); !errors.Is(err, ErrClosed) {
		t.Fatalf("lookup after close: %v", err)
	}
}
