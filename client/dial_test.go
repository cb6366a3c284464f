package client

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestDialErrors(t *testing.T) {
	// Nothing listens: ErrUnavailable.
	fs := newFake(t, nil)
	addr := fs.addr()
	fs.close()
	if _, err := Dial(testCtx(t), Config{Addr: addr}); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("dial closed port: %v", err)
	}
	if _, err := Dial(testCtx(t), Config{Conns: -1}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("bad config: %v", err)
	}
	// A server that never answers HELLO: ErrTimeout within the deadline.
	silent := newFake(t, nil)
	silent.silent = true
	silent.start()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := Dial(ctx, Config{Addr: silent.addr()}); !errors.Is(err, ErrTimeout) {
		t.Fatalf("dial silent server: %v", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("dial took %v", d)
	}
}

// TestClusterDialUnreachableSeedBounded: dialing a cluster whose only seed
// never answers returns within the context.
func TestClusterDialUnreachableSeedBounded(t *testing.T) {
	silent := newFake(t, nil)
	silent.silent = true
	silent.start()
	ctx, cancel := context.WithTimeout(testCtx(t), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := DialCluster(ctx, ClusterConfig{Seeds: []string{silent.addr()}, Node: Config{Tenant: "acme"}})
	if err == nil || !errors.Is(err, ErrUnavailable) {
		t.Fatalf("DialCluster: %v", err)
	}
	if took := time.Since(start); took > 300*time.Millisecond {
		t.Fatalf("DialCluster took %v", took)
	}
}

// After the server restarts (a fake node that keeps what PUT stores,
// restarted on the same port), the dead connections are redialed lazily.
func TestRedialAfterRestart(t *testing.T) {
	st := newBlockStore(t)
	fs := newFake(t, st.handle).start()
	addr := fs.addr()
	dials := make(chan struct{}, 16)
	c := dialTest(t, addr, func(c *Config) {
		c.Conns = 1
		c.hooks = &hooks{dialed: func() { dials <- struct{}{} }}
	})
	<-dials
	ctx := testCtx(t)
	ns := testNS("acme")
	blocks := testBlocks(t, ns, 1, 1000, 9)
	if _, err := c.Put(ctx, ns, blocks); err != nil {
		t.Fatal(err)
	}
	fs.close()
	// The server is gone: reads are misses, not hangs.
	if r := c.Get(ctx, ns, keysOf(blocks))[0]; r.Hit || !errors.Is(r.Reason, ErrUnavailable) {
		t.Fatalf("get with server down: %+v", r)
	}
	newFakeAt(t, addr, st.handle).start()
	if _, err := c.Put(ctx, ns, blocks); err != nil {
		t.Fatalf("put after restart: %v", err)
	}
	<-dials
	if r := c.Get(ctx, ns, keysOf(blocks))[0]; !r.Hit {
		t.Fatalf("get after restart: %v", r.Reason)
	}
}
