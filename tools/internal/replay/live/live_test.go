package live

import (
	"context"
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/gpucache/gpucache/api/wire"
	"github.com/gpucache/gpucache/client"
	"github.com/gpucache/gpucache/internal/hot"
	"github.com/gpucache/gpucache/internal/policy"
	"github.com/gpucache/gpucache/internal/server"
	"github.com/gpucache/gpucache/internal/server/servertest"
	"github.com/gpucache/gpucache/internal/testfix"
	"github.com/gpucache/gpucache/tools/internal/replay"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testPayload keeps the test's blocks small: one 4 KiB slot each.
const testPayload = 4096

// tinyTrace has shared prefixes (a conversation that grows, a shared
// system prompt), a partial last block per request (a hash id always
// covers the same tokens, as in the Mooncake traces: a turn that extends a
// partial block gives it a new hash id), and requests that return after
// other traffic. 12 unique blocks.
func tinyTrace() []replay.Request {
	return []replay.Request{
		{Timestamp: 0, InputLength: 1500, HashIDs: []uint64{1, 2, 3}},
		{Timestamp: 1000, InputLength: 2000, HashIDs: []uint64{1, 2, 4, 5}},
		{Timestamp: 1000, InputLength: 2100, HashIDs: []uint64{1, 2, 4, 13, 6}},
		{Timestamp: 3000, InputLength: 700, HashIDs: []uint64{7, 8}},
		{Timestamp: 4000, InputLength: 1500, HashIDs: []uint64{1, 2, 3}},
		{Timestamp: 4500, InputLength: 3000, HashIDs: []uint64{1, 2, 4, 13, 14, 9}},
		{Timestamp: 5000, InputLength: 700, HashIDs: []uint64{7, 8}},
		{Timestamp: 5200, InputLength: 400, HashIDs: []uint64{10}},
		{Timestamp: 6000, InputLength: 2000, HashIDs: []uint64{1, 2, 4, 5}},
		{Timestamp: 6000, InputLength: 1500, HashIDs: []uint64{1, 2, 3}},
	}
}

// startServer runs a real server whose hot tier holds exactly sz's
// capacity in blocks, under the named policy ("" : the store's built-in
// order).
func startServer(t *testing.T, sz Sizing, policyName string) *servertest.Server {
	t.Helper()
	cfg := hot.Config{CapacityBytes: sz.CapacityBytes, MinClass: sz.SlotBytes, MaxClass: sz.SlotBytes,
		SlabBytes: sz.SlabBytes, Prefault: hot.PrefaultNone}
	if policyName != "" {
		p, err := policy.New(policyName)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Policy = p
	}
	store, err := hot.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// Registered before StartWith's cleanup, so it runs after the server
	// stops.
	t.Cleanup(func() { store.Close() })
	return servertest.StartWith(t, "127.0.0.1:0", wire.Limits{}, func(c *server.Config) { c.Store = store })
}

func sizing(t *testing.T, reqs []replay.Request, frac float64) Sizing {
	t.Helper()
	sz, err := Size(reqs, frac, testPayload)
	if err != nil {
		t.Fatal(err)
	}
	return sz
}

func run(t *testing.T, cfg Config) Report {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rep, err := Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Failed != 0 || rep.WrongPayloads != 0 {
		t.Fatalf("%d failed requests (%s), %d wrong payloads", rep.Failed, rep.FirstErr, rep.WrongPayloads)
	}
	return rep
}

func TestLiveMatchesSimulatorWithoutEviction(t *testing.T) {
	reqs := tinyTrace()
	sz := sizing(t, reqs, 1)
	if sz.CapacityBlocks != 12 {
		t.Fatalf("capacity %d blocks, want the 12 unique ones", sz.CapacityBlocks)
	}
	srv := startServer(t, sz, "")
	for _, workers := range []int{1, 3} {
		t.Run(map[int]string{1: "sequential", 3: "concurrent"}[workers], func(t *testing.T) {
			// Each run uses its own tenant's namespace: a fresh cache.
			tenant := map[int]string{1: "seq", 3: "conc"}[workers]
			rep := run(t, Config{Client: client.Config{Addr: srv.Addr, Tenant: tenant}, Requests: reqs,
				PayloadBytes: testPayload, Workers: workers, CapacityFrac: 1})
			if rep.Sim == nil {
				t.Fatal("no simulator result")
			}
			var blocks int64
			for _, q := range reqs {
				blocks += int64(len(q.HashIDs))
			}
			if rep.Requests != len(reqs) || rep.Blocks != blocks {
				t.Fatalf("requests %d, blocks %d; want %d, %d", rep.Requests, rep.Blocks, len(reqs), blocks)
			}
			if workers == 1 && (rep.HitBlocks != rep.Sim.HitBlocks || rep.HitRatioDiff != 0) {
				t.Fatalf("live hits %d (ratio %.4f), simulator %d (%.4f)", rep.HitBlocks, rep.HitRatio, rep.Sim.HitBlocks, rep.Sim.HitRatio)
			}
			// Concurrent requests may overtake each other, but on a cache
			// that never evicts a block cached once stays: at most the
			// simulator's hits.
			if rep.HitBlocks > rep.Sim.HitBlocks || rep.HitBlocks == 0 {
				t.Fatalf("live hits %d, simulator %d", rep.HitBlocks, rep.Sim.HitBlocks)
			}
			if rep.SavedTokens == 0 || rep.SavedTokens > rep.PromptTokens || rep.PromptTokens != rep.Sim.PromptTokens {
				t.Fatalf("saved %d of %d prompt tokens (simulator %d)", rep.SavedTokens, rep.PromptTokens, rep.Sim.PromptTokens)
			}
			if rep.LookupHits != rep.HitBlocks || rep.GetMisses != 0 {
				t.Fatalf("lookup hits %d, read back %d, GET misses %d", rep.LookupHits, rep.HitBlocks, rep.GetMisses)
			}
			if rep.PutStored != 12 || rep.PutRefused != 0 {
				t.Fatalf("stored %d blocks, refused %d; want the 12 unique, none", rep.PutStored, rep.PutRefused)
			}
			if rep.BytesRead != rep.HitBlocks*testPayload || rep.BytesWritten != (rep.PutStored+rep.PutExists)*testPayload {
				t.Fatalf("bytes read %d, written %d", rep.BytesRead, rep.BytesWritten)
			}
			if rep.Latency.Max <= 0 || rep.Latency.P50 > rep.Latency.P99 || rep.RequestsPerS <= 0 || rep.GiBPerS <= 0 {
				t.Fatalf("latency %+v, %v req/s, %v GiB/s", rep.Latency, rep.RequestsPerS, rep.GiBPerS)
			}
		})
	}
}

func TestLiveWithEviction(t *testing.T) {
	reqs := tinyTrace()
	full := replaySim(t, reqs, "lru", 1)
	for _, frac := range []float64{0.5, 0.3} {
		sz := sizing(t, reqs, frac)
		srv := startServer(t, sz, "lru")
		rep := run(t, Config{Client: client.Config{Addr: srv.Addr}, Requests: reqs, PayloadBytes: testPayload,
			Workers: 1, CapacityFrac: frac, SimPolicy: "lru"})
		t.Logf("capacity %d blocks: live %d/%d hits (%.3f), simulator %d (%.3f), server %v",
			sz.CapacityBlocks, rep.HitBlocks, rep.Blocks, rep.HitRatio, rep.Sim.HitBlocks, rep.Sim.HitRatio, rep.Server)
		if rep.Sim.Capacity != sz.CapacityBlocks {
			t.Fatalf("simulator capacity %d, sizing %d", rep.Sim.Capacity, sz.CapacityBlocks)
		}
		if rep.Server["hot_evictions"] == 0 || rep.Server["hot_blocks"] != uint64(sz.CapacityBlocks) {
			t.Fatalf("server %v: want evictions and exactly %d blocks cached", rep.Server, sz.CapacityBlocks)
		}
		if rep.Server["hot_capacity_bytes"] != uint64(sz.CapacityBytes) {
			t.Fatalf("server capacity %d, sizing %d", rep.Server["hot_capacity_bytes"], sz.CapacityBytes)
		}
		if rep.HitBlocks >= full.HitBlocks {
			t.Fatalf("%d hits at %d blocks, %d with room for all", rep.HitBlocks, sz.CapacityBlocks, full.HitBlocks)
		}
		if math.Abs(rep.HitRatioDiff) > 1e-9 {
			t.Fatalf("live hit ratio %.4f, simulator %.4f", rep.HitRatio, rep.Sim.HitRatio)
		}
	}
}

func replaySim(t *testing.T, reqs []replay.Request, pol string, frac float64) replay.Result {
	t.Helper()
	r, err := replay.Simulate(reqs, pol, frac, nil)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestPacing(t *testing.T) {
	reqs := tinyTrace()
	srv := startServer(t, sizing(t, reqs, 1), "")
	clk := testfix.NewClock(time.Unix(1000, 0))
	var mu sync.Mutex
	var progress []int
	rep := run(t, Config{Client: client.Config{Addr: srv.Addr}, Requests: reqs, PayloadBytes: testPayload,
		Workers: 2, Speedup: 2, Clock: clk, Progress: func(done int) {
			mu.Lock()
			progress = append(progress, done)
			mu.Unlock()
		}})
	// Arrivals 0, 1000, 1000, 3000, 4000, 4500, 5000, 5200, 6000, 6000 ms
	// at twice the speed: sleeps up to each new arrival, none for a tie.
	want := []time.Duration{500, 1000, 500, 250, 250, 100, 400}
	for i := range want {
		want[i] *= time.Millisecond
	}
	if !slices.Equal(clk.Sleeps(), want) {
		t.Fatalf("sleeps %v, want %v", clk.Sleeps(), want)
	}
	if rep.Seconds != 3 || rep.RequestsPerS != float64(len(reqs))/3 || rep.MaxLagMS != 0 {
		t.Fatalf("elapsed %vs, %v req/s, max lag %vms; want 3s by the fake clock, no lag", rep.Seconds, rep.RequestsPerS, rep.MaxLagMS)
	}
	if rep.Latency.P50 < 0 || rep.Latency.Max > 3000 {
		t.Fatalf("latency %+v by a clock that moves 3s in all", rep.Latency)
	}
	slices.Sort(progress)
	if len(progress) != len(reqs) || progress[0] != 1 || progress[len(progress)-1] != len(reqs) {
		t.Fatalf("progress calls %v", progress)
	}

	// A cancelled context stops the pacing sleep and the replay.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Run(ctx, Config{Client: client.Config{Addr: srv.Addr}, Requests: reqs, PayloadBytes: testPayload,
		Speedup: 1, Clock: &testfix.Clock{}}); err == nil {
		t.Fatal("Run with a cancelled context: no error")
	}
}

