package server

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gpucache/gpucache/api/identity"
	"github.com/gpucache/gpucache/api/wire"
	"github.com/gpucache/gpucache/internal/reqbuf"
	"github.com/gpucache/gpucache/internal/testfix"
)

// bufferShareConfig is the server of the request-buffer share tests: a
// 32 MiB request-buffer budget, so the default share of a tenant is about
// 16 MiB (open mode: half of what the pre-session bucket leaves).
func bufferShareConfig(c *Config) {
	c.RequestBuffers = 32 << 20
	c.ReadTimeout = 30 * time.Second
	c.IdleTimeout = time.Hour
}

// tableOutcome is what a request with a large table got: how many of each
// status, or its error code.
func tableOutcome(c *rawConn, op wire.Opcode, body []byte) string {
	c.t.Helper()
	h, resp := c.roundTrip(op, body)
	if h.Flags&wire.FlagError != 0 {
		e := decodeErr(c.t, resp)
		return fmt.Sprintf("error %s retry-after %v", e.Code, e.RetryAfter)
	}
	var st wire.StatusResponse
	if err := st.Decode(resp, wire.DefaultMaxBatch); err != nil {
		c.t.Fatalf("%s response: %v", op, err)
	}
	counts := map[wire.Status]int{}
	for _, s := range st.Statuses {
		counts[s]++
	}
	return fmt.Sprint(counts)
}

// largePut is a PUT of n chained blocks of tenant's namespace: a table of
// about n × 160 bytes, more than reqbuf.Keep for n of 200, so it is paid from
// the request-buffer budget.
func largePut(t *testing.T, tenant string, seed uint32, n int) ([]byte, []identity.CacheIdentity, [][]byte) {
	t.Helper()
	ids := tenantChain(t, tenant, seed, n)
	payloads := make([][]byte, n)
	blocks := make([]wire.PutBlock, n)
	for i, id := range ids {
		payloads[i] = testfix.Payload(64, byte(i))
		blocks[i] = putBlock(mustKey(t, id), id, len(payloads[i]))
	}
	body := putBody(mustCanonical(t, testNamespace(tenant)), blocks, payloads)
	if len(body) <= reqbuf.Keep {
		t.Fatalf("PUT body of %d bytes does not exceed reqbuf.Keep", len(body))
	}
	return body, ids, payloads
}

// betaBufferScript is tenant beta's fixed script of large requests: a PUT
// of 200 blocks (a 32 KiB table), a GET of all of them (a response paid
// from the budget), and a second large PUT, of new blocks for each seed.
// It returns what beta saw.
func betaBufferScript(t *testing.T, b *bubbleServer, seed uint32) []string {
	t.Helper()
	var out []string
	c := b.pipeHello(t, srcB, "beta")
	defer c.nc.Close()
	body, ids, payloads := largePut(t, "beta", seed, 200)
	out = append(out, "put: "+tableOutcome(c, wire.OpPut, body))
	keys := make([]identity.BlockKey, len(ids))
	for i := range ids {
		keys[i] = mustKey(t, ids[i])
	}
	wk := make([]wire.Key, len(ids))
	for i := range ids {
		wk[i] = mustKey(t, ids[i])
	}
	req := wire.GetRequest{Namespace: mustCanonical(t, testNamespace("beta")), Keys: wk}
	h, resp := c.roundTrip(wire.OpGet, req.AppendTo(nil))
	if h.Flags&wire.FlagError != 0 {
		out = append(out, "get: error "+decodeErr(t, resp).Code.String())
	} else {
		metaLen := binary.LittleEndian.Uint32(resp)
		var g wire.GetResponse
		if _, err := g.Decode(resp[4:4+metaLen], wire.DefaultMaxBatch); err != nil {
			t.Fatalf("get table: %v", err)
		}
		hits := 0
		for _, blk := range g.Blocks {
			if blk.Status == wire.StatusHit {
				hits++
			}
		}
		out = append(out, fmt.Sprintf("get: %d hits, intact %v", hits, bytes.Equal(resp[4+metaLen:], bytes.Join(payloads, nil))))
	}
	body, _, _ = largePut(t, "beta", seed+1, 300)
	out = append(out, "put again: "+tableOutcome(c, wire.OpPut, body))
	return out
}

