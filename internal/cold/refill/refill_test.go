package refill

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/gpucache/gpucache/api/identity"
	"github.com/gpucache/gpucache/internal/cold"
	"github.com/gpucache/gpucache/internal/cold/pack"
)

func TestRefillRoundTrip(t *testing.T) {
	e := newEnv(t, Config{})
	ctx := context.Background()
	ids := chain(t, testNamespace("acme"), 4, 100)
	p, payloads := buildPack(t, ids, 1000)
	e.publish(p)

	for i, id := range ids {
		dst := filled(1500)
		n, res, err := e.r.RefillBlock(ctx, id, dst)
		if err != nil || !res.Hit || n != 1000 || !bytes.Equal(dst[:n], payloads[i]) || !allAA(dst[n:]) {
			t.Fatalf("block %d: n=%d %v %v", i, n, res, err)
		}
	}
	// Pointer, manifest, payload: one ranged read each, nothing else.
	if got := e.calls(); got != 3*len(ids) || e.count(cold.OpRangeGet, "") != got {
		t.Fatalf("%d store calls for %d blocks", got, len(ids))
	}

	// A chain reads the shared manifest once.
	e.reset()
	dsts := [][]byte{filled(1000), filled(1000), filled(1000), filled(1000)}
	ns, res, err := e.r.RefillMatching(ctx, ids, dsts)
	if err != nil || !res.Hit || len(ns) != 4 {
		t.Fatalf("chain: %v %v %v", ns, res, err)
	}
	for i := range ids {
		if ns[i] != 1000 || !bytes.Equal(dsts[i], payloads[i]) {
			t.Fatalf("chain block %d differs", i)
		}
	}
	if got := e.count(cold.OpRangeGet, "manifests/"); got != 1 {
		t.Fatalf("chain read the manifest %d times", got)
	}

	dst := filled(1000)
	if n, res, err := e.r.RefillDegraded(ctx, ids[2], dst); !res.Hit || n != 1000 || err != nil || !bytes.Equal(dst, payloads[2]) {
		t.Fatalf("degraded: %d %v %v", n, res, err)
	}
	dst = filled(1000)
	if n, res, err := e.r.RefillForTenant(ctx, "acme", ids[3], dst); !res.Hit || n != 1000 || err != nil || !bytes.Equal(dst, payloads[3]) {
		t.Fatalf("for tenant: %d %v %v", n, res, err)
	}
	if e.writes() != 0 {
		t.Fatal("a refill wrote to the store")
	}
}

func TestRefillNotFoundAndShortBuffer(t *testing.T) {
	e := newEnv(t, Config{})
	ctx := context.Background()
	ids := chain(t, testNamespace("acme"), 3, 100)
	p, _ := buildPack(t, ids[:2], 64)
	e.publish(p)

	dst := filled(64)
	n, res, err := e.r.RefillBlock(ctx, ids[2], dst)
	expectMiss(t, n, res, NotFound, dst)
	if err != nil || e.payloadReads() != 0 {
		t.Fatalf("not found: %v, %d payload reads", err, e.payloadReads())
	}

	// A chain returns its leading run.
	dsts := [][]byte{filled(64), filled(64), filled(64)}
	ns, res, _ := e.r.RefillMatching(ctx, ids, dsts)
	if len(ns) != 2 || res.Reason != NotFound || !allAA(dsts[2]) {
		t.Fatalf("chain: %v %v", ns, res)
	}

	e.reset()
	dst = filled(63)
	n, res, err = e.r.RefillBlock(ctx, ids[0], dst)
	expectMiss(t, n, res, ShortBuffer, dst)
	if !errors.Is(err, ErrShortBuffer) || e.payloadReads() != 0 || !allAA(dst) {
		t.Fatalf("short buffer: %v, %d payload reads", err, e.payloadReads())
	}

	// The pack reclaimed under a live pointer: a clean miss.
	if err := e.mem.Delete(ctx, p.Object.Key); err != nil {
		t.Fatal(err)
	}
	dst = filled(64)
	n, res, _ = e.r.RefillBlock(ctx, ids[0], dst)
	expectMiss(t, n, res, NotFound, dst)
}

