package server

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpucache/gpucache/api/identity"
	"github.com/gpucache/gpucache/api/wire"
	"github.com/gpucache/gpucache/internal/testfix"
)

func TestPutGetRoundTrip(t *testing.T) {
	ts := startServer(t, nil)
	c := helloConn(t, ts.addr, "acme")
	ns := testNamespace("acme")
	blob := mustCanonical(t, ns)
	keys, err := identity.Chain(ns, make([]uint32, 48))
	if err != nil {
		t.Fatal(err)
	}
	ids, err := identity.Identities(ns, make([]uint32, 48))
	if err != nil {
		t.Fatal(err)
	}
	payloads := [][]byte{testfix.Payload(1<<20, 1), testfix.Payload(64<<10, 2), testfix.Payload(100, 3)}
	for i := range keys {
		if st := c.put(blob, ids[i], payloads[i]); st != wire.StatusStored {
			t.Fatalf("put %d: %s", i, st)
		}
	}
	if st := c.put(blob, ids[0], payloads[0]); st != wire.StatusExists {
		t.Fatalf("second put: %s, want EXISTS", st)
	}
	resp, payload, _ := c.get(blob, 0, keys...)
	off := 0
	for i, bm := range resp.Blocks {
		if bm.Status != wire.StatusHit {
			t.Fatalf("block %d: %s", i, bm.Status)
		}
		equalBytes(t, payload[off:off+int(bm.Len)], payloads[i])
		off += int(bm.Len)
	}

	// STAT and PING.
	_, body := c.roundTrip(wire.OpStat, nil)
	var st wire.StatResponse
	if err := st.Decode(body); err != nil {
		t.Fatal(err)
	}
	got := map[string]uint64{}
	for _, e := range st.Entries {
		got[e.Name] = e.Value
	}
	if got["hot_blocks"] != 3 || got["blocks_hit"] != 3 || got["requests_put"] != 4 {
		t.Fatalf("stat: blocks=%d hit=%d puts=%d", got["hot_blocks"], got["blocks_hit"], got["requests_put"])
	}
	if _, ok := got["go_gc_pause_p99_ns"]; !ok {
		t.Fatal("stat lacks go_gc_pause_p99_ns")
	}
	_, echo := c.roundTrip(wire.OpPing, []byte("hello"))
	if string(echo) != "hello" {
		t.Fatalf("ping echo %q", echo)
	}
}

