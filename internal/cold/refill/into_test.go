package refill

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/gpucache/gpucache/api/identity"
)

// TestRefillKeyIntoAllocatesAfterTheChecks: RefillKeyInto hands the payload's
// length to alloc once every check that needs no payload byte has passed,
// reads the payload into what alloc returned, and never calls alloc for a
// block that misses before the payload (another namespace, absent). A
// refused alloc is Missing(NoDestination) with no payload read; a payload
// that fails its checksum leaves the allocated buffer zeroed.
func TestRefillKeyIntoAllocatesAfterTheChecks(t *testing.T) {
	e := newEnv(t, Config{})
	ctx := context.Background()
	ns := testNamespace("acme")
	ids := chain(t, ns, 2, 300)
	p, payloads := buildPack(t, ids, 3000)
	e.publish(p)
	k0, _ := ids[0].Key()

	var asked []int
	buf := filled(4096)
	alloc := func(n int) ([]byte, bool) { asked = append(asked, n); return buf, true }
	n, res, err := e.r.RefillKeyInto(ctx, ns, k0, alloc)
	if !res.Hit || err != nil || n != 3000 || !bytes.Equal(buf[:n], payloads[0]) || !allAA(buf[n:]) {
		t.Fatalf("hit: n=%d %v %v", n, res, err)
	}
	if len(asked) != 1 || asked[0] != 3000 {
		t.Fatalf("alloc asked for %v, want [3000]", asked)
	}

	// Misses before the payload never allocate.
	asked = nil
	if _, res, _ := e.r.RefillKeyInto(ctx, testNamespace("other"), k0, alloc); res.Hit || len(asked) != 0 {
		t.Fatalf("another tenant: %v, alloc asked %v", res, asked)
	}
	var absent identity.BlockKey
	absent[0] = 1
	if _, res, _ := e.r.RefillKeyInto(ctx, ns, absent, alloc); res.Reason != NotFound || len(asked) != 0 {
		t.Fatalf("absent block: %v, alloc asked %v", res, asked)
	}

	// A refused alloc: a clean miss, no payload read.
	e.reset()
	n, res, err = e.r.RefillKeyInto(ctx, ns, k0, func(int) ([]byte, bool) { return nil, false })
	if res.Reason != NoDestination || n != 0 || err != nil || e.payloadReads() != 0 {
		t.Fatalf("refused alloc: n=%d %v %v, %d payload reads", n, res, err, e.payloadReads())
	}
	// An alloc shorter than the payload: ShortBuffer, nothing read.
	short := filled(100)
	n, res, _ = e.r.RefillKeyInto(ctx, ns, k0, func(int) ([]byte, bool) { return short, true })
	expectMiss(t, n, res, ShortBuffer, short)
	if e.payloadReads() != 0 {
		t.Fatal("a short destination was read into")
	}
	// A nil alloc is an invalid request.
	if _, res, err := e.r.RefillKeyInto(ctx, ns, k0, nil); res.Reason != InvalidRequest || !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("nil alloc: %v %v", res, err)
	}

	// A corrupt payload: alloc was called, and its buffer is zeroed.
	body := e.get(p.Object.Key)
	body[len(body)-1] ^= 0xff
	e.put(p.Object.Key, body)
	k1, _ := ids[1].Key()
	buf = filled(3000)
	n, res, _ = e.r.RefillKeyInto(ctx, ns, k1, alloc)
	if res.Reason != Corrupt || n != 0 || !allZero(buf) {
		t.Fatalf("corrupt payload: n=%d %v, buffer zeroed %v", n, res, allZero(buf))
	}
}
