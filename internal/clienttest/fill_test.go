package clienttest_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpucache/gpucache/api/wire"
	. "github.com/gpucache/gpucache/client"
	"github.com/gpucache/gpucache/internal/server"
	"github.com/gpucache/gpucache/internal/server/servertest"
)

// blockPayload is the deterministic KV payload of a block: what any engine
// would compute for it.
func blockPayload(k BlockKey, size int) []byte {
	b := make([]byte, size)
	seed := sha256.Sum256(k[:])
	for off := 0; off < size; off += len(seed) {
		copy(b[off:], seed[:])
		seed = sha256.Sum256(seed[:])
	}
	return b
}

// countingFill computes payloads and counts how often each block is
// computed, across every caller that shares it.
type countingFill struct {
	keys  []BlockKey
	size  int
	calls []atomic.Int32
}

func newCountingFill(keys []BlockKey, size int) *countingFill {
	return &countingFill{keys: keys, size: size, calls: make([]atomic.Int32, len(keys))}
}

func (cf *countingFill) fill(_ context.Context, idx []int) ([][]byte, error) {
	out := make([][]byte, len(idx))
	for k, i := range idx {
		cf.calls[i].Add(1)
		out[k] = blockPayload(cf.keys[i], cf.size)
	}
	return out, nil
}

// chainOf returns a token chain of the given number of full blocks and its
// keys.
func chainOf(t *testing.T, ns Namespace, blocks int) ([]uint32, []BlockKey) {
	t.Helper()
	tokens := make([]uint32, blocks*int(ns.Layout.BlockTokens))
	for i := range tokens {
		tokens[i] = uint32(i * 7)
	}
	keys, err := Chain(ns, tokens)
	if err != nil {
		t.Fatal(err)
	}
	return tokens, keys
}

// stampede runs n clients' GetOrFill on the same chain at once and returns
// their results and reports.
func stampede(t *testing.T, addr string, ns Namespace, tokens []uint32, n int, fill FillFunc) ([][][]byte, []FillReport) {
	t.Helper()
	clients := make([]*Client, n)
	for i := range clients {
		clients[i] = dialTest(t, addr, func(c *Config) { c.Conns = 1; c.Tenant = ns.Tenant })
	}
	results := make([][][]byte, n)
	reports := make([]FillReport, n)
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i, c := range clients {
		wg.Go(func() {
			<-start
			results[i], reports[i], errs[i] = c.GetOrFill(testCtx(t), ns, tokens, fill)
		})
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("client %d: %v", i, err)
		}
	}
	for _, c := range clients {
		c.Close()
	}
	return results, reports
}

// TestStampedeOneFillPerBlock: 32 clients ask for the same uncached 64-block
// chain at once. Each block is computed exactly once in total, and all 32
// end with byte-identical data. Twenty rounds, each on a fresh chain.
func TestStampedeOneFillPerBlock(t *testing.T) {
	rs := startServer(t, "127.0.0.1:0", wire.Limits{})
	const clients, blocks, size = 32, 64, 16 << 10
	for round := range 20 {
		ns := testNS("acme")
		ns.ModelID = fmt.Sprintf("stampede-%d", round)
		tokens, keys := chainOf(t, ns, blocks)
		cf := newCountingFill(keys, size)
		results, reports := stampede(t, rs.Addr, ns, tokens, clients, cf.fill)
		for i := range keys {
			if n := cf.calls[i].Load(); n != 1 {
				t.Fatalf("round %d: block %d computed %d times, want 1", round, i, n)
			}
		}
		var led, joined, hits int
		for c, res := range results {
			for i, b := range res {
				if !bytes.Equal(b, blockPayload(keys[i], size)) {
					t.Fatalf("round %d: client %d block %d differs", round, c, i)
				}
			}
			led += reports[c].Led + reports[c].Promoted
			joined += reports[c].Joined
			hits += reports[c].Hits
		}
		if led != blocks || led+joined+hits != clients*blocks {
			t.Fatalf("round %d: led %d, joined %d, hits %d of %d", round, led, joined, hits, clients*blocks)
		}
	}
}