// TestIdentityMismatchEveryField stores one block, then reads it presenting
// an identity that differs in exactly one field. Every case must be a miss
// whose frame carries zero payload bytes, whether the reader recomputes the
// key from its identity or reuses the stored key under its own namespace.
func TestIdentityMismatchEveryField(t *testing.T) {
	ts := startServer(t, nil)
	base := identity.CacheIdentity{Namespace: testNamespace("acme"), Tokens: []uint32{1, 2, 3, 4}, ValidLength: 4}
	baseKey, err := base.Key()
	if err != nil {
		t.Fatal(err)
	}
	writer := helloConn(t, ts.addr, "acme")
	if st := writer.put(mustCanonical(t, base.Namespace), base, testfix.Payload(32<<10, 9)); st != wire.StatusStored {
		t.Fatalf("put: %s", st)
	}
	type mut struct {
		field string
		f     func(*identity.CacheIdentity)
	}
	// Block fields (parent, position, tokens, valid length) are bound
	// through the key itself; namespace fields are also checked against the
	// namespace digest stored with the block.
	blockFields := map[string]bool{"parent": true, "position": true, "tokens": true, "valid_length": true}
	muts := []mut{
		{"tenant", func(c *identity.CacheIdentity) { c.Tenant = "other" }},
		{"trust_domain", func(c *identity.CacheIdentity) { c.TrustDomain = "cluster-b" }},
		{"model_id", func(c *identity.CacheIdentity) { c.ModelID = "meta-llama/Llama-3.1-70B" }},
		{"config_revision", func(c *identity.CacheIdentity) { c.ConfigRevision = "rev2" }},
		{"tokenizer_revision", func(c *identity.CacheIdentity) { c.TokenizerRevision = "tok2" }},
		{"adapter", func(c *identity.CacheIdentity) { c.Adapter = "lora-sql" }},
		{"rope", func(c *identity.CacheIdentity) { c.RoPE = "rope:theta=10000" }},
		{"dtype", func(c *identity.CacheIdentity) { c.DType = "bf16" }},
		{"quantization", func(c *identity.CacheIdentity) { c.Quantization = "fp8-e4m3" }},
		{"layout.format", func(c *identity.CacheIdentity) { c.Layout.Format = "vllm-hnd" }},
		{"layout.tp_rank", func(c *identity.CacheIdentity) { c.Layout.TPSize = 2; c.Layout.TPRank = 1 }},
		{"layout.tp_size", func(c *identity.CacheIdentity) { c.Layout.TPSize = 2 }},
		{"layout.pp_rank", func(c *identity.CacheIdentity) { c.Layout.PPSize = 2; c.Layout.PPRank = 1 }},
		{"layout.pp_size", func(c *identity.CacheIdentity) { c.Layout.PPSize = 2 }},
		{"layout.layer_start", func(c *identity.CacheIdentity) { c.Layout.LayerStart = 16 }},
		{"layout.layer_count", func(c *identity.CacheIdentity) { c.Layout.LayerCount = 16 }},
		{"layout.kv_heads", func(c *identity.CacheIdentity) { c.Layout.KVHeads = 4 }},
		{"layout.head_dim", func(c *identity.CacheIdentity) { c.Layout.HeadDim = 64 }},
		{"layout.block_tokens", func(c *identity.CacheIdentity) { c.Layout.BlockTokens = 32 }},
		{"parent", func(c *identity.CacheIdentity) { c.Parent = identity.BlockKey{1}; c.Position = 16 }},
		{"position", func(c *identity.CacheIdentity) { c.Parent = baseKey; c.Position = 16 }},
		{"tokens", func(c *identity.CacheIdentity) { c.Tokens = []uint32{1, 2, 3, 5} }},
		{"valid_length", func(c *identity.CacheIdentity) { c.ValidLength = 3 }},
	}
	for _, m := range muts {
		t.Run(m.field, func(t *testing.T) {
			id := base
			id.Tokens = append([]uint32(nil), base.Tokens...)
			m.f(&id)
			key, err := id.Key()
			if err != nil {
				t.Fatal(err)
			}
			reader := helloConn(t, ts.addr, id.Tenant)
			blob := mustCanonical(t, id.Namespace)
			if key == baseKey {
				t.Fatal("mutation did not change the key")
			}
			// The recomputed key, then (for namespace fields) the stored key
			// under this namespace.
			keys := []identity.BlockKey{key, baseKey}
			if blockFields[m.field] {
				keys = keys[:1]
			}
			for _, k := range keys {
				resp, payload, h := reader.get(blob, 0, k)
				if resp.Blocks[0].Status != wire.StatusMiss || len(payload) != 0 {
					t.Fatalf("status %s with %d payload bytes, want MISS and 0", resp.Blocks[0].Status, len(payload))
				}
				if h.BodyLen != 4+4+5 {
					t.Fatalf("frame body %d bytes, want the 13-byte table alone", h.BodyLen)
				}
				// LOOKUP must not see it either.
				lk := wire.LookupRequest{Namespace: blob, LeaseTTLMillis: 1000, Keys: []wire.Key{k}}
				_, body := reader.roundTrip(wire.OpLookup, lk.AppendTo(nil))
				var lr wire.LookupResponse
				if err := lr.Decode(body); err != nil || lr.Hits != 0 || lr.LeaseID != 0 {
					t.Fatalf("lookup: %+v %v, want no hits and no lease", lr, err)
				}
			}
		})
	}
	// Control: the unmodified identity hits, so the misses above are not
	// trivial.
	resp, payload, _ := writer.get(mustCanonical(t, base.Namespace), 0, baseKey)
	if resp.Blocks[0].Status != wire.StatusHit {
		t.Fatalf("control read: %s", resp.Blocks[0].Status)
	}
	equalBytes(t, payload, testfix.Payload(32<<10, 9))
	if st := ts.store.Stats(); st.IdentityMismatches == 0 {
		t.Fatal("no identity mismatch counted")
	}
}

