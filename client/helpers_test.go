package client

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/gpucache/gpucache/api/wire"
)

// testCtx bounds a whole test's calls.
func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func dialTest(t *testing.T, addr string, mod func(*Config)) *Client {
	t.Helper()
	cfg := Config{Addr: addr, Tenant: "acme", Conns: 2}
	if mod != nil {
		mod(&cfg)
	}
	c, err := Dial(testCtx(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
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

// fakeServer is a scripted server on a raw listener. It answers HELLO by
// itself (unless silent) and hands every later request to handle.
type fakeServer struct {
	ln     net.Listener
	silent bool // do not even answer HELLO
	limits wire.Limits
	handle func(fc *fakeConn, h wire.Header, body []byte) // nil: read and never answer
	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  []net.Conn
}

type fakeConn struct {
	nc net.Conn
}

func newFake(t testing.TB, handle func(fc *fakeConn, h wire.Header, body []byte)) *fakeServer {
	t.Helper()
	return newFakeAt(t, "127.0.0.1:0", handle)
}

// newFakeAt is newFake listening on addr (a restart on a known port).
func newFakeAt(t testing.TB, addr string, handle func(fc *fakeConn, h wire.Header, body []byte)) *fakeServer {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	fs := &fakeServer{ln: ln, handle: handle, limits: wire.DefaultLimits()}
	t.Cleanup(fs.close)
	return fs
}

func (fs *fakeServer) addr() string { return fs.ln.Addr().String() }

func (fs *fakeServer) start() *fakeServer {
	fs.wg.Add(1)
	go func() {
		defer fs.wg.Done()
		for {
			nc, err := fs.ln.Accept()
			if err != nil {
				return
			}
			fs.mu.Lock()
			fs.conns = append(fs.conns, nc)
			fs.mu.Unlock()
			fs.wg.Add(1)
			go func() {
				defer fs.wg.Done()
				fs.serve(&fakeConn{nc: nc})
			}()
		}
	}()
	return fs
}

func (fs *fakeServer) close() {
	fs.ln.Close()
	fs.mu.Lock()
	for _, nc := range fs.conns {
		nc.Close()
	}
	fs.mu.Unlock()
	fs.wg.Wait()
}

func (fs *fakeServer) serve(fc *fakeConn) {
	defer fc.nc.Close()
	var hb [wire.HeaderSize]byte
	for {
		if _, err := io.ReadFull(fc.nc, hb[:]); err != nil {
			return
		}
		h, err := wire.DecodeHeader(hb[:])
		if err != nil {
			return
		}
		body := make([]byte, h.BodyLen)
		if _, err := io.ReadFull(fc.nc, body); err != nil {
			return
		}
		if fs.silent {
			continue
		}
		if h.Op == wire.OpHello {
			resp := wire.HelloResponse{Version: wire.Version1, Server: "fake", Limits: fs.limits}
			fc.reply(h, 0, resp.AppendTo(nil))
			continue
		}
		if fs.handle != nil {
			fs.handle(fc, h, body)
		}
	}
}

// reply writes a whole answer frame.
func (fc *fakeConn) reply(h wire.Header, flags wire.Flags, body []byte) {
	fc.nc.Write(frameBytes(h, flags, uint32(len(body)), body))
}

func frameBytes(h wire.Header, flags wire.Flags, bodyLen uint32, body []byte) []byte {
	b := wire.Header{Version: wire.FrameVersion, Op: h.Op, Flags: wire.FlagResponse | flags, RequestID: h.RequestID, BodyLen: bodyLen}.Append(nil)
	return append(b, body...)
}

// getAnswer encodes a whole GET answer with a hit for every payload and a
// miss for every nil one.
func getAnswer(payloads [][]byte) []byte {
	var table []byte
	table = binary.LittleEndian.AppendUint32(table, uint32(len(payloads)))
	for _, p := range payloads {
		st := wire.StatusHit
		if p == nil {
			st = wire.StatusMiss
		}
		table = append(table, byte(st))
		table = binary.LittleEndian.AppendUint32(table, uint32(len(p)))
	}
	body := wire.AppendMeta(nil, table)
	for _, p := range payloads {
		body = append(body, p...)
	}
	return body
}

// decodeGet parses a GET request body with the wire package's decoder.
func decodeGet(t testing.TB, body []byte) wire.GetRequest {
	var req wire.GetRequest
	if err := req.Decode(body, wire.DefaultMaxBatch); err != nil {
		t.Errorf("GET request does not decode: %v", err)
	}
	return req
}

func pattern(n int, b byte) []byte { return bytes.Repeat([]byte{b}, n) }

// blockStore is the handler of a fake node that keeps what PUT stores and
// answers GET from it: enough for the tests of the client's own connection
// handling that need whole answers (redial, answers in pieces). The tests
// against a real server live in the product module (internal/clienttest),
// which the client module does not require (ADR 0028).
type blockStore struct {
	t  testing.TB
	mu sync.Mutex
	m  map[wire.Key][]byte
}

func newBlockStore(t testing.TB) *blockStore {
	return &blockStore{t: t, m: map[wire.Key][]byte{}}
}

func (st *blockStore) handle(fc *fakeConn, h wire.Header, body []byte) {
	switch h.Op {
	case wire.OpPut:
		var prefix [4]byte
		copy(prefix[:], body)
		n, err := wire.MetaLen(prefix, uint32(len(body)))
		if err != nil {
			st.t.Errorf("PUT body: %v", err)
			return
		}
		var req wire.PutRequest
		total, err := req.Decode(body[4:4+n], wire.DefaultMaxBatch)
		payload := body[4+n:]
		if err == nil {
			err = wire.CheckPayload(total, uint32(len(body)), n)
		}
		if err != nil {
			st.t.Errorf("PUT request does not decode: %v", err)
			return
		}
		statuses := make([]wire.Status, len(req.Blocks))
		st.mu.Lock()
		for i, b := range req.Blocks {
			st.m[b.Key] = bytes.Clone(payload[:b.Len])
			payload = payload[b.Len:]
			statuses[i] = wire.StatusStored
		}
		st.mu.Unlock()
		resp := wire.StatusResponse{Statuses: statuses}
		fc.reply(h, 0, resp.AppendTo(nil))
	case wire.OpGet:
		req := decodeGet(st.t, body)
		payloads := make([][]byte, len(req.Keys))
		st.mu.Lock()
		for i, k := range req.Keys {
			payloads[i] = st.m[k]
		}
		st.mu.Unlock()
		fc.reply(h, 0, getAnswer(payloads))
	default:
		st.t.Errorf("blockStore: unexpected op %v", h.Op)
	}
}
