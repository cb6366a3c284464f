package client

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/gpucache/gpucache/api/wire"
)

// A server that reads requests and never answers: calls return promptly
// with ErrTimeout and no data, and the connection holding the unanswered
// requests is closed after AbandonGrace.
func TestDeadlineNoAnswer(t *testing.T) {
	fs := newFake(t, nil).start() // answers HELLO only
	failed := make(chan error, 4)
	c := dialTest(t, fs.addr(), func(c *Config) {
		c.Conns = 1
		c.AbandonGrace = 50 * time.Millisecond
		c.hooks = &hooks{connFailed: func(err error) { failed <- err }}
	})
	ns := testNS("acme")
	blocks := testBlocks(t, ns, 2, 1000, 1)

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	dst := [][]byte{pattern(2000, 0xAA), pattern(2000, 0xAA)}
	res := make([]GetResult, 2)
	if hits := c.GetInto(ctx, ns, keysOf(blocks), dst, res); hits != 0 {
		t.Fatalf("%d hits from a silent server", hits)
	}
	for i, r := range res {
		if r.Hit || r.Data != nil || !errors.Is(r.Reason, ErrTimeout) || !errors.Is(r.Reason, context.DeadlineExceeded) {
			t.Fatalf("result %d: %+v", i, r)
		}
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("GetInto took %v after a 100ms deadline", d)
	}
	// The connection is closed for holding an unanswered request.
	if err := <-failed; !errors.Is(err, ErrUnavailable) {
		t.Fatalf("connection failed with %v", err)
	}
	if !bytes.Equal(dst[0], pattern(2000, 0xAA)) {
		t.Fatal("destination buffer written")
	}

	// Writes and control calls time out too (on a redialed connection).
	ctx2, cancel2 := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel2()
	if _, err := c.Put(ctx2, ns, blocks); !errors.Is(err, ErrTimeout) {
		t.Fatalf("put: %v", err)
	}
	if _, err := c.Ping(ctx2); !errors.Is(err, ErrTimeout) {
		t.Fatalf("ping: %v", err)
	}
}

// A GET answer cut off by a dropped connection: blocks delivered whole are
// hits, the rest are misses with a reason, never partial bytes.
func TestDroppedMidAnswer(t *testing.T) {
	p0, p1, p2 := pattern(3000, 1), pattern(3000, 2), pattern(3000, 3)
	var fs *fakeServer
	fs = newFake(t, func(fc *fakeConn, h wire.Header, body []byte) {
		if h.Op != wire.OpGet {
			return
		}
		if req := decodeGet(t, body); len(req.Keys) != 3 {
			t.Errorf("GET of %d keys", len(req.Keys))
		}
		full := getAnswer([][]byte{p0, p1, p2})
		f := frameBytes(h, 0, uint32(len(full)), full)
		cut := len(f) - 3000 - 1500 // p0 whole, half of p1
		fc.nc.Write(f[:cut])
		fs.ln.Close() // no redial: the retry of an unanswered request fails too
		fc.nc.Close()
	})
	fs.start()
	c := dialTest(t, fs.addr(), func(c *Config) { c.Conns = 1 })
	ns := testNS("acme")
	keys := keysOf(testBlocks(t, ns, 3, 10, 0))
	ctx := testCtx(t)

	res := c.Get(ctx, ns, keys)
	if !res[0].Hit || !bytes.Equal(res[0].Data, p0) {
		t.Fatalf("block 0: %+v", res[0].Reason)
	}
	for i, r := range res[1:] {
		if r.Hit || r.Data != nil || !errors.Is(r.Reason, ErrUnavailable) {
			t.Fatalf("block %d: hit %v data %d reason %v", i+1, r.Hit, len(r.Data), r.Reason)
		}
	}
	// The next call finds the connection dead and the server gone.
	if _, err := c.Ping(ctx); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("ping: %v", err)
	}
}

// A server that stalls in the middle of a payload: the caller returns at
// its deadline, and its buffer is never written after that.
func TestDeadlineMidPayload(t *testing.T) {
	more := make(chan struct{})
	wrote := make(chan struct{})
	failed := make(chan error, 1)
	fs := newFake(t, func(fc *fakeConn, h wire.Header, body []byte) {
		if h.Op != wire.OpGet {
			return
		}
		full := getAnswer([][]byte{pattern(1<<20, 1)})
		f := frameBytes(h, 0, uint32(len(full)), full)
		fc.nc.Write(f[:len(f)-(1<<19)]) // half the payload, then stall
		<-more
		fc.nc.Write(f[len(f)-(1<<19):]) // the connection is gone by now
		close(wrote)
	}).start()
	c := dialTest(t, fs.addr(), func(c *Config) {
		c.Conns = 1
		c.hooks = &hooks{connFailed: func(err error) { failed <- err }}
	})
	ns := testNS("acme")
	keys := keysOf(testBlocks(t, ns, 1, 10, 0))
	dst := [][]byte{make([]byte, 1<<20)}
	res := make([]GetResult, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	c.GetInto(ctx, ns, keys, dst, res)
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("GetInto took %v", d)
	}
	if res[0].Hit || res[0].Data != nil || !errors.Is(res[0].Reason, ErrTimeout) {
		t.Fatalf("result: %+v", res[0])
	}
	snapshot := bytes.Clone(dst[0])
	// Breaking out of the stalled read closed the connection.
	if err := <-failed; !errors.Is(err, ErrUnavailable) {
		t.Fatalf("connection failed with %v", err)
	}
	close(more)
	<-wrote
	if !bytes.Equal(snapshot, dst[0]) {
		t.Fatal("buffer written after GetInto returned")
	}
}

