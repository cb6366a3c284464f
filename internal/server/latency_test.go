package server

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpucache/gpucache/api/identity"
	"github.com/gpucache/gpucache/api/wire"
	"github.com/gpucache/gpucache/internal/lower"
	"github.com/gpucache/gpucache/internal/testfix"
)

// latencyCounts maps "name{a,b}" (the label values in order) to the
// histogram's count.
func latencyCounts(s *Server) map[string]uint64 {
	m := make(map[string]uint64)
	for _, h := range s.Latencies() {
		m[h.Name+"{"+strings.Join(h.LabelValues, ",")+"}"] = h.Count()
	}
	return m
}

// memTier is a tierFuncs over a map, local (flash) or not (cold); gate,
// when set, holds every refill until it is closed, after saying on
// entered (when set) that the refill started.
func memTier(local bool, gate <-chan struct{}, entered chan<- struct{}, blocks map[identity.BlockKey][]byte) *tierFuncs {
	return &tierFuncs{local: local,
		present: func(_ identity.NamespaceDigest, key identity.BlockKey) bool { _, ok := blocks[key]; return ok },
		refill: func(_ context.Context, _ identity.Namespace, key identity.BlockKey, alloc lower.Alloc) (int, bool) {
			b, ok := blocks[key]
			if !ok {
				return 0, false
			}
			if entered != nil {
				entered <- struct{}{}
			}
			if gate != nil {
				<-gate
			}
			slot, ok := alloc(len(b))
			if !ok {
				return 0, false
			}
			return copy(slot, b), true
		}}
}

// TestLatencyHistogramsByOpAndTier: each request is counted in the
// histogram of its operation and of the tier that served it: a DRAM hit,
// a flash refill, a cold refill (through a chain of a local and a cold
// tier), a miss, a GET that waited for another session's refill (flash,
// and a refill fill wait), an ACQUIRE fill (acquire and fill-commit, and
// an acquire fill wait), a PUT and a LOOKUP. Counts, not timings.
func TestLatencyHistogramsByOpAndTier(t *testing.T) {
	ids := make([]identity.CacheIdentity, 7)
	keys := make([]identity.BlockKey, len(ids))
	for i := range ids {
		ids[i] = testID(uint32(100 + i))
		keys[i] = mustKey(t, ids[i])
	}
	payload := testfix.Payload(20<<10, 5)
	gate := make(chan struct{})
	entered, joined := make(chan struct{}, 1), make(chan struct{}, 1)
	flash := map[identity.BlockKey][]byte{keys[2]: payload}
	cold := map[identity.BlockKey][]byte{keys[3]: payload}
	gated := map[identity.BlockKey][]byte{keys[5]: payload}
	ts := startServer(t, func(c *Config) {
		c.Lower = lower.NewChain(false, memTier(true, nil, nil, flash), memTier(true, gate, entered, gated), memTier(false, nil, nil, cold))
		c.Hooks = &Hooks{Joined: func() {
			select {
			case joined <- struct{}{}:
			default: // the ACQUIRE join later on is not waited for
			}
		}}
	})
	blob := mustCanonical(t, testNamespace("acme"))
	a, b := helloConn(t, ts.addr, "acme"), helloConn(t, ts.addr, "acme")

	// A PUT, a DRAM hit, a flash and a cold refill, a miss, and a GET of
	// a hit and a miss (dram: the lowest tier that served a block).
	if st := a.put(blob, ids[1], payload); st != wire.StatusStored {
		t.Fatalf("put: %s", st)
	}
	for i, want := range []wire.Status{1: wire.StatusHit, 2: wire.StatusHit, 3: wire.StatusHit, 4: wire.StatusMiss} {
		if i == 0 {
			continue
		}
		if resp, _, _ := a.get(blob, 0, keys[i]); resp.Blocks[0].Status != want {
			t.Fatalf("get %d: %s, want %s", i, resp.Blocks[0].Status, want)
		}
	}
	if resp, _, _ := a.get(blob, 0, keys[1], keys[4]); resp.Blocks[0].Status != wire.StatusHit || resp.Blocks[1].Status != wire.StatusMiss {
		t.Fatalf("get hit+miss: %+v", resp.Blocks)
	}
	a.lookup(blob, 0, []wire.Key{keys[1]})

	// A refill fill wait: a leads the (gated) refill of keys[5], b joins
	// it; both read the block once the gate opens.
	var wg sync.WaitGroup
	hits := make([]wire.Status, 2)
	for i, c := range []*rawConn{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, _, _ := c.get(blob, 0, keys[5])
			hits[i] = resp.Blocks[0].Status
		}()
		if i == 0 {
			<-entered // a leads: its refill is held at the gate
		} else {
			<-joined // b joined a's refill
		}
	}
	close(gate)
	wg.Wait()
	if hits[0] != wire.StatusHit || hits[1] != wire.StatusHit {
		t.Fatalf("the gated refill: %v", hits)
	}

	// An ACQUIRE fill: a leads, b joins, a commits, b's WAIT takes the
	// notice.
	la, jb := a.acquire(blob, keys[6])[0], b.acquire(blob, keys[6])[0]
	if la.Outcome != wire.AcquireLead || jb.Outcome != wire.AcquireJoined {
		t.Fatalf("acquire: %+v / %+v", la, jb)
	}
	if st := a.commit(blob, la.Token, ids[6], payload); st != wire.StatusStored {
		t.Fatalf("commit: %s", st)
	}
	if n := b.wait(blob, 5*time.Second, jb.Token.Fill)[0]; n.Kind != wire.NoticeFinished {
		t.Fatalf("wait: %+v", n)
	}

	got := latencyCounts(ts.srv)
	want := map[string]uint64{
		"request_seconds{put,dram}":           1,
		"request_seconds{get,dram}":           2,
		"request_seconds{get,flash}":          3, // keys[2], and keys[5] led and joined
		"request_seconds{get,cold}":           1,
		"request_seconds{get,miss}":           1,
		"request_seconds{lookup,dram}":        1,
		"request_seconds{acquire,dram}":       2,
		"request_seconds{fill_commit,dram}":   1,
		"fill_wait_seconds{refill,finished}":  1,
		"fill_wait_seconds{acquire,finished}": 1,
	}
	for name, n := range got {
		if got[name] != want[name] {
			t.Errorf("%s: count %d, want %d", name, n, want[name])
		}
	}
	for name := range want {
		if _, ok := got[name]; !ok {
			t.Errorf("%s: not exported", name)
		}
	}
}

