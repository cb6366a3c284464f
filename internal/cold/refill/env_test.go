package refill

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/gpucache/gpucache/api/identity"
	"github.com/gpucache/gpucache/internal/cold"
	"github.com/gpucache/gpucache/internal/cold/pack"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// clock is a manual clock for the breaker.
type clock struct {
	mu sync.Mutex
	t  time.Time // guarded by mu
}

func newClock() *clock { return &clock{t: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// storeOp is one call the store saw.
type storeOp struct{ op, key string }

// env is a cold.Mem that logs every call with its key, a Refiller over it,
// and a manual clock.
type env struct {
	t     testing.TB
	mem   *cold.Mem
	clock *clock
	r     *Refiller

	mu    sync.Mutex
	log   []storeOp                                       // guarded by mu
	fault func(ctx context.Context, op, key string) error // guarded by mu
}

func newEnv(t testing.TB, cfg Config) *env {
	t.Helper()
	e := &env{t: t, mem: cold.NewMem(), clock: newClock()}
	e.mem.SetFault(func(ctx context.Context, op, key string) error {
		e.mu.Lock()
		e.log = append(e.log, storeOp{op, key})
		f := e.fault
		e.mu.Unlock()
		if f != nil {
			return f(ctx, op, key)
		}
		return nil
	})
	if cfg.Now == nil {
		cfg.Now = e.clock.Now
	}
	if cfg.Timeout == 0 {
		// The default 2 s is wall-clock: on a loaded machine under -race a
		// refill of an in-memory store can run past it, which turns the
		// miss a test expects into Unavailable.
		cfg.Timeout = time.Minute
	}
	r, err := New(e.mem, cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.r = r
	return e
}

// setFault installs f to run (after logging) on every store call.
func (e *env) setFault(f func(ctx context.Context, op, key string) error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.fault = f
}

// put writes an object directly (test setup), then forgets the call.
func (e *env) put(key string, body []byte) {
	e.t.Helper()
	if err := e.mem.Put(context.Background(), key, body, cold.PutOptions{}); err != nil {
		e.t.Fatal(err)
	}
	e.reset()
}

func (e *env) get(key string) []byte {
	e.t.Helper()
	info, err := e.mem.Head(context.Background(), key)
	if err != nil {
		e.t.Fatal(err)
	}
	b := make([]byte, info.Size)
	if err := e.mem.RangeGet(context.Background(), key, 0, b); err != nil {
		e.t.Fatal(err)
	}
	e.reset()
	return b
}

// publish writes a pack the way a sink does, then forgets the calls.
func (e *env) publish(p *pack.Pack) {
	e.t.Helper()
	if err := pack.Verify(p); err != nil {
		e.t.Fatal(err)
	}
	for _, o := range append([]pack.Object{p.Object, p.Manifest}, p.Pointers...) {
		e.put(o.Key, o.Body)
	}
}

func (e *env) reset() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.log = nil
}

// count returns the calls of op (any op if "") on keys starting with prefix.
func (e *env) count(op, prefix string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for _, c := range e.log {
		if (op == "" || c.op == op) && strings.HasPrefix(c.key, prefix) {
			n++
		}
	}
	return n
}

// payloadReads counts RangeGet calls on pack objects.
func (e *env) payloadReads() int { return e.count(cold.OpRangeGet, "packs/") }

// writes counts Put and Delete calls.
func (e *env) writes() int { return e.count(cold.OpPut, "") + e.count(cold.OpDelete, "") }

// calls counts every store call.
func (e *env) calls() int { return e.count("", "") }

// ---- identities and packs ----

func testNamespace(tenant string) identity.Namespace {
	return identity.Namespace{
		Tenant:            tenant,
		TrustDomain:       "prod",
		ModelID:           "meta-llama/Llama-3.1-8B-Instruct",
		ConfigRevision:    "0e9e39f",
		TokenizerRevision: "5f0b02c",
		Adapter:           "lora/sql-v2",
		RoPE:              "llama3 theta=500000",
		DType:             "bf16",
		Quantization:      "none",
		Layout: identity.Layout{
			Format: "vllm-nhd", TPRank: 0, TPSize: 2, PPRank: 1, PPSize: 2,
			LayerStart: 16, LayerCount: 16, KVHeads: 4, HeadDim: 128, BlockTokens: 4,
		},
	}
}

// chain returns n identities of one token chain whose tokens start at seed.
func chain(t testing.TB, ns identity.Namespace, n int, seed uint32) []identity.CacheIdentity {
	t.Helper()
	tokens := make([]uint32, n*int(ns.Layout.BlockTokens))
	for i := range tokens {
		tokens[i] = seed + uint32(i)
	}
	ids, err := identity.Identities(ns, tokens)
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// payloadFor returns size bytes derived from the identity's tokens and tenant.
func payloadFor(id identity.CacheIdentity, size int) []byte {
	b := make([]byte, size)
	s := byte(len(id.Tenant))
	for j := range b {
		b[j] = byte(int(id.Tokens[0])*131+j*7+j>>9) ^ s
	}
	return b
}

func buildPack(t testing.TB, ids []identity.CacheIdentity, size int) (*pack.Pack, [][]byte) {
	t.Helper()
	blocks := make([]pack.Block, len(ids))
	payloads := make([][]byte, len(ids))
	for i, id := range ids {
		payloads[i] = payloadFor(id, size)
		blocks[i] = pack.Block{Identity: id, Payload: payloads[i]}
	}
	p, err := pack.Build(ids[0].Namespace, blocks)
	if err != nil {
		t.Fatal(err)
	}
	return p, payloads
}

// filled returns n bytes of 0xAA, so a test can see which bytes a refill
// wrote.
func filled(n int) []byte { return bytes.Repeat([]byte{0xAA}, n) }

func allAA(b []byte) bool {
	for _, c := range b {
		if c != 0xAA {
			return false
		}
	}
	return true
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// expectMiss checks a miss with the given reason, n == 0, and no payload
// byte in dst (untouched, or zeroed where a read had begun).
func expectMiss(t testing.TB, n int, res Result, want Reason, dst []byte) {
	t.Helper()
	if res.Hit || res.Reason != want || n != 0 {
		t.Fatalf("got n=%d %v, want missing(%v)", n, res, want)
	}
	for _, c := range dst {
		if c != 0xAA && c != 0 {
			t.Fatal("dst holds bytes after a miss")
		}
	}
}