// TestTenantAtItsBufferShareDoesNotStarveAnother is the request-buffer
// part of the rule that one tenant at its bound never changes
// another tenant's results. Tenant acme stalls large PUT and FILL_COMMIT
// tables (each declares 4 MiB and sends 1 MiB of it), one connection after
// another, until its requests wait for budget. With one budget shared by
// every tenant acme held all of it and beta's large PUT answered
// RATE_LIMITED after BufferWait; with per-tenant shares acme stops at its
// share and beta's script gets exactly what it gets on a server of its own.
func TestTenantAtItsBufferShareDoesNotStarveAnother(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		alone := startBubble(t, bufferShareConfig)
		want := betaBufferScript(t, alone, 1)
		alone.Stop(t)

		b := startBubble(t, bufferShareConfig)
		defer b.Stop(t)
		blob := mustCanonical(t, testNamespace("acme"))
		stalled, writers := b.stallTables(t, "acme", blob, 24, true) // 48 MiB wanted: more than the whole budget
		if statValue(b.srv, "request_buffer_waits") == 0 {
			t.Fatal("no request of acme waited for budget")
		}
		// acme is at its share: the next growth (at most 1 MiB) does not fit.
		_, share := b.srv.RequestBuffers()
		if held := b.srv.bufs.HeldBy("acme"); held > share || held <= share-(1<<20) {
			t.Fatalf("acme holds %d bytes of request buffers; want its share %d, less at most one growth", held, share)
		}
		if share > (32<<20)/2 || share < reqbuf.MaxRequestCost(b.srv.Limits()) {
			t.Fatalf("default share %d: want at most half the budget and at least the largest request", share)
		}

		got := betaBufferScript(t, b, 1)
		if !slices.Equal(got, want) {
			t.Errorf("tenant beta's answers changed while acme held its share:\n have %q\n want %q", got, want)
		}

		// acme's waiting tables wait BufferWait and are refused at its share
		// (RATE_LIMITED), and a refused table gives back what it held at
		// once, though its rest never comes: acme's next request is served
		// from that, not starved by its own refused tables until
		// read_timeout.
		time.Sleep(defaultBufferWait + time.Millisecond)
		synctest.Wait()
		if statValue(b.srv, "request_buffer_share_refused") == 0 {
			t.Fatal("no refusal counted at the tenant's share")
		}
		if held := b.srv.bufs.HeldBy("acme"); held >= share {
			t.Fatalf("acme holds %d bytes after its waiting tables were refused; want what they held given back (share %d)", held, share)
		}
		a := b.pipeHello(t, srcA, "acme")
		body, _, _ := largePut(t, "acme", 3, 200)
		if h, resp := a.roundTrip(wire.OpPut, body); h.Flags&wire.FlagError != 0 {
			t.Fatalf("acme's large PUT after its refused tables gave their budget back: %v", decodeErr(t, resp))
		}
		if got := betaBufferScript(t, b, 3); !slices.Equal(got, want) {
			t.Errorf("tenant beta's answers changed after acme was refused:\n have %q\n want %q", got, want)
		}
		a.nc.Close()

		for _, c := range stalled {
			c.nc.Close()
		}
		writers.Wait()
	})
}

// TestPreSessionBuffersBounded: bodies sent before HELLO succeeds are paid
// from the pre-session bucket only. Connections from many addresses that
// send large PING bodies and stall hold at most that bucket, the next one
// waits and is refused, and a HELLO (too small to need budget) and a
// tenant's large PUT are served meanwhile. The bucket comes back when the
// stalled connections reach their hello deadline.
func TestPreSessionBuffersBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := startBubble(t, bufferShareConfig)
		defer b.Stop(t)
		limit := int64(statValue(b.srv, "request_buffer_presession_limit_bytes"))
		body := reqbuf.ControlBodyMax(b.srv.Limits())
		if int64(body) <= reqbuf.Keep || limit != reqbuf.PreSessionBodies*int64(body) {
			t.Fatalf("pre-session bucket %d for bodies of at most %d bytes", limit, body)
		}
		var writers sync.WaitGroup
		var conns []net.Conn
		for i := range 8 { // each holds 32 KiB: more than the bucket holds
			nc := b.ln.Dial(t, net.IPv4(10, 0, 0, byte(1+i)))
			conns = append(conns, nc)
			h := wire.Header{Version: wire.FrameVersion, Op: wire.OpPing, RequestID: 1, BodyLen: body}
			frame := append(h.Append(nil), make([]byte, 20<<10)...) // and no more
			writers.Add(1)
			go func() {
				defer writers.Done()
				nc.Write(frame)
			}()
			synctest.Wait()
		}
		if held := int64(statValue(b.srv, "request_buffer_presession_bytes")); held > limit || held == 0 {
			t.Fatalf("pre-session connections hold %d bytes, want 1..%d", held, limit)
		}
		if total := b.srv.bufs.InUse(); total != b.srv.bufs.HeldBy(reqbuf.PreSession) {
			t.Fatalf("%d bytes in use, %d of them pre-session", total, b.srv.bufs.HeldBy(reqbuf.PreSession))
		}
		// Meanwhile a session opens and a tenant's large request is served.
		c := b.pipeHello(t, srcB, "beta")
		put, _, _ := largePut(t, "beta", 1, 200)
		if got := tableOutcome(c, wire.OpPut, put); got != "map[STORED:200]" {
			t.Fatalf("beta's large PUT while pre-session bodies stall: %s", got)
		}
		time.Sleep(defaultBufferWait)
		synctest.Wait()
		if statValue(b.srv, "request_buffer_share_refused") == 0 {
			t.Fatal("no pre-session body was refused at the bucket")
		}
		time.Sleep(defaultHelloTimeout) // the stalled connections' hello deadline
		synctest.Wait()
		if held := b.srv.bufs.HeldBy(reqbuf.PreSession); held != 0 {
			t.Fatalf("%d bytes still held by closed pre-session connections", held)
		}
		for _, nc := range conns {
			nc.Close()
		}
		writers.Wait()
		c.nc.Close()
	})
}

