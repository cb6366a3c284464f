package clienttest_test

import (
	"bytes"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/gpucache/gpucache/api/wire"
	. "github.com/gpucache/gpucache/client"
)

func dialTest(t *testing.T, addr string, mod func(*Config)) *Client {
	t.Helper()
	cfg := Config{Addr: addr, Tenant: "acme", Conns: 2}
	if mod != nil {
		mod(&cfg)
	}
	c, err := Dial(testCtx(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestRoundTrip(t *testing.T) {
	rs := startServer(t, "127.0.0.1:0", wire.Limits{})
	c := dialTest(t, rs.Addr, nil)
	ctx := testCtx(t)
	ns := testNS("acme")
	blocks := testBlocks(t, ns, 5, 40<<10, 1)
	keys := keysOf(blocks)

	if c.ServerName() != "test" || c.Limits().MaxPayload != 1<<20 {
		t.Fatalf("server %q limits %+v", c.ServerName(), c.Limits())
	}
	st, err := c.Put(ctx, ns, blocks[:3])
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range st {
		if s != StatusStored {
			t.Fatalf("put %d: %s", i, s)
		}
	}
	if st, err := c.Put(ctx, ns, blocks[:1]); err != nil || st[0] != StatusExists {
		t.Fatalf("second put: %v %v", st, err)
	}

	res := c.Get(ctx, ns, keys)
	for i, r := range res {
		if want := i < 3; r.Hit != want {
			t.Fatalf("get %d: hit %v reason %v", i, r.Hit, r.Reason)
		}
		if r.Hit && !bytes.Equal(r.Data, blocks[i].Data) {
			t.Fatalf("get %d: wrong bytes", i)
		}
		if !r.Hit && (!errors.Is(r.Reason, ErrNotCached) || r.Data != nil) {
			t.Fatalf("get %d: miss reason %v data %d", i, r.Reason, len(r.Data))
		}
	}

	// GetInto reads into our buffers, and a small buffer is a miss.
	dst := [][]byte{make([]byte, 64<<10), make([]byte, 10), make([]byte, 64<<10)}
	into := make([]GetResult, 3)
	if hits := c.GetInto(ctx, ns, keys[:3], dst, into); hits != 2 {
		t.Fatalf("GetInto hits %d: %+v", hits, into)
	}
	if !into[0].Hit || &into[0].Data[0] != &dst[0][0] || !bytes.Equal(into[0].Data, blocks[0].Data) {
		t.Fatal("GetInto did not fill the caller's buffer")
	}
	if into[1].Hit || !errors.Is(into[1].Reason, ErrShortBuffer) {
		t.Fatalf("short buffer: %+v", into[1])
	}

	// Lookup finds the leading run and leases it; a Get WithLease releases it.
	hits, lease, err := c.Lookup(ctx, ns, keys, 5*time.Second)
	if err != nil || hits != 3 || lease == 0 {
		t.Fatalf("lookup: hits %d lease %d err %v", hits, lease, err)
	}
	stats, err := c.Stat(ctx)
	if err != nil || stats["hot_leases_active"] != 1 {
		t.Fatalf("stat: %v leases %d", err, stats["hot_leases_active"])
	}
	for i, r := range c.Get(ctx, ns, keys[:hits], WithLease(lease)) {
		if !r.Hit || !bytes.Equal(r.Data, blocks[i].Data) {
			t.Fatalf("leased get %d: %+v", i, r.Reason)
		}
	}
	// (The server releases the lease after writing the answer; its own
	// tests check that.)

	// Another identity never sees the bytes.
	other := ns
	other.ModelID = "other"
	if r := c.Get(ctx, other, keys[:1])[0]; r.Hit || !errors.Is(r.Reason, ErrNotCached) {
		t.Fatalf("other identity: %+v", r)
	}

	// The leased GET's pins are released after its answer is written, so
	// a DELETE right behind it may find the blocks busy for a moment.
	var deleted [2]bool
	for range 1000 {
		ds, err := c.Delete(ctx, ns, keys[:2])
		if err != nil {
			t.Fatal(err)
		}
		for i, s := range ds {
			deleted[i] = deleted[i] || s == StatusDeleted
		}
		if ds[0] != StatusBusy && ds[1] != StatusBusy {
			break
		}
	}
	if !deleted[0] || !deleted[1] {
		t.Fatalf("delete: %v", deleted)
	}
	if r := c.Get(ctx, ns, keys[:1])[0]; r.Hit {
		t.Fatal("deleted block still served")
	}
	if rtt, err := c.Ping(ctx); err != nil || rtt <= 0 {
		t.Fatalf("ping: %v %v", rtt, err)
	}
}

func TestServerErrorsAreMisses(t *testing.T) {
	rs := startServer(t, "127.0.0.1:0", wire.Limits{})
	c := dialTest(t, rs.Addr, nil)
	ctx := testCtx(t)

	// The namespace's tenant is not the session's: TENANT_MISMATCH.
	ns := testNS("someone-else")
	blk := testBlocks(t, ns, 1, 10, 0)[0]
	key := blk.Key
	r := c.Get(ctx, ns, []BlockKey{key})[0]
	var we *wire.Error
	if r.Hit || !errors.Is(r.Reason, ErrServer) || !errors.As(r.Reason, &we) || we.Code != wire.CodeTenantMismatch {
		t.Fatalf("tenant mismatch: %+v", r)
	}
	if _, err := c.Put(ctx, ns, []PutBlock{{Key: key, TokenIDs: blk.TokenIDs, Data: []byte("x")}}); !errors.Is(err, ErrServer) {
		t.Fatalf("put with foreign tenant: %v", err)
	}
	// An invalid namespace never reaches the wire.
	if r := c.Get(ctx, Namespace{}, []BlockKey{key})[0]; !errors.Is(r.Reason, ErrInvalid) {
		t.Fatalf("invalid namespace: %+v", r)
	}
	// The connection is still good.
	if _, err := c.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	// A block larger than the server's MaxPayload is refused locally.
	st, err := c.Put(ctx, testNS("acme"), []PutBlock{{Key: key, TokenIDs: blk.TokenIDs, Data: make([]byte, 2<<20)}})
	if err != nil || st[0] != StatusTooLarge {
		t.Fatalf("too large: %v %v", st, err)
	}
	// A block without token ids has no identity: refused locally.
	st, err = c.Put(ctx, testNS("acme"), []PutBlock{{Key: key, Data: []byte("x")}})
	if err != nil || st[0] != StatusKeyMismatch {
		t.Fatalf("no token ids: %v %v", st, err)
	}
}

// Many goroutines share two connections: requests pipeline and every
// answer reaches its caller.
func TestPipelining(t *testing.T) {
	rs := startServer(t, "127.0.0.1:0", wire.Limits{MaxInFlight: 8})
	c := dialTest(t, rs.Addr, func(c *Config) { c.Conns = 2 })
	ctx := testCtx(t)
	ns := testNS("acme")
	const workers, rounds = 32, 10
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			blocks := testBlocks(t, ns, 2, 1000+w*97, byte(w))
			for round := range rounds {
				if _, err := c.Put(ctx, ns, blocks); err != nil {
					errs <- err
					return
				}
				res := c.Get(ctx, ns, keysOf(blocks))
				for i, r := range res {
					if !r.Hit || !bytes.Equal(r.Data, blocks[i].Data) {
						errs <- fmt.Errorf("worker %d round %d block %d: hit %v reason %v", w, round, i, r.Hit, r.Reason)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if l := c.Limits().MaxInFlight; l != 8 {
		t.Fatalf("in-flight limit %d, want the server's 8", l)
	}
}

// Batches over MaxBatch or MaxFrame are split into several requests.
func TestBatchSplit(t *testing.T) {
	limits := wire.Limits{MaxBatch: 8, MaxFrame: 1<<20 + 8192}
	rs := startServer(t, "127.0.0.1:0", limits)
	c := dialTest(t, rs.Addr, func(c *Config) { c.Conns = 1 })
	ctx := testCtx(t)
	ns := testNS("acme")
	blocks := testBlocks(t, ns, 30, 100<<10, 3) // 3 MiB: frames of ≤ 10 blocks, batches of ≤ 8
	before, err := c.Stat(ctx)
	if err != nil {
		t.Fatal(err)
	}
	st, err := c.Put(ctx, ns, blocks)
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range st {
		if s != StatusStored {
			t.Fatalf("block %d: %s", i, s)
		}
	}
	keys := keysOf(blocks)
	for i, r := range c.Get(ctx, ns, keys) {
		if !r.Hit || !bytes.Equal(r.Data, blocks[i].Data) {
			t.Fatalf("block %d: %+v", i, r.Reason)
		}
	}
	hits, lease, err := c.Lookup(ctx, ns, keys, time.Second)
	if err != nil || hits != 30 || lease == 0 {
		t.Fatalf("lookup: %d %d %v", hits, lease, err)
	}
	for i, r := range c.Get(ctx, ns, keys, WithLease(lease)) {
		if !r.Hit {
			t.Fatalf("leased block %d: %v", i, r.Reason)
		}
	}
	// A block may still be pinned for a moment by the leased GET's write.
	ds, err := c.Delete(ctx, ns, keys)
	if err != nil {
		t.Fatalf("delete: %v", err)
	}
	for i, s := range ds {
		if s != StatusDeleted && s != StatusBusy {
			t.Fatalf("delete %d: %s", i, s)
		}
	}
	after, err := c.Stat(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// 30 blocks of 100 KiB: at least ceil(3 MiB / 1 MiB) = 4 PUTs; GETs
	// and DELETEs split by 8: 4 each, plus 4 leased GETs and 4 LOOKUPs.
	for op, want := range map[string]uint64{"put": 4, "get": 8, "lookup": 4, "delete": 4} {
		name := "requests_" + op
		if got := after[name] - before[name]; got < want {
			t.Errorf("%s: %d requests, want at least %d", name, got, want)
		}
	}
}

func TestClosedClient(t *testing.T) {
	rs := startServer(t, "127.0.0.1:0", wire.Limits{})
	c := dialTest(t, rs.Addr, nil)
	c.Close()
	c.Close()
	ctx := testCtx(t)
	if _, err := c.Ping(ctx); !errors.Is(err, ErrClosed) {
		t.Fatalf("ping after close: %v", err)
	}
	if r := c.Get(ctx, testNS("acme"), make([]BlockKey, 1))[0]; !errors.Is(r.Reason, ErrClosed) {
		t.Fatalf("get after close: %+v", r)
	}
}

// Payloads travel without heap copies: PUT writes from the caller's slices
// and GetInto reads into the caller's buffers, so the heap allocated per
// call is small next to the 256 KiB moved.
func TestNoPayloadCopies(t *testing.T) {
	rs := startServer(t, "127.0.0.1:0", wire.Limits{})
	c := dialTest(t, rs.Addr, func(c *Config) { c.Conns = 1 })
	ctx := testCtx(t)
	ns := testNS("acme")
	blocks := testBlocks(t, ns, 1, 256<<10, 5)
	keys := keysOf(blocks)
	dst := [][]byte{make([]byte, 256<<10)}
	res := make([]GetResult, 1)
	if _, err := c.Put(ctx, ns, blocks); err != nil {
		t.Fatal(err)
	}
	const rounds = 20
	perCall := func(f func()) uint64 {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for range rounds {
			f()
		}
		runtime.ReadMemStats(&after)
		return (after.TotalAlloc - before.TotalAlloc) / rounds
	}
	if n := perCall(func() {
		if c.GetInto(ctx, ns, keys, dst, res) != 1 {
			t.Fatal("miss")
		}
	}); n > 32<<10 {
		t.Errorf("GetInto allocates %d bytes per call", n)
	}
	if !bytes.Equal(dst[0], blocks[0].Data) {
		t.Fatal("wrong bytes")
	}
	if n := perCall(func() {
		if _, err := c.Put(ctx, ns, blocks); err != nil {
			t.Fatal(err)
		}
	}); n > 32<<10 {
		t.Errorf("Put allocates %d bytes per call", n)
	}
}