// TestLatencyHistogramsRESP: a RESP SET and GET are counted as resp_set
// and resp_get, a GET of an absent key as a miss.
func TestLatencyHistogramsRESP(t *testing.T) {
	store := bigStore(t, 64<<20)
	p := respProfile(0)
	p.AnyKey = true
	f := startRESP(t, store, false, func(c *Config) { c.RESPProfiles = map[string]RESPProfile{"default": p} })
	c := dialRESP(t, f.addr)
	c.do("SET", "key:1", "v")
	c.do("GET", "key:1")
	c.do("GET", "key:2")
	got := latencyCounts(f.srv)
	for name, n := range map[string]uint64{
		"request_seconds{resp_set,dram}":      1,
		"request_seconds{resp_set,forwarded}": 0,
		"request_seconds{resp_get,dram}":      1,
		"request_seconds{resp_get,miss}":      1,
		"request_seconds{resp_get,forwarded}": 0,
	} {
		if got[name] != n {
			t.Errorf("%s: count %d, want %d", name, got[name], n)
		}
	}
}

// TestLatencyBuckets: an observation lands in the first bucket whose
// upper bound is at least it, the slowest in the +Inf bucket, and the
// bounds run from 16 µs to about 16.8 s, doubling.
func TestLatencyBuckets(t *testing.T) {
	b := LatencyBounds()
	if len(b) != latBounds || b[0] != 16e-6 || b[len(b)-1] < 16 || b[len(b)-1] > 17 {
		t.Fatalf("bounds %v", b)
	}
	for _, c := range []struct {
		d    time.Duration
		want int
	}{{0, 0}, {-time.Second, 0}, {16 * time.Microsecond, 0}, {16*time.Microsecond + 1, 1}, {32 * time.Microsecond, 1},
		{50 * time.Millisecond, 12}, {16 * time.Second, 20}, {17 * time.Second, 21}, {time.Hour, 21}} {
		if got := latBucket(c.d); got != c.want {
			t.Errorf("latBucket(%v) = %d, want %d", c.d, got, c.want)
		}
		if i := c.want; i < latBounds && c.d > 0 && c.d.Seconds() > b[i]*(1+1e-9) {
			t.Errorf("%v is above its bucket's bound %g", c.d, b[i])
		}
	}
}

// TestLatencyObserveAllocatesNothing: timing a request (start, tier,
// observation) allocates nothing.
func TestLatencyObserveAllocatesNothing(t *testing.T) {
	s := &Server{}
	c := &conn{s: s}
	if n := testing.AllocsPerRun(1000, func() {
		c.startTiming(latGet)
		c.served(tierFlash)
		c.endTiming()
	}); n != 0 {
		t.Fatalf("%v allocations per timed request, want 0", n)
	}
	if got := &s.lat.req[latGet][tierFlash].counts; got[0].Load()+got[1].Load() == 0 {
		t.Fatal("nothing was observed")
	}
}

// BenchmarkLatencyObserve is the cost of timing one request.
func BenchmarkLatencyObserve(b *testing.B) {
	s := &Server{}
	c := &conn{s: s}
	b.ReportAllocs()
	for b.Loop() {
		c.startTiming(latGet)
		c.served(tierDRAM)
		c.endTiming()
	}
}