// TestHelloMovesBuffersToTheTenant: a connection's buffer charged before
// HELLO (a large PING) is given back to the pre-session bucket once the
// session opens, even when the next request is already buffered and the
// buffer would be kept for it: that request's growth is charged to the
// session's tenant.
func TestHelloMovesBuffersToTheTenant(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := startBubble(t, bufferShareConfig)
		defer b.Stop(t)
		c := pipeRaw(t, b.ln.Dial(t, srcA))
		// A large PING, a HELLO and the table of a large PUT (its payloads
		// never follow), in one write.
		frame := wire.Header{Version: wire.FrameVersion, Op: wire.OpPing, RequestID: 1, BodyLen: 20 << 10}.Append(nil)
		frame = append(frame, make([]byte, 20<<10)...)
		hello := (&wire.HelloRequest{MinVersion: 1, MaxVersion: 1, Tenant: "acme", Client: "test"}).AppendTo(nil)
		frame = append(frame, wire.Header{Version: wire.FrameVersion, Op: wire.OpHello, RequestID: 2, BodyLen: uint32(len(hello))}.Append(nil)...)
		frame = append(frame, hello...)
		body, _, _ := largePut(t, "acme", 1, 200)
		table := 4 + binary.LittleEndian.Uint32(body)
		frame = append(frame, wire.Header{Version: wire.FrameVersion, Op: wire.OpPut, RequestID: 3, BodyLen: uint32(len(body))}.Append(nil)...)
		frame = append(frame, body[:table]...)
		go c.nc.Write(frame)
		if h, resp := c.recv(); h.Flags&wire.FlagError == 0 || decodeErr(t, resp).Code != wire.CodeMalformed {
			t.Fatalf("PING of 20 KiB (read, then refused as too long): %+v", h)
		}
		if h, resp := c.recv(); h.Flags&wire.FlagError != 0 {
			t.Fatalf("HELLO: %v", decodeErr(t, resp))
		}
		synctest.Wait()
		if held, pre := b.srv.bufs.HeldBy("acme"), b.srv.bufs.HeldBy(reqbuf.PreSession); held < int64(table) || pre != 0 {
			t.Fatalf("PUT table of %d bytes stalled after HELLO: acme holds %d bytes, pre-session %d", table, held, pre)
		}
		c.nc.Close()
		synctest.Wait()
		if total := b.srv.bufs.InUse(); total != 0 {
			t.Fatalf("%d bytes held after the connection closed", total)
		}
	})
}

// TestSetTenantRequestBuffers: a new share applies to what tenants take
// next; a share below the largest request or above the budget is refused
// and changes nothing.
func TestSetTenantRequestBuffers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := startBubble(t, bufferShareConfig)
		defer b.Stop(t)
		lim := b.srv.Limits()
		total, share := b.srv.RequestBuffers()
		if want := reqbuf.FairShare(32<<20, lim, 2); total != 32<<20 || share != want {
			t.Fatalf("RequestBuffers() = %d, %d; want %d, %d", total, share, 32<<20, want)
		}
		for _, bad := range []int64{reqbuf.MaxRequestCost(lim) - 1, total + 1} {
			if err := b.srv.SetTenantRequestBuffers(bad); !errors.Is(err, ErrConfig) {
				t.Errorf("share %d: %v", bad, err)
			}
		}
		if _, s := b.srv.RequestBuffers(); s != share {
			t.Fatalf("a refused share changed it to %d", s)
		}
		small := reqbuf.MaxRequestCost(lim)
		if err := b.srv.SetTenantRequestBuffers(small); err != nil {
			t.Fatal(err)
		}
		if got := statValue(b.srv, "request_buffer_tenant_limit_bytes"); got != uint64(small) {
			t.Fatalf("request_buffer_tenant_limit_bytes = %d, want %d", got, small)
		}
		// Stalled tables of acme stop at the smaller share.
		blob := mustCanonical(t, testNamespace("acme"))
		var writers sync.WaitGroup
		for range 12 {
			c := b.pipeHello(t, srcA, "acme")
			writers.Add(1)
			go func() {
				defer writers.Done()
				c.nc.Write(bigTablePrefix(wire.OpPut, 7, blob, 4<<20, 1<<20))
			}()
			synctest.Wait()
			defer c.nc.Close()
		}
		if held := b.srv.bufs.HeldBy("acme"); held > small || held <= small-(1<<20) {
			t.Fatalf("acme holds %d bytes with a share of %d", held, small)
		}
		// A larger share lets a waiting request through at once.
		if err := b.srv.SetTenantRequestBuffers(total); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if held := b.srv.bufs.HeldBy("acme"); held <= small {
			t.Fatalf("acme holds %d bytes after its share grew to %d", held, total)
		}
	})
}