// An answer that arrives after its caller gave up is drained, not
// delivered, and the connection stays usable.
func TestLateAnswerDiscarded(t *testing.T) {
	release := make(chan struct{})
	fs := newFake(t, func(fc *fakeConn, h wire.Header, body []byte) {
		switch h.Op {
		case wire.OpGet:
			<-release
			fc.reply(h, 0, getAnswer([][]byte{pattern(5000, 7), nil}))
		case wire.OpPing:
			fc.reply(h, 0, body)
		}
	}).start()
	dials := make(chan struct{}, 4)
	c := dialTest(t, fs.addr(), func(c *Config) {
		c.Conns = 1
		c.hooks = &hooks{dialed: func() { dials <- struct{}{} }}
	})
	<-dials
	ns := testNS("acme")
	keys := keysOf(testBlocks(t, ns, 2, 10, 0))
	dst := [][]byte{pattern(8000, 0xEE), pattern(8000, 0xEE)}
	res := make([]GetResult, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	c.GetInto(ctx, ns, keys, dst, res)
	if res[0].Hit || !errors.Is(res[0].Reason, ErrTimeout) {
		t.Fatalf("result: %+v", res[0])
	}
	close(release)
	// The ping is answered after the late GET answer on the same
	// connection, so by then the reader has drained it.
	if _, err := c.Ping(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(dst[0], pattern(8000, 0xEE)) {
		t.Fatal("late answer written into the caller's buffer")
	}
	select {
	case <-dials:
		t.Fatal("connection was redialed")
	default:
	}
}

// Malformed answers are protocol errors: misses for reads, and the
// connection is dropped.
func TestProtocolViolation(t *testing.T) {
	fs := newFake(t, func(fc *fakeConn, h wire.Header, body []byte) {
		if h.Op == wire.OpGet {
			// A miss that claims bytes.
			b := getAnswer([][]byte{nil})
			b[4+4+1] = 9
			fc.reply(h, 0, b)
		}
	}).start()
	c := dialTest(t, fs.addr(), func(c *Config) { c.Conns = 1 })
	ns := testNS("acme")
	r := c.Get(testCtx(t), ns, keysOf(testBlocks(t, ns, 1, 10, 0)))[0]
	if r.Hit || !errors.Is(r.Reason, ErrProtocol) {
		t.Fatalf("result: %+v", r)
	}
}

// A lease belongs to the connection that took it: a leased Get goes there,
// whichever connection the pool would pick otherwise.
func TestLeaseStaysOnItsConnection(t *testing.T) {
	var mu sync.Mutex
	granted := map[uint64]*fakeConn{}
	var next uint64
	var wrongConn, leasedGets int
	fs := newFake(t, func(fc *fakeConn, h wire.Header, body []byte) {
		mu.Lock()
		defer mu.Unlock()
		switch h.Op {
		case wire.OpPing:
			fc.reply(h, 0, body)
		case wire.OpLookup:
			next++
			granted[next] = fc
			resp := wire.LookupResponse{Hits: 1, LeaseID: next, LeaseTTLMillis: 1000}
			fc.reply(h, 0, resp.AppendTo(nil))
		case wire.OpGet:
			req := decodeGet(t, body)
			if req.LeaseID != 0 {
				leasedGets++
				if granted[req.LeaseID] != fc {
					wrongConn++
				}
			}
			fc.reply(h, 0, getAnswer([][]byte{pattern(10, 1)}))
		}
	}).start()
	c := dialTest(t, fs.addr(), func(c *Config) { c.Conns = 4 })
	ctx := testCtx(t)
	ns := testNS("acme")
	keys := keysOf(testBlocks(t, ns, 1, 10, 0))
	for range 12 {
		hits, lease, err := c.Lookup(ctx, ns, keys, time.Second)
		if err != nil || hits != 1 || lease == 0 {
			t.Fatalf("lookup: %d %d %v", hits, lease, err)
		}
		c.Ping(ctx) // moves the round-robin on
		if r := c.Get(ctx, ns, keys, WithLease(lease))[0]; !r.Hit {
			t.Fatalf("get: %v", r.Reason)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if leasedGets != 12 || wrongConn != 0 {
		t.Fatalf("%d leased GETs, %d on another connection", leasedGets, wrongConn)
	}
}