// TestTenantsNeverShareAFill pairs the two cases: within one tenant a
// stampede computes each block once; two tenants asking for chains with
// equal tokens each compute their own, and neither reads the other's bytes.
func TestTenantsNeverShareAFill(t *testing.T) {
	rs := startServer(t, "127.0.0.1:0", wire.Limits{})
	const blocks, size = 8, 4 << 10
	// Reuse within tenant A.
	nsA := testNS("tenant-a")
	tokensA, keysA := chainOf(t, nsA, blocks)
	cfA := newCountingFill(keysA, size)
	stampede(t, rs.Addr, nsA, tokensA, 8, cfA.fill)
	for i := range keysA {
		if n := cfA.calls[i].Load(); n != 1 {
			t.Fatalf("tenant A block %d computed %d times, want 1 (reuse within a tenant)", i, n)
		}
	}
	// Tenant B, same tokens: its own fills, its own bytes.
	nsB := testNS("tenant-b")
	tokensB, _ := chainOf(t, nsB, blocks)
	var callsB atomic.Int32
	fillB := func(_ context.Context, idx []int) ([][]byte, error) {
		out := make([][]byte, len(idx))
		for k, i := range idx {
			callsB.Add(1)
			out[k] = bytes.Repeat([]byte{'B'}, size)
			_ = i
		}
		return out, nil
	}
	res, rep := stampede(t, rs.Addr, nsB, tokensB, 1, fillB)
	if callsB.Load() != blocks || rep[0].Hits != 0 || rep[0].Joined != 0 {
		t.Fatalf("tenant B computed %d of %d blocks, hits %d, joined %d: it must fill its own", callsB.Load(), blocks, rep[0].Hits, rep[0].Joined)
	}
	for i, b := range res[0] {
		if !bytes.Equal(b, bytes.Repeat([]byte{'B'}, size)) {
			t.Fatalf("tenant B block %d carries another tenant's bytes", i)
		}
	}
}

// TestLeaderCrashPromotesWaiter: the leader's connection dies mid-fill; a
// waiter takes over each of its turns and every client still finishes, each
// block computed once in total.
func TestLeaderCrashPromotesWaiter(t *testing.T) {
	const blocks, size, waiters = 16, 4 << 10, 8
	joined := make(chan struct{}, waiters*blocks)
	rs := servertest.StartWith(t, "127.0.0.1:0", wire.Limits{}, func(c *server.Config) {
		c.Hooks = &server.Hooks{Joined: func() { joined <- struct{}{} }}
	})
	ns := testNS("acme")
	tokens, keys := chainOf(t, ns, blocks)
	cf := newCountingFill(keys, size)

	// The leader acquires every block, then hangs in its fill until killed.
	leader := dialTest(t, rs.Addr, func(c *Config) { c.Conns = 1 })
	inFill, crash := make(chan struct{}), make(chan struct{})
	leaderDone := make(chan error, 1)
	go func() {
		_, _, err := leader.GetOrFill(testCtx(t), ns, tokens, func(ctx context.Context, idx []int) ([][]byte, error) {
			close(inFill)
			<-crash
			return nil, errors.New("engine crashed")
		})
		leaderDone <- err
	}()
	<-inFill

	var wg sync.WaitGroup
	results := make([][][]byte, waiters)
	reports := make([]FillReport, waiters)
	for i := range waiters {
		c := dialTest(t, rs.Addr, func(c *Config) { c.Conns = 1 })
		wg.Go(func() {
			var err error
			results[i], reports[i], err = c.GetOrFill(testCtx(t), ns, tokens, cf.fill)
			if err != nil {
				t.Errorf("waiter %d: %v", i, err)
			}
		})
	}
	for range waiters * blocks { // every waiter has joined every block
		<-joined
	}
	killed := time.Now()
	leader.Close() // the leader's connection dies mid-fill
	wg.Wait()
	worst := time.Since(killed)
	close(crash)
	if err := <-leaderDone; err == nil {
		t.Fatal("the crashed leader's GetOrFill succeeded")
	}
	promoted := 0
	for i, res := range results {
		for j, b := range res {
			if !bytes.Equal(b, blockPayload(keys[j], size)) {
				t.Fatalf("waiter %d block %d differs", i, j)
			}
		}
		promoted += reports[i].Promoted
	}
	for j := range keys {
		if n := cf.calls[j].Load(); n != 1 {
			t.Fatalf("block %d computed %d times after the crash, want 1", j, n)
		}
	}
	if promoted != blocks {
		t.Fatalf("%d blocks taken over by a promoted waiter, want %d", promoted, blocks)
	}
	t.Logf("leader killed: all %d waiters finished %v later (worst-case wait)", waiters, worst)
}