func TestTenantCannotUseAnotherTenantsNamespace(t *testing.T) {
	ts := startServer(t, nil)
	c := helloConn(t, ts.addr, "tenant-b")
	blob := mustCanonical(t, testNamespace("tenant-a"))
	req := wire.GetRequest{Namespace: blob, Keys: []wire.Key{{1}}}
	c.send(wire.OpGet, req.AppendTo(nil))
	c.expectError(wire.CodeTenantMismatch)
	// Changing tenant on a live session is refused too.
	h := wire.HelloRequest{MinVersion: 1, MaxVersion: 1, Tenant: "tenant-a"}
	c.send(wire.OpHello, h.AppendTo(nil))
	c.expectError(wire.CodeTenantMismatch)
}

func TestLookupLeaseReleasedByGet(t *testing.T) {
	ts := startServer(t, nil)
	c := helloConn(t, ts.addr, "acme")
	ns := testNamespace("acme")
	blob := mustCanonical(t, ns)
	keys, _ := identity.Chain(ns, make([]uint32, 64))
	ids, _ := identity.Identities(ns, make([]uint32, 64))
	for i, id := range ids[:3] {
		c.put(blob, id, testfix.Payload(20<<10, byte(i)))
	}
	lk := wire.LookupRequest{Namespace: blob, LeaseTTLMillis: 10000, Keys: keys}
	_, body := c.roundTrip(wire.OpLookup, lk.AppendTo(nil))
	var lr wire.LookupResponse
	if err := lr.Decode(body); err != nil {
		t.Fatal(err)
	}
	if lr.Hits != 3 || lr.LeaseID == 0 {
		t.Fatalf("lookup: %+v, want 3 hits and a lease", lr)
	}
	if st := ts.store.Stats(); st.LeasesActive != 1 {
		t.Fatalf("leases active %d", st.LeasesActive)
	}
	// Another tenant cannot release it.
	other := helloConn(t, ts.addr, "other")
	other.get(mustCanonical(t, testNamespace("other")), lr.LeaseID, keys[0])
	if st := ts.store.Stats(); st.LeasesActive != 1 {
		t.Fatalf("another tenant released the lease")
	}
	resp, _, _ := c.get(blob, lr.LeaseID, keys[:3]...)
	for i, b := range resp.Blocks {
		if b.Status != wire.StatusHit {
			t.Fatalf("block %d: %s", i, b.Status)
		}
	}
	// The lease is released after the response is written; a PING after
	// it orders us behind that release.
	c.roundTrip(wire.OpPing, nil)
	if st := ts.store.Stats(); st.LeasesActive != 0 {
		t.Fatalf("lease not released by GET: %d active", st.LeasesActive)
	}
}

