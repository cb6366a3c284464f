package clienttest_test

import (
	"bytes"
	"context"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/gpucache/gpucache/api/wire"
	. "github.com/gpucache/gpucache/client"
	"github.com/gpucache/gpucache/internal/server/servertest"
)

// testCtx bounds a whole test's calls.
func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// startServer runs a real server on addr ("127.0.0.1:0" for any port) and
// stops it when the test ends, unless the test stops it first.
func startServer(t *testing.T, addr string, limits wire.Limits) *servertest.Server {
	return servertest.Start(t, addr, limits)
}

func testNS(tenant string) Namespace {
	return Namespace{
		Tenant: tenant, TrustDomain: "test", ModelID: "m", ConfigRevision: "c1", TokenizerRevision: "t1",
		RoPE: "rope", DType: "fp16", Quantization: "none",
		Layout: Layout{Format: "raw", TPSize: 1, PPSize: 1, LayerCount: 1, KVHeads: 1, HeadDim: 1, BlockTokens: 4},
	}
}

// testBlocks returns a chain of n blocks of size bytes each; block i's
// bytes depend on seed and i.
func testBlocks(t testing.TB, ns Namespace, n, size int, seed byte) []PutBlock {
	t.Helper()
	tokens := make([]uint32, 4*n)
	for i := range tokens {
		tokens[i] = uint32(i) + uint32(seed)<<24
	}
	ids, err := Identities(ns, tokens)
	if err != nil {
		t.Fatal(err)
	}
	payloads := make([][]byte, n)
	for i := range payloads {
		data := make([]byte, size)
		for j := range data {
			data[j] = byte(j*7+i) ^ seed
		}
		payloads[i] = data
	}
	return BlocksOf(ids, payloads)
}

func keysOf(blocks []PutBlock) []BlockKey {
	keys := make([]BlockKey, len(blocks))
	for i := range blocks {
		keys[i] = blocks[i].Key
	}
	return keys
}

func pattern(n int, b byte) []byte { return bytes.Repeat([]byte{b}, n) }

// silentPeer listens on a loopback port, accepts connections and reads
// them, and never answers (not even HELLO). It returns the address; the
// listener and its connections close when the test ends.
func silentPeer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns []net.Conn
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, nc)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				io.Copy(io.Discard, nc)
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, nc := range conns {
			nc.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}
