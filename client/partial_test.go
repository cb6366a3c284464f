package client

import (
	"bytes"
	"context"
	"net"
	"testing"
)

// Answers that arrive in pieces of every size around the read buffer's
// (partial reads, a payload split between the buffer and the socket) are
// delivered whole and exact, by Get and GetInto, for blocks smaller and
// larger than the buffer.
func TestAnswersInPieces(t *testing.T) {
	fs := newFake(t, newBlockStore(t).handle).start()
	sizes := []int{1, 5, readBufSize - 3, 2, readBufSize + 9, 64 << 10, 13, 3*readBufSize + 1}
	c := dialTest(t, fs.addr(), func(cfg *Config) {
		cfg.Conns = 1
		cfg.hooks = &hooks{dial: func(ctx context.Context, addr string) (net.Conn, error) {
			var d net.Dialer
			nc, err := d.DialContext(ctx, "tcp", addr)
			if err != nil {
				return nil, err
			}
			return &choppyConn{Conn: nc, sizes: sizes}, nil
		}}
	})
	ns := testNS("acme")
	ctx := testCtx(t)
	var blocks []PutBlock
	for i, size := range []int{100, readBufSize - 40, readBufSize, readBufSize + 1, 64 << 10, 200 << 10} {
		blocks = append(blocks, testBlocks(t, ns, 1, size, byte(i+1))...)
	}
	st, err := c.Put(ctx, ns, blocks)
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range st {
		if s != StatusStored {
			t.Fatalf("block %d: %v", i, s)
		}
	}
	keys := keysOf(blocks)
	for round := range 3 {
		for i, r := range c.Get(ctx, ns, keys) {
			if !r.Hit || !bytes.Equal(r.Data, blocks[i].Data) {
				t.Fatalf("round %d, Get block %d (%d bytes): hit %v, %d bytes, %v", round, i, len(blocks[i].Data), r.Hit, len(r.Data), r.Reason)
			}
		}
		dst, res := make([][]byte, len(keys)), make([]GetResult, len(keys))
		for i := range dst {
			dst[i] = make([]byte, 256<<10)
		}
		if hits := c.GetInto(ctx, ns, keys, dst, res); hits != len(keys) {
			t.Fatalf("round %d, GetInto: %d hits of %d", round, hits, len(keys))
		}
		for i, r := range res {
			if !bytes.Equal(r.Data, blocks[i].Data) {
				t.Fatalf("round %d, GetInto block %d differs", round, i)
			}
		}
		// One block per request, several in flight: answers follow each
		// other on the stream, so one may start inside another's read.
		type answer struct {
			i int
			r GetResult
		}
		done := make(chan answer, len(keys))
		for i := range keys {
			go func() { done <- answer{i, c.Get(ctx, ns, keys[i:i+1])[0]} }()
		}
		for range keys {
			a := <-done
			if !a.r.Hit || !bytes.Equal(a.r.Data, blocks[a.i].Data) {
				t.Fatalf("round %d, concurrent Get of block %d: hit %v, %v", round, a.i, a.r.Hit, a.r.Reason)
			}
		}
	}
}

// choppyConn returns at most sizes[i] bytes from its i-th read (cycling),
// so answers arrive split at many offsets. (The product module's tests use
// internal/testfix.ChoppyConn; the client module cannot import it.)
type choppyConn struct {
	net.Conn
	sizes []int
	i     int // reads so far
}

func (c *choppyConn) Read(p []byte) (int, error) {
	n := c.sizes[c.i%len(c.sizes)]
	c.i++
	return c.Conn.Read(p[:min(len(p), n)])
}