func TestConfig(t *testing.T) {
	d := Default()
	if err := d.Validate(); err != nil {
		t.Fatal(err)
	}
	r, err := New(cold.NewMem(), Config{Budget: 1000})
	if err != nil {
		t.Fatal(err)
	}
	got := r.Config()
	if got.Budget != 1000 || got.DegradedBudget != 250 || got.ManifestMax != d.ManifestMax || got.Timeout != d.Timeout ||
		got.BreakerFailures != d.BreakerFailures || got.BreakerCooldown != d.BreakerCooldown || got.Now == nil {
		t.Fatalf("defaults not filled: %+v", got)
	}
	if d.DegradedBudget != d.Budget/4 {
		t.Fatal("Default's degraded budget is not Budget/4")
	}
	for _, c := range []Config{
		{Budget: -1}, {DegradedBudget: -1}, {ManifestMax: -1}, {ManifestMax: pack.MaxManifestLen + 1},
		{Timeout: -time.Second}, {BreakerFailures: -1}, {BreakerCooldown: -1},
	} {
		if _, err := New(cold.NewMem(), c); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%+v: %v", c, err)
		}
	}
	if _, err := New(nil, Config{}); !errors.Is(err, ErrInvalidConfig) {
		t.Error("nil store accepted")
	}
	for r := None; r <= ShortBuffer; r++ {
		if r.String() == "" || Reason(200).String() != "reason(200)" {
			t.Fatal("reason names")
		}
	}
	if Hit.String() != "hit" || Missing(Legacy).String() != "missing(legacy)" {
		t.Fatal("result names")
	}
}

// The content-addressed layout lets a delayed older retry of the same
// blocks land after a later pack without either reader seeing mixed bytes.
func TestInterleavedRetryRefillsConsistentBytes(t *testing.T) {
	e := newEnv(t, Config{})
	ctx := context.Background()
	ids := chain(t, testNamespace("acme"), 2, 1)
	older, oldPayloads := buildPack(t, ids, 256)
	blocks := []pack.Block{{Identity: ids[0], Payload: bytes.Repeat([]byte{7}, 256)}, {Identity: ids[1], Payload: bytes.Repeat([]byte{9}, 256)}}
	later, err := pack.Build(ids[0].Namespace, blocks)
	if err != nil {
		t.Fatal(err)
	}
	e.publish(later)
	e.publish(older) // the delayed retry: pointers now name the older manifest
	for _, o := range []pack.Object{later.Object, later.Manifest} {
		if !bytes.Equal(e.get(o.Key), o.Body) {
			t.Fatalf("the retry overwrote %s", o.Key)
		}
	}
	for i, id := range ids {
		dst := filled(256)
		n, res, err := e.r.RefillBlock(ctx, id, dst)
		if !res.Hit || err != nil || n != 256 || !bytes.Equal(dst, oldPayloads[i]) {
			t.Fatalf("block %d: %v %v", i, res, err)
		}
	}
}

// Concurrent refills of hits and misses share one Refiller (run with -race).
func TestConcurrentRefills(t *testing.T) {
	e := newEnv(t, Config{})
	ids := chain(t, testNamespace("acme"), 8, 100)
	p, payloads := buildPack(t, ids[:6], 300)
	e.publish(p)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Go(func() {
			dst := make([]byte, 300)
			for i := range 50 {
				k := (g + i) % len(ids)
				n, res, err := e.r.RefillBlock(context.Background(), ids[k], dst)
				switch {
				case k < 6 && (!res.Hit || n != 300 || !bytes.Equal(dst, payloads[k])):
					errs <- fmt.Errorf("block %d: %v %v", k, res, err)
					return
				case k >= 6 && res.Reason != NotFound:
					errs <- fmt.Errorf("block %d: %v %v", k, res, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestRefillOpaqueKey: an opaque-key block (RESP, ADR 0016) refills by
// namespace and key like a token-chain block; another namespace misses.
func TestRefillOpaqueKey(t *testing.T) {
	e := newEnv(t, Config{})
	ctx := context.Background()
	ns := testNamespace("acme")
	id := identity.CacheIdentity{Namespace: ns, Opaque: []byte("model@00000000@0@abc")}
	want := bytes.Repeat([]byte{0x5a}, 4096)
	p, err := pack.Build(ns, []pack.Block{{Identity: id, Payload: want}})
	if err != nil {
		t.Fatal(err)
	}
	e.publish(p)
	k, _ := id.Key()
	dst := filled(5000)
	n, res, err := e.r.RefillKey(ctx, ns, k, dst)
	if err != nil || !res.Hit || !bytes.Equal(dst[:n], want) {
		t.Fatalf("refill: n=%d %v %v", n, res, err)
	}
	other := testNamespace("globex")
	if n, res, _ := e.r.RefillKey(ctx, other, k, filled(5000)); res.Hit || n != 0 {
		t.Fatal("another tenant's namespace hit the block")
	}
}
