// Package testfix holds the test fixtures several packages share: a
// manual clock for tests that cannot run inside a testing/synctest bubble,
// a small valid namespace, and a deterministic payload generator.
//
// Prefer testing/synctest for anything timed: inside a bubble time.Now and
// time.Sleep are already fake. Clock is for the tests synctest cannot
// host: those that talk over real sockets (a synctest bubble cannot wait
// on network I/O) and those that need time to run backwards.
package testfix

import (
	"context"
	"net"
	"sync"
	"time"

	"github.com/gpucache/gpucache/api/identity"
)

// Clock is a manual clock, safe for concurrent use. Now moves only through
// Set, Advance or Sleep. The zero Clock reads the zero time.
type Clock struct {
	mu     sync.Mutex
	now    time.Time       // guarded by mu
	sleeps []time.Duration // guarded by mu; every Sleep's d, in call order
}

// NewClock returns a clock reading start.
func NewClock(start time.Time) *Clock { return &Clock{now: start} }

// Now is the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Set moves the clock to t (backwards too).
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

// Advance moves the clock by d (backwards for a negative d).
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// Sleep records d and advances the clock by it at once; it returns
// ctx.Err(). It stands in for a sleep the code under test injects.
func (c *Clock) Sleep(ctx context.Context, d time.Duration) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sleeps = append(c.sleeps, d)
	c.now = c.now.Add(d)
	return ctx.Err()
}

// Sleeps returns a copy of every Sleep's duration, in call order.
func (c *Clock) Sleeps() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Duration(nil), c.sleeps...)
}

// RawNamespace is a small valid namespace of tenant and model: one layer,
// one head, one-token blocks in the "raw" layout.
func RawNamespace(tenant, model string) identity.Namespace {
	return identity.Namespace{
		Tenant: tenant, TrustDomain: "prod", ModelID: model, ConfigRevision: "c1",
		TokenizerRevision: "t1", RoPE: "none", DType: "bf16", Quantization: "none",
		Layout: identity.Layout{Format: "raw", TPSize: 1, PPSize: 1, LayerCount: 1, KVHeads: 1, HeadDim: 1, BlockTokens: 1},
	}
}

// Payload returns n deterministic pseudo-random bytes; different seeds
// give different bytes.
func Payload(n int, seed byte) []byte {
	b := make([]byte, n)
	x := uint32(seed) + 1
	for i := range b {
		x = x*1664525 + 1013904223
		b[i] = byte(x >> 24)
	}
	return b
}

// TinyNamespace is a small valid namespace of tenant: one layer, one
// head, 16-token blocks in the "raw" layout.
func TinyNamespace(tenant string) identity.Namespace {
	return identity.Namespace{Tenant: tenant, TrustDomain: "t", ModelID: "m", ConfigRevision: "c", TokenizerRevision: "k",
		RoPE: "rope", DType: "fp16", Quantization: "none",
		Layout: identity.Layout{Format: "raw", TPSize: 1, PPSize: 1, LayerCount: 1, KVHeads: 1, HeadDim: 1, BlockTokens: 16}}
}

// ChoppyConn returns at most Sizes[i] bytes from its i-th read (cycling),
// so frames arrive split at many offsets: headers, tables and payloads
// partly in a reader's buffer and partly past it. Only one goroutine may
// read it.
type ChoppyConn struct {
	net.Conn
	Sizes []int
	i     int // reads so far
}

func (c *ChoppyConn) Read(p []byte) (int, error) {
	n := c.Sizes[c.i%len(c.Sizes)]
	c.i++
	return c.Conn.Read(p[:min(len(p), n)])
}
