package server

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/gpucache/gpucache/api/identity"
	"github.com/gpucache/gpucache/api/wire"
	"github.com/gpucache/gpucache/internal/hot"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type testServer struct {
	srv    *Server
	store  *hot.Store
	addr   string
	served chan error
}

// startServer runs a server on 127.0.0.1:0 over a small store and stops it
// when the test ends.
func startServer(t *testing.T, mod func(*Config)) *testServer {
	t.Helper()
	return startServerStore(t, hot.Config{CapacityBytes: 32 << 20, MinClass: 16 << 10, MaxClass: 1 << 20, SlabBytes: 2 << 20}, mod)
}

// startServerStore is startServer over a store built from hc.
func startServerStore(t *testing.T, hc hot.Config, mod func(*Config)) *testServer {
	t.Helper()
	store, err := hot.New(hc)
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Store: store, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if mod != nil {
		mod(&cfg)
	}
	srv, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ts := &testServer{srv: srv, store: store, addr: ln.Addr().String(), served: make(chan error, 1)}
	go func() { ts.served <- srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		// A test that ends before the Serve goroutine ran shuts the
		// server down first: Serve then answers ErrClosed at once.
		if err := <-ts.served; err != nil && !errors.Is(err, ErrClosed) {
			t.Errorf("serve: %v", err)
		}
		store.Close()
	})
	return ts
}

// rawConn speaks the wire protocol frame by frame, so tests can send
// anything.
type rawConn struct {
	t  *testing.T
	nc net.Conn
	id uint64
}

func dialRaw(t *testing.T, addr string) *rawConn {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	nc.SetDeadline(time.Now().Add(20 * time.Second))
	return &rawConn{t: t, nc: nc}
}

// hello dials and opens a session for tenant.
func helloConn(t *testing.T, addr, tenant string) *rawConn {
	c := dialRaw(t, addr)
	req := wire.HelloRequest{MinVersion: 1, MaxVersion: 1, Tenant: tenant, Client: "test"}
	h, body := c.roundTrip(wire.OpHello, req.AppendTo(nil))
	if h.Flags&wire.FlagError != 0 {
		t.Fatalf("hello failed: %v", decodeErr(t, body))
	}
	return c
}

func (c *rawConn) writeRaw(b []byte) {
	c.t.Helper()
	if _, err := c.nc.Write(b); err != nil {
		c.t.Fatalf("write: %v", err)
	}
}

func (c *rawConn) send(op wire.Opcode, body []byte) uint64 {
	c.t.Helper()
	c.id++
	h := wire.Header{Version: wire.FrameVersion, Op: op, RequestID: c.id, BodyLen: uint32(len(body))}
	c.writeRaw(append(h.Append(nil), body...))
	return c.id
}

func (c *rawConn) recv() (wire.Header, []byte) {
	c.t.Helper()
	var hb [wire.HeaderSize]byte
	if _, err := io.ReadFull(c.nc, hb[:]); err != nil {
		c.t.Fatalf("read header: %v", err)
	}
	h, err := wire.DecodeHeader(hb[:])
	if err != nil {
		c.t.Fatalf("response header: %v", err)
	}
	body := make([]byte, h.BodyLen)
	if _, err := io.ReadFull(c.nc, body); err != nil {
		c.t.Fatalf("read body: %v", err)
	}
	return h, body
}

func (c *rawConn) roundTrip(op wire.Opcode, body []byte) (wire.Header, []byte) {
	c.t.Helper()
	id := c.send(op, body)
	h, b := c.recv()
	if h.RequestID != id || h.Op != op || h.Flags&wire.FlagResponse == 0 {
		c.t.Fatalf("response %+v does not answer request %d op %s", h, id, op)
	}
	return h, b
}

// expectError reads one response and checks it is an error with code.
func (c *rawConn) expectError(code wire.Code) *wire.Error {
	c.t.Helper()
	h, body := c.recv()
	if h.Flags&wire.FlagError == 0 {
		c.t.Fatalf("want error %s, got success response %+v", code, h)
	}
	e := decodeErr(c.t, body)
	if e.Code != code {
		c.t.Fatalf("want error %s, got %v", code, e)
	}
	return e
}

// expectClosed checks the server closed the connection.
func (c *rawConn) expectClosed() {
	c.t.Helper()
	c.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	n, err := c.nc.Read(make([]byte, 1))
	if err == nil || n != 0 {
		c.t.Fatalf("connection still open (read %d, %v)", n, err)
	}
}