// TestBadInput sends every kind of bad frame. Each gets a typed error; the
// connection survives where the stream can be resynchronised, and a healthy
// client on another connection is served throughout.
func TestBadInput(t *testing.T) {
	ts := startServer(t, nil)
	healthy := helloConn(t, ts.addr, "acme")
	blob := mustCanonical(t, testNamespace("acme"))
	key := mustKey(t, testID(7))
	healthy.put(blob, testID(7), testfix.Payload(16<<10, 7))
	checkHealthy := func() {
		t.Helper()
		resp, payload, _ := healthy.get(blob, 0, key)
		if resp.Blocks[0].Status != wire.StatusHit {
			t.Fatal("healthy client lost its block")
		}
		equalBytes(t, payload, testfix.Payload(16<<10, 7))
	}
	frame := func(h wire.Header, body []byte) []byte { return append(h.Append(nil), body...) }

	t.Run("request before hello", func(t *testing.T) {
		c := dialRaw(t, ts.addr)
		c.send(wire.OpStat, nil)
		c.expectError(wire.CodeHelloRequired)
		c.send(wire.OpPing, []byte("x")) // still in sync
		if h, _ := c.recv(); h.Flags&wire.FlagError != 0 {
			t.Fatal("ping after error failed")
		}
	})
	t.Run("unknown opcode keeps the connection", func(t *testing.T) {
		c := helloConn(t, ts.addr, "acme")
		c.writeRaw(frame(wire.Header{Version: 1, Op: 99, RequestID: 5, BodyLen: 10}, make([]byte, 10)))
		c.expectError(wire.CodeUnknownOpcode)
		c.roundTrip(wire.OpPing, nil)
	})
	t.Run("unknown version keeps the connection", func(t *testing.T) {
		c := helloConn(t, ts.addr, "acme")
		c.writeRaw(frame(wire.Header{Version: 9, Op: wire.OpGet, RequestID: 5, BodyLen: 3}, []byte("abc")))
		c.expectError(wire.CodeUnsupportedVersion)
		c.roundTrip(wire.OpPing, nil)
	})
	t.Run("hello with unsupported versions", func(t *testing.T) {
		c := dialRaw(t, ts.addr)
		h := wire.HelloRequest{MinVersion: wire.VersionMax + 1, MaxVersion: wire.VersionMax + 2, Tenant: "acme"}
		c.send(wire.OpHello, h.AppendTo(nil))
		c.expectError(wire.CodeUnsupportedVersion)
	})
	t.Run("response flag on a request", func(t *testing.T) {
		c := helloConn(t, ts.addr, "acme")
		c.writeRaw(frame(wire.Header{Version: 1, Op: wire.OpPing, Flags: wire.FlagResponse, RequestID: 5}, nil))
		c.expectError(wire.CodeMalformed)
		c.roundTrip(wire.OpPing, nil)
	})
	t.Run("malformed bodies", func(t *testing.T) {
		c := helloConn(t, ts.addr, "acme")
		c.send(wire.OpGet, []byte{1, 2, 3})
		c.expectError(wire.CodeMalformed)
		c.send(wire.OpLookup, append(binary.LittleEndian.AppendUint32(nil, 5), "xx"...))
		c.expectError(wire.CodeMalformed)
		c.send(wire.OpPut, []byte{0xff, 0xff, 0xff, 0x7f, 1, 2})
		c.expectError(wire.CodeMalformed)
		c.send(wire.OpStat, []byte{1})
		c.expectError(wire.CodeMalformed)
		// A namespace blob that is not a canonical identity.
		g := wire.GetRequest{Namespace: []byte("not an identity"), Keys: []wire.Key{{1}}}
		c.send(wire.OpGet, g.AppendTo(nil))
		c.expectError(wire.CodeInvalidIdentity)
		// A PUT whose table announces more payload than the body has.
		req := wire.PutRequest{Namespace: blob, Blocks: []wire.PutBlock{putBlock(mustKey(t, testID(3)), testID(3), 100)}}
		c.send(wire.OpPut, append(wire.AppendMeta(nil, req.AppendTo(nil)), make([]byte, 10)...))
		c.expectError(wire.CodeMalformed)
		c.roundTrip(wire.OpPing, nil)
	})
	t.Run("batch too large", func(t *testing.T) {
		c := helloConn(t, ts.addr, "acme")
		g := wire.GetRequest{Namespace: blob, Keys: make([]wire.Key, wire.DefaultMaxBatch+1)}
		c.send(wire.OpGet, g.AppendTo(nil))
		c.expectError(wire.CodeBatchTooLarge)
		// A body larger than any valid GET is skipped unread.
		c.send(wire.OpGet, make([]byte, 64<<10))
		c.expectError(wire.CodeMalformed)
		c.roundTrip(wire.OpPing, nil)
	})
	t.Run("payload larger than the largest class", func(t *testing.T) {
		c := helloConn(t, ts.addr, "acme")
		big := testfix.Payload(2<<20, 1)
		req := wire.PutRequest{Namespace: blob, Blocks: []wire.PutBlock{putBlock(mustKey(t, testID(4)), testID(4), len(big))}}
		_, body := c.roundTrip(wire.OpPut, append(wire.AppendMeta(nil, req.AppendTo(nil)), big...))
		var sr wire.StatusResponse
		if err := sr.Decode(body, 1); err != nil || sr.Statuses[0] != wire.StatusTooLarge {
			t.Fatalf("got %v %v, want TOO_LARGE", sr, err)
		}
		c.roundTrip(wire.OpPing, nil)
	})
	t.Run("oversized frame closes", func(t *testing.T) {
		c := helloConn(t, ts.addr, "acme")
		c.writeRaw(wire.Header{Version: 1, Op: wire.OpPut, RequestID: 9, BodyLen: 0xffffffff}.Append(nil))
		c.expectError(wire.CodeFrameTooLarge)
		c.expectClosed()
	})
	t.Run("garbage closes", func(t *testing.T) {
		c := dialRaw(t, ts.addr)
		c.writeRaw([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
		c.expectError(wire.CodeBadMagic)
		c.expectClosed()
	})
	t.Run("nonzero reserved bytes", func(t *testing.T) {
		c := dialRaw(t, ts.addr)
		b := wire.Header{Version: 1, Op: wire.OpPing, RequestID: 1}.Append(nil)
		b[22] = 1
		c.writeRaw(b)
		c.expectError(wire.CodeMalformed)
		// ... and with an oversized length it is fatal, not skipped.
		b = wire.Header{Version: 1, Op: wire.OpPing, RequestID: 2, BodyLen: 1 << 31}.Append(nil)
		b[22] = 1
		c.writeRaw(b)
		c.expectError(wire.CodeFrameTooLarge)
		c.expectClosed()
	})
	t.Run("truncated frames", func(t *testing.T) {
		// A header cut short, and a body cut short: the server sees EOF and
		// drops the connection without an answer; nothing else is affected.
		for _, b := range [][]byte{
			wire.Header{Version: 1, Op: wire.OpPing, RequestID: 1}.Append(nil)[:10],
			frame(wire.Header{Version: 1, Op: wire.OpPing, RequestID: 1, BodyLen: 100}, make([]byte, 40)),
		} {
			c := dialRaw(t, ts.addr)
			c.writeRaw(b)
			c.nc.(*net.TCPConn).CloseWrite()
			c.expectClosed()
		}
	})
	checkHealthy()
	if st := ts.store.Stats(); st.Blocks != 1 {
		t.Fatalf("bad input changed the store: %d blocks", st.Blocks)
	}
}

// TestConnectionFlood opens many more connections than MaxConns. The extra
// ones are closed at once; connections already open keep working.
func TestConnectionFlood(t *testing.T) {
	closed := make(chan struct{}, 256)
	ts := startServer(t, func(c *Config) {
		c.MaxConns = 8
		c.Hooks = &Hooks{ConnClosed: func() { closed <- struct{}{} }}
	})
	healthy := helloConn(t, ts.addr, "acme")
	var flood []*rawConn
	for range 7 {
		flood = append(flood, helloConn(t, ts.addr, "flood"))
	}
	for range 50 {
		c := dialRaw(t, ts.addr)
		c.expectClosed()
	}
	healthy.roundTrip(wire.OpPing, []byte("still here"))
	for _, c := range flood {
		c.nc.Close()
	}
	for range flood {
		<-closed
	}
	helloConn(t, ts.addr, "after").roundTrip(wire.OpPing, nil)
	if n := ts.srv.stats.connsRejected.Load(); n != 50 {
		t.Fatalf("rejected %d connections, want 50", n)
	}
}

// TestSlowReaderDoesNotBlockOthers: a client that pipelines large GETs and
// never reads stalls only itself; its connection is closed by the write
// deadline, and its pins and slots are released.
func TestSlowReaderDoesNotBlockOthers(t *testing.T) {
	closed := make(chan struct{}, 4)
	ts := startServer(t, func(c *Config) {
		c.WriteTimeout = 300 * time.Millisecond
		c.Limits.MaxInFlight = 4
		c.Hooks = &Hooks{ConnClosed: func() { closed <- struct{}{} }}
	})
	blob := mustCanonical(t, testNamespace("acme"))
	w := helloConn(t, ts.addr, "acme")
	key := mustKey(t, testID(42))
	w.put(blob, testID(42), testfix.Payload(1<<20, 4))

	slow := helloConn(t, ts.addr, "acme")
	g := wire.GetRequest{Namespace: blob, Keys: []wire.Key{key}}
	req := g.AppendTo(nil)
	for range 64 { // 64 MiB of responses against a few MiB of socket buffers
		slow.nc.SetWriteDeadline(time.Now().Add(5 * time.Second))
		id := slow.id + 1
		slow.id = id
		h := wire.Header{Version: 1, Op: wire.OpGet, RequestID: id, BodyLen: uint32(len(req))}
		if _, err := slow.nc.Write(append(h.Append(nil), req...)); err != nil {
			break // the server stopped reading: backpressure
		}
	}
	// Meanwhile another client is served.
	for range 5 {
		resp, payload, _ := w.get(blob, 0, key)
		if resp.Blocks[0].Status != wire.StatusHit {
			t.Fatal("healthy client missed")
		}
		equalBytes(t, payload, testfix.Payload(1<<20, 4))
	}
	<-closed // the slow connection hit its write deadline
	w.roundTrip(wire.OpPing, nil)
	if st := ts.store.Stats(); st.Pinned != 0 {
		t.Fatalf("%d blocks still pinned after the slow connection closed", st.Pinned)
	}
}

// TestShutdownDrainsInFlight holds a GET response in the writer, starts
// Shutdown, and checks the response is still delivered, the connection is
// then closed, and leases are released.
func TestShutdownDrainsInFlight(t *testing.T) {
	var armed atomic.Bool
	blocked := make(chan struct{})
	gate := make(chan struct{})
	ts := startServer(t, func(c *Config) {
		c.Hooks = &Hooks{BeforeWrite: func() {
			if armed.CompareAndSwap(true, false) {
				close(blocked)
				<-gate
			}
		}}
	})
	c := helloConn(t, ts.addr, "acme")
	blob := mustCanonical(t, testNamespace("acme"))
	key := mustKey(t, testID(5))
	c.put(blob, testID(5), testfix.Payload(64<<10, 5))
	lk := wire.LookupRequest{Namespace: blob, LeaseTTLMillis: 30000, Keys: []wire.Key{key}}
	_, body := c.roundTrip(wire.OpLookup, lk.AppendTo(nil))
	var lr wire.LookupResponse
	if err := lr.Decode(body); err != nil || lr.LeaseID == 0 {
		t.Fatalf("lookup %+v %v", lr, err)
	}

	armed.Store(true)
	g := wire.GetRequest{Namespace: blob, Keys: []wire.Key{key}}
	c.send(wire.OpGet, g.AppendTo(nil))
	<-blocked // the GET was read and its response is about to be written
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- ts.srv.Shutdown(ctx) }()
	close(gate)
	h, payload := c.recv()
	if h.Op != wire.OpGet || h.Flags&wire.FlagError != 0 || len(payload) < 64<<10 {
		t.Fatalf("in-flight GET not delivered: %+v", h)
	}
	c.expectClosed()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if st := ts.store.Stats(); st.LeasesActive != 0 || st.Pinned != 0 {
		t.Fatalf("after shutdown: %d leases, %d pinned", st.LeasesActive, st.Pinned)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := ts.srv.Serve(ln); !errors.Is(err, ErrClosed) {
		t.Fatalf("Serve after Shutdown: %v", err)
	}
}

// TestGetNeverExceedsMaxFrame: hits past the frame limit are answered MISS,
// so the response fits the limit announced in HELLO.
func TestGetNeverExceedsMaxFrame(t *testing.T) {
	ts := startServer(t, func(c *Config) { c.Limits.MaxFrame = 1<<20 + 4096 })
	c := helloConn(t, ts.addr, "acme")
	blob := mustCanonical(t, testNamespace("acme"))
	k1, k2 := mustKey(t, testID(1)), mustKey(t, testID(2))
	c.put(blob, testID(1), testfix.Payload(1<<20, 1))
	c.put(blob, testID(2), testfix.Payload(1<<20, 2))
	resp, payload, h := c.get(blob, 0, k1, k2)
	if resp.Blocks[0].Status != wire.StatusHit || resp.Blocks[1].Status != wire.StatusMiss {
		t.Fatalf("statuses %v, want HIT then MISS", resp.Blocks)
	}
	if h.BodyLen > 1<<20+4096 {
		t.Fatalf("frame body %d exceeds MaxFrame", h.BodyLen)
	}
	equalBytes(t, payload, testfix.Payload(1<<20, 1))
	if st := ts.store.Stats(); st.Pinned != 0 {
		c.roundTrip(wire.OpPing, nil)
		if st := ts.store.Stats(); st.Pinned != 0 {
			t.Fatalf("%d blocks left pinned", st.Pinned)
		}
	}
}

// TestPutKeyMustDeriveFromIdentity: the server recomputes every PUT and
// FILL_COMMIT block's key from its identity (namespace, parent, position,
// token ids, valid length) and refuses, KEY_MISMATCH with nothing stored,
// a key that does not derive from it or an identity that is invalid.
func TestPutKeyMustDeriveFromIdentity(t *testing.T) {
	type stored struct {
		id  identity.CacheIdentity
		ns  []byte
		key identity.BlockKey
	}
	var mu sync.Mutex // Lower.Stored runs on the connection's reader goroutine
	var seen []stored
	seenNow := func() []stored {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(seen)
	}
	ts := startServer(t, func(c *Config) {
		c.Lower = &tierFuncs{stored: func(id identity.CacheIdentity, _ identity.NamespaceDigest, _ identity.BlockKey) {
			// Copy: id.Tokens alias connection buffers.
			id.Tokens = append([]uint32(nil), id.Tokens...)
			k, _ := id.Key()
			ns, _ := id.Namespace.Canonical()
			mu.Lock()
			seen = append(seen, stored{id: id, ns: ns, key: k})
			mu.Unlock()
		}}
	})
	c := helloConn(t, ts.addr, "acme")
	ns := testNamespace("acme")
	blob := mustCanonical(t, ns)
	ids, err := identity.Identities(ns, seqTokens(40))
	if err != nil {
		t.Fatal(err)
	}
	k0, k1 := mustKey(t, ids[0]), mustKey(t, ids[1])
	payload := testfix.Payload(20<<10, 1)
	miss := func(k identity.BlockKey) {
		t.Helper()
		if resp, _, _ := c.get(blob, 0, k); resp.Blocks[0].Status != wire.StatusMiss {
			t.Fatalf("key %s: %s, want MISS: a refused block was stored", k, resp.Blocks[0].Status)
		}
	}
	with := func(f func(*identity.CacheIdentity)) identity.CacheIdentity {
		id := ids[1]
		id.Tokens = append([]uint32(nil), id.Tokens...)
		f(&id)
		return id
	}
	dig, err := ns.Digest()
	if err != nil {
		t.Fatal(err)
	}
	rawKey := func(id identity.CacheIdentity) identity.BlockKey {
		return identity.KeyFor(dig, id.Parent, id.Tokens, id.ValidLength)
	}
	noParent := with(func(id *identity.CacheIdentity) { id.Parent = identity.BlockKey{} })
	long := with(func(id *identity.CacheIdentity) { id.Tokens = append(id.Tokens, seqTokens(17)...); id.ValidLength = 33 })
	cases := []struct {
		name string
		key  identity.BlockKey
		id   identity.CacheIdentity
	}{
		{"another block's key", k0, ids[1]},
		{"a token changed", k1, with(func(id *identity.CacheIdentity) { id.Tokens[3]++ })},
		{"valid length changed", k1, with(func(id *identity.CacheIdentity) { id.ValidLength-- })},
		{"valid length zero", k1, with(func(id *identity.CacheIdentity) { id.ValidLength = 0 })},
		{"wrong parent", k1, with(func(id *identity.CacheIdentity) { id.Parent = identity.BlockKey{7} })},
		{"parent at position 0", k1, with(func(id *identity.CacheIdentity) { id.Position = 0 })},
		// Keys that do derive from the claimed tokens, but the identity is
		// invalid.
		{"no parent past position 0", rawKey(noParent), noParent},
		{"position not a block multiple", k1, with(func(id *identity.CacheIdentity) { id.Position = 17 })},
		{"more tokens than block_tokens", rawKey(long), long},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if st := c.putAs(blob, tc.key, tc.id, payload); st != wire.StatusKeyMismatch {
				t.Fatalf("PUT: %s, want KEY_MISMATCH", st)
			}
			miss(tc.key)
		})
	}
	if n := len(seenNow()); n != 0 {
		t.Fatalf("Lower.Stored called for %d refused blocks", n)
	}
	// The stream stayed in sync; the correct identities are stored, and
	// Lower.Stored sees each one with its namespace.
	for i, id := range ids {
		if st := c.put(blob, id, payload); st != wire.StatusStored {
			t.Fatalf("block %d: %s, want STORED", i, st)
		}
	}
	got := seenNow()
	if len(got) != len(ids) {
		t.Fatalf("Lower.Stored called %d times for %d blocks", len(got), len(ids))
	}
	for i, s := range got {
		if s.key != mustKey(t, ids[i]) || s.id.Position != ids[i].Position || !bytes.Equal(s.ns, blob) {
			t.Fatalf("Lower.Stored %d: %+v", i, s)
		}
	}
	_, body := c.roundTrip(wire.OpStat, nil)
	var st wire.StatResponse
	if err := st.Decode(body); err != nil {
		t.Fatal(err)
	}
	for _, e := range st.Entries {
		if e.Name == "key_mismatches" && e.Value != uint64(len(cases)) {
			t.Fatalf("key_mismatches = %d, want %d", e.Value, len(cases))
		}
	}

	// FILL_COMMIT verifies too: a mismatched commit stores nothing and the
	// turn passes on.
	a, b := helloConn(t, ts.addr, "acme"), helloConn(t, ts.addr, "acme")
	id := testID(77)
	key := mustKey(t, id)
	la := a.acquire(blob, key)[0]
	jb := b.acquire(blob, key)[0]
	if st := a.commitAs(blob, la.Token, key, testID(78), payload); st != wire.StatusKeyMismatch {
		t.Fatalf("commit: %s, want KEY_MISMATCH", st)
	}
	if resp, _, _ := a.get(blob, 0, key); resp.Blocks[0].Status != wire.StatusMiss {
		t.Fatal("a mismatched commit stored bytes")
	}
	n := b.wait(blob, 5*time.Second, jb.Token.Fill)[0]
	if n.Kind != wire.NoticePromoted {
		t.Fatalf("notice %+v, want PROMOTED", n)
	}
	if st := b.commit(blob, n.Token, id, payload); st != wire.StatusStored {
		t.Fatalf("promoted commit: %s", st)
	}
}

// seqTokens returns n distinct token ids.
func seqTokens(n int) []uint32 {
	ids := make([]uint32, n)
	for i := range ids {
		ids[i] = uint32(1000 + i)
	}
	return ids
}
