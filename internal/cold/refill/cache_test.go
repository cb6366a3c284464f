package refill

import (
	"bytes"
	"context"
	"testing"
	"time"
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