func decodeErr(t *testing.T, body []byte) *wire.Error {
	t.Helper()
	e, err := wire.DecodeError(body)
	if err != nil {
		t.Fatalf("error body: %v", err)
	}
	return e
}

func testNamespace(tenant string) identity.Namespace {
	return identity.Namespace{
		Tenant: tenant, TrustDomain: "cluster-a", ModelID: "meta-llama/Llama-3.1-8B",
		ConfigRevision: "rev1", TokenizerRevision: "tok1", Adapter: "", RoPE: "rope:theta=500000",
		DType: "fp16", Quantization: "none",
		Layout: identity.Layout{Format: "vllm-nhd", TPRank: 0, TPSize: 1, PPRank: 0, PPSize: 1,
			LayerStart: 0, LayerCount: 32, KVHeads: 8, HeadDim: 128, BlockTokens: 16},
	}
}

func mustCanonical(t *testing.T, ns identity.Namespace) []byte {
	t.Helper()
	b, err := ns.Canonical()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// putBody builds a PUT body for blocks with the given payloads.
func putBody(nsBlob []byte, blocks []wire.PutBlock, payloads [][]byte) []byte {
	req := wire.PutRequest{Namespace: nsBlob, Blocks: blocks}
	b := wire.AppendMeta(nil, req.AppendTo(nil))
	for _, p := range payloads {
		b = append(b, p...)
	}
	return b
}

// testID returns the identity of a first block (position 0, no parent) of
// testNamespace("acme") whose 16 tokens derive from seed.
func testID(seed uint32) identity.CacheIdentity {
	toks := make([]uint32, 16)
	for i := range toks {
		toks[i] = seed*100 + uint32(i)
	}
	return identity.CacheIdentity{Namespace: testNamespace("acme"), Tokens: toks, ValidLength: 16}
}

func mustKey(t *testing.T, id identity.CacheIdentity) identity.BlockKey {
	t.Helper()
	k, err := id.Key()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// putBlock is the PUT entry of a block with identity id stored under key.
func putBlock(key identity.BlockKey, id identity.CacheIdentity, n int) wire.PutBlock {
	return wire.PutBlock{Key: key, Parent: id.Parent, ValidLength: id.ValidLength, Len: uint32(n),
		Position: id.Position, TokenIDs: id.Tokens}
}

// put stores one block under its identity's key.
func (c *rawConn) put(nsBlob []byte, id identity.CacheIdentity, payload []byte) wire.Status {
	c.t.Helper()
	return c.putAs(nsBlob, mustKey(c.t, id), id, payload)
}

// putAs stores one block under key, claiming identity id (which need not
// derive key).
func (c *rawConn) putAs(nsBlob []byte, key identity.BlockKey, id identity.CacheIdentity, payload []byte) wire.Status {
	c.t.Helper()
	blocks := []wire.PutBlock{putBlock(key, id, len(payload))}
	h, body := c.roundTrip(wire.OpPut, putBody(nsBlob, blocks, [][]byte{payload}))
	if h.Flags&wire.FlagError != 0 {
		c.t.Fatalf("put: %v", decodeErr(c.t, body))
	}
	var resp wire.StatusResponse
	if err := resp.Decode(body, wire.DefaultMaxBatch); err != nil || len(resp.Statuses) != 1 {
		c.t.Fatalf("put response: %v %v", err, resp)
	}
	return resp.Statuses[0]
}

// get reads keys and returns the table and the payload bytes, checking the
// frame carries exactly table plus announced payload.
func (c *rawConn) get(nsBlob []byte, lease uint64, keys ...identity.BlockKey) (wire.GetResponse, []byte, wire.Header) {
	c.t.Helper()
	req := wire.GetRequest{Namespace: nsBlob, LeaseID: lease, Keys: keys}
	h, body := c.roundTrip(wire.OpGet, req.AppendTo(nil))
	if h.Flags&wire.FlagError != 0 {
		c.t.Fatalf("get: %v", decodeErr(c.t, body))
	}
	metaLen := binary.LittleEndian.Uint32(body)
	var resp wire.GetResponse
	total, err := resp.Decode(body[4:4+metaLen], wire.DefaultMaxBatch)
	if err != nil {
		c.t.Fatalf("get table: %v", err)
	}
	payload := body[4+metaLen:]
	if uint64(len(payload)) != total {
		c.t.Fatalf("frame carries %d payload bytes, table announces %d", len(payload), total)
	}
	return resp, payload, h
}

func equalBytes(t *testing.T, got, want []byte) {
	t.Helper()
	if !bytes.Equal(got, want) {
		t.Fatalf("payload differs: got %d bytes, want %d", len(got), len(want))
	}
}