func TestWrongPayloadsAreCounted(t *testing.T) {
	reqs := tinyTrace()
	srv := startServer(t, sizing(t, reqs, 1), "")
	ctx := context.Background()
	c, err := client.Dial(ctx, client.Config{Addr: srv.Addr, Conns: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Plant the first block of the first request with the wrong bytes.
	ns := DefaultNamespace(c.Tenant())
	dig, err := ns.Digest()
	if err != nil {
		t.Fatal(err)
	}
	toks := SyntheticTokens(nil, 1, replay.BlockTokens)
	key := client.KeyFor(dig, client.BlockKey{}, toks, replay.BlockTokens)
	bad := make([]byte, testPayload)
	FillPayload(bad, key)
	bad[100] ^= 1
	st, err := c.Put(ctx, ns, []client.PutBlock{{Key: key, TokenIDs: toks, Data: bad}})
	if err != nil || st[0] != client.StatusStored {
		t.Fatalf("plant: %v %v", st, err)
	}
	rep, err := Run(ctx, Config{Client: client.Config{Addr: srv.Addr}, Requests: reqs, PayloadBytes: testPayload, Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	// Every request that starts with hash id 1 reads the planted block.
	if rep.WrongPayloads != 7 || rep.HitBlocks != 2 {
		t.Fatalf("wrong payloads %d, usable hits %d; want 7, 2 (the [7 8] chain)", rep.WrongPayloads, rep.HitBlocks)
	}
}

func TestSize(t *testing.T) {
	reqs := tinyTrace() // 12 unique blocks
	for _, tc := range []struct {
		frac               float64
		payload            int
		blocks, slot, slab int
		capBytes           int64
	}{
		{1, 4096, 12, 4096, 12 * 4096, 12 * 4096},
		{0.5, 4096, 6, 4096, 6 * 4096, 6 * 4096},
		{0.45, 100, 5, 4096, 5 * 4096, 5 * 4096},
		{1, 256 << 10, 12, 256 << 10, 12 * 256 << 10, 12 * 256 << 10},
		{1, 100_000, 12, 128 << 10, 12 * 128 << 10, 12 * 128 << 10},
		{1, 64 << 20, 12, 64 << 20, 64 << 20, 12 * 64 << 20},
		{1, 32 << 20, 12, 32 << 20, 2 * 32 << 20, 12 * 32 << 20},
	} {
		sz, err := Size(reqs, tc.frac, tc.payload)
		if err != nil {
			t.Fatal(err)
		}
		if sz.UniqueBlocks != 12 || sz.CapacityBlocks != tc.blocks || sz.SlotBytes != tc.slot || sz.SlabBytes != tc.slab ||
			sz.CapacityBytes != tc.capBytes {
			t.Errorf("Size(%v, %d) = %+v", tc.frac, tc.payload, sz)
		}
	}
	// 2400 blocks of 256 KiB: the largest divisor of 2400 with slabs of at
	// most 64 MiB (256 slots) is 240.
	var big []replay.Request
	for i := range 2400 {
		big = append(big, replay.Request{InputLength: 512, HashIDs: []uint64{uint64(i)}})
	}
	sz, err := Size(big, 1, 256<<10)
	if err != nil || sz.SlabBytes != 240*256<<10 || sz.CapacityBytes%int64(sz.SlabBytes) != 0 {
		t.Fatalf("Size(2400 blocks) = %+v, %v", sz, err)
	}
	for _, frac := range []float64{0, -1, 1.5, 0.01} { // 0.01 × 12 < 1 block
		if _, err := Size(reqs, frac, 4096); err == nil {
			t.Errorf("Size(%v): no error", frac)
		}
	}
	if PayloadBytes(256) != 256<<10 || PayloadBytes(DefaultScale) != 256<<10 || PayloadBytes(1) != 64<<20 {
		t.Errorf("PayloadBytes(256) = %d", PayloadBytes(256))
	}
}

func TestPayloadAndTokens(t *testing.T) {
	var k1, k2 client.BlockKey
	k1[0], k2[0] = 1, 2
	for _, n := range []int{1, 7, 8, 4096, 4099} {
		b := make([]byte, n)
		FillPayload(b, k1)
		if !CheckPayload(b, k1, n) {
			t.Fatalf("size %d: own payload rejected", n)
		}
		if CheckPayload(b, k2, n) && n >= 8 {
			t.Fatalf("size %d: another key's payload accepted", n)
		}
		if CheckPayload(b[:n-1], k1, n) {
			t.Fatalf("size %d: short payload accepted", n)
		}
		b[n-1] ^= 0x80
		if CheckPayload(b, k1, n) {
			t.Fatalf("size %d: corrupted last byte accepted", n)
		}
	}
	a := SyntheticTokens(nil, 5, 512)
	b := SyntheticTokens(nil, 5|1<<32, 512)
	if len(a) != 512 || slices.Equal(a, b) || !slices.Equal(a, SyntheticTokens(nil, 5, 512)) {
		t.Fatal("synthetic tokens are not a function of the hash id")
	}
	if got := SyntheticTokens(nil, 5, 3); !slices.Equal(got, a[:3]) {
		t.Fatalf("a partial block's tokens %v are not a prefix of the full block's", got)
	}
}

func TestConfigErrors(t *testing.T) {
	for _, cfg := range []Config{
		{Speedup: -1},
		{Workers: -1},
		{CapacityFrac: 2},
		{CapacityFrac: 0.5, SimPolicy: "nope"},
		{LeaseTTL: -time.Second},
	} {
		if _, err := Run(context.Background(), cfg); err == nil {
			t.Errorf("Run(%+v): no error", cfg)
		}
	}
}
