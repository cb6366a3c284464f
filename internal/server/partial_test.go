package server

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"testing"

	"github.com/gpucache/gpucache/api/identity"
	"github.com/gpucache/gpucache/api/wire"
	"github.com/gpucache/gpucache/internal/hot"
	"github.com/gpucache/gpucache/internal/testfix"
)

// choppyListener hands the server connections whose i-th read returns at
// most sizes[i] bytes (cycling), so request headers, tables and payloads
// arrive split at many offsets: some inside the read buffer, some past it,
// some with the next frame in the same read.
type choppyListener struct {
	net.Listener
	sizes []int
}

func (l *choppyListener) Accept() (net.Conn, error) {
	nc, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &testfix.ChoppyConn{Conn: nc, Sizes: l.sizes}, nil
}

// PUT payloads that arrive in pieces of every size around the read
// buffer's, two PUT frames sent back to back in one write, are stored
// exactly: the part of a payload the read buffer holds is copied out of it,
// the rest read straight into the slot, and the next frame starts where
// the payload ends.
func TestPutsInPieces(t *testing.T) {
	store, err := hot.New(hot.Config{CapacityBytes: 32 << 20, MinClass: 16 << 10, MaxClass: 1 << 20, SlabBytes: 2 << 20})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := New(Config{Store: store, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() {
		served <- srv.Serve(&choppyListener{Listener: ln, sizes: []int{1, 7, readBufSize - 3, 100, 2*readBufSize + 5, 64 << 10, 3}})
	}()
	t.Cleanup(func() {
		if err := srv.Shutdown(context.Background()); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		if err := <-served; err != nil && !errors.Is(err, ErrClosed) {
			t.Errorf("serve: %v", err)
		}
		store.Close()
	})

	c := helloConn(t, ln.Addr().String(), "acme")
	blob := mustCanonical(t, testNamespace("acme"))
	sizes := []int{16, readBufSize - 200, readBufSize, readBufSize + 1, 64 << 10, 3*readBufSize + 17}
	ids := make([]identity.CacheIdentity, len(sizes))
	keys := make([]identity.BlockKey, len(sizes))
	payloads := make([][]byte, len(sizes))
	// Every PUT frame of the run, written in one write: frame i+1 starts
	// right after payload i on the stream.
	var stream []byte
	for i, n := range sizes {
		ids[i] = testID(uint32(i + 1))
		keys[i] = mustKey(t, ids[i])
		payloads[i] = make([]byte, n)
		for j := range payloads[i] {
			payloads[i][j] = byte(j*31 + i)
		}
		body := putBody(blob, []wire.PutBlock{putBlock(keys[i], ids[i], n)}, [][]byte{payloads[i]})
		c.id++
		stream = wire.Header{Version: wire.FrameVersion, Op: wire.OpPut, RequestID: c.id, BodyLen: uint32(len(body))}.Append(stream)
		stream = append(stream, body...)
	}
	first := c.id - uint64(len(sizes)) + 1
	c.writeRaw(stream)
	for i := range sizes {
		h, body := c.recv()
		if h.RequestID != first+uint64(i) || h.Op != wire.OpPut || h.Flags&wire.FlagError != 0 {
			t.Fatalf("answer %d: %+v", i, h)
		}
		var resp wire.StatusResponse
		if err := resp.Decode(body, wire.DefaultMaxBatch); err != nil || len(resp.Statuses) != 1 || resp.Statuses[0] != wire.StatusStored {
			t.Fatalf("PUT %d (%d bytes): %v %v", i, sizes[i], resp.Statuses, err)
		}
	}
	resp, payload, _ := c.get(blob, 0, keys...)
	for i, bm := range resp.Blocks {
		if bm.Status != wire.StatusHit || int(bm.Len) != sizes[i] {
			t.Fatalf("block %d: %+v", i, bm)
		}
		equalBytes(t, payload[:bm.Len], payloads[i])
		payload = payload[bm.Len:]
	}
}
