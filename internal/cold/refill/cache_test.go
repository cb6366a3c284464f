package refill

import (
	"bytes"
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/gpucache/gpucache/api/identity"
	"github.com/gpucache/gpucache/internal/cold/pack"
)

// TestCachesSaveRequestsAndFailSafe: with the manifest cache and a pointer
// TTL, a repeated refill makes one store request (the payload); a pointer
// past its TTL is read again; and when the cached manifest's pack is gone,
// the refill is a miss that drops the stale entries, after which a fresh
// lookup works again. Bytes always come from a verified range.
func TestCachesSaveRequestsAndFailSafe(t *testing.T) {
	e := newEnv(t, Config{ManifestCache: 16, PointerTTL: time.Minute})
	ctx := context.Background()
	ids := chain(t, testNamespace("acme"), 2, 7)
	p, payloads := buildPack(t, ids, 256)
	e.publish(p)
	dst := make([]byte, 256)

	e.reset()
	if _, res, err := e.r.RefillBlock(ctx, ids[1], dst); !res.Hit || err != nil {
		t.Fatalf("first refill: %v %v", res, err)
	}
	if got := e.calls(); got != 3 {
		t.Fatalf("first refill: %d store calls, want 3 (pointer, manifest, payload)", got)
	}
	e.reset()
	if _, res, _ := e.r.RefillBlock(ctx, ids[1], dst); !res.Hit || !bytes.Equal(dst, payloads[1]) {
		t.Fatalf("cached refill: %v", res)
	}
	if got := e.calls(); got != 1 {
		t.Fatalf("cached refill: %d store calls, want 1 (payload)", got)
	}

	// Past the pointer TTL the pointer is read again; the manifest is not.
	e.clock.Advance(2 * time.Minute)
	e.reset()
	if _, res, _ := e.r.RefillBlock(ctx, ids[1], dst); !res.Hit {
		t.Fatalf("after TTL: %v", res)
	}
	if got := e.calls(); got != 2 {
		t.Fatalf("after TTL: %d store calls, want 2 (pointer, payload)", got)
	}

	// The pack disappears (reclaimed): a miss, and the stale entries go.
	if err := e.mem.Delete(ctx, p.Object.Key); err != nil {
		t.Fatal(err)
	}
	if n, res, _ := e.r.RefillBlock(ctx, ids[1], dst); res.Hit || n != 0 {
		t.Fatalf("pack gone: %v", res)
	}
	e.publish(p) // published again
	e.reset()
	if _, res, _ := e.r.RefillBlock(ctx, ids[1], dst); !res.Hit || !bytes.Equal(dst, payloads[1]) {
		t.Fatalf("after republish: %v", res)
	}
	if got := e.calls(); got != 3 {
		t.Fatalf("after the stale entries were dropped: %d store calls, want 3", got)
	}
}

// TestManifestCacheBoundedByBytes: the manifest cache keeps at most
// ManifestCacheBytes of manifests (by MemCost) whatever its count bound
// allows, and a manifest evicted for room is read again on its next refill.
// Before the byte bound, a count of 4,096 manifests of large packs of small
// blocks held hundreds of MiB (found by the soak: the open node's heap grew
// with every pack it refilled from).
func TestManifestCacheBoundedByBytes(t *testing.T) {
	const packs, blocks = 24, 32
	ns := testNamespace("acme")
	var ids [][]identity.CacheIdentity
	var payloads [][][]byte
	var cost int64
	e := newEnv(t, Config{ManifestCache: 4096, PointerTTL: time.Minute})
	for i := range packs {
		c := chain(t, ns, blocks, uint32(1000+i))
		p, pl := buildPack(t, c, 64)
		e.publish(p)
		ids, payloads = append(ids, c), append(payloads, pl)
	}
	ctx := context.Background()
	dst := make([]byte, 64)
	refillAll := func(e *env) {
		t.Helper()
		for i := range packs {
			if _, res, err := e.r.RefillBlock(ctx, ids[i][blocks-1], dst); !res.Hit || err != nil || !bytes.Equal(dst, payloads[i][blocks-1]) {
				t.Fatalf("pack %d: %v %v", i, res, err)
			}
		}
	}
	refillAll(e)
	cost = e.r.cache.manifestBytes() / packs // every manifest cached: no byte bound
	if cost <= 0 {
		t.Fatalf("per-manifest cost %d", cost)
	}

	limit := 5 * cost
	b := newEnv(t, Config{ManifestCache: 4096, ManifestCacheBytes: limit, PointerTTL: time.Minute})
	for i := range packs {
		p, _ := buildPack(t, ids[i], 64)
		b.publish(p)
	}
	refillAll(b)
	if got := b.r.cache.manifestBytes(); got > limit || got < limit-cost {
		t.Fatalf("cached manifest bytes %d, want within (%d, %d]", got, limit-cost, limit)
	}
	if n := len(b.r.cache.manifests); n != 5 {
		t.Fatalf("%d manifests cached, want 5", n)
	}
	refillAll(b) // evicted manifests are read again: still hits
	if got := b.r.cache.manifestBytes(); got > limit {
		t.Fatalf("after a second round: %d > %d", got, limit)
	}
}

// manifestBytes returns the MemCost of the cached manifests (a test
// accessor: production code reads no cache size).
func (c *caches) manifestBytes() int64 {
	if c == nil {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.bytes
}

// pointerFor returns the i-th pointer with its key, as a lookup builds them:
// the key string, and a decoded pointer with its own manifest key string.
func pointerFor(i int) (string, pack.Pointer) {
	var ns identity.NamespaceDigest
	var k identity.BlockKey
	k[0], k[1], k[2] = byte(i), byte(i>>8), byte(i>>16)
	var m pack.Digest
	m[0], m[1], m[2] = byte(i), byte(i>>8), byte(i>>16)
	return pack.PointerKey(ns, k), pack.Pointer{Namespace: ns, Block: k, ManifestKey: pack.ManifestKey(ns, m), Manifest: m, ManifestSize: 4096}
}

// The pointer cache holds at most maxPointers entries, however many
// distinct blocks are refilled, and each costs at most PointerCacheEntryBytes
// of heap: maxPointers × PointerCacheEntryBytes is its term in the memory
// bound.
func TestPointerCacheBounded(t *testing.T) {
	c := newCaches(Config{PointerTTL: time.Hour, Now: newClock().Now})
	for i := range maxPointers + 100 {
		c.putPointer(pointerFor(i))
		if len(c.pointers) > maxPointers {
			t.Fatalf("after %d pointers the cache holds %d, bound %d", i+1, len(c.pointers), maxPointers)
		}
	}
	for _, n := range []int{1 << 14, 1<<14 + 1<<13, maxPointers} {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		c := newCaches(Config{PointerTTL: time.Hour, Now: newClock().Now})
		for i := range n {
			c.putPointer(pointerFor(i))
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		per := float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / float64(n)
		t.Logf("%d pointers: %.0f heap bytes each", n, per)
		if per > PointerCacheEntryBytes {
			t.Fatalf("%d pointers: %.0f heap bytes each, PointerCacheEntryBytes says %d", n, per, PointerCacheEntryBytes)
		}
		runtime.KeepAlive(c)
	}
}
