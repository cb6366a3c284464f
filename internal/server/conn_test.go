package server

import (
	"encoding/binary"
	"net"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gpucache/gpucache/api/identity"
	"github.com/gpucache/gpucache/api/wire"
	"github.com/gpucache/gpucache/internal/reqbuf"
	"github.com/gpucache/gpucache/internal/security"
	"github.com/gpucache/gpucache/internal/security/antireplay"
	"github.com/gpucache/gpucache/internal/testfix"
)

var (
	srcA = net.IPv4(127, 0, 0, 1)
	srcB = net.IPv4(127, 0, 0, 2)
)

// TestAcceptErrorsBackOff: accept failing with EMFILE (out of file
// descriptors) does not end Serve: the server backs off, counts the
// errors, and serves the next connection.
func TestAcceptErrorsBackOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := startBubble(t, nil)
		defer b.Stop(t)
		for range 5 {
			select {
			case b.ln.accepts <- acceptResult{err: errEMFILE}:
			case err := <-b.served:
				b.served <- err
				t.Fatalf("Serve returned after an accept error: %v", err)
			}
		}
		c := b.pipeHello(t, srcA, "acme")
		c.roundTrip(wire.OpPing, []byte("still serving"))
		if n := statValue(b.srv, "accept_errors"); n != 5 {
			t.Fatalf("accept_errors = %d, want 5", n)
		}
	})
}

// TestServeEndsOnClosedListener: a listener closed under Serve (not by
// Shutdown) ends Serve with net.ErrClosed; only that and Shutdown do.
func TestServeEndsOnClosedListener(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := startBubble(t, nil)
		b.ln.Fail(errEMFILE)
		b.ln.Close()
		if err := <-b.served; err == nil {
			t.Fatal("Serve on a closed listener returned nil")
		}
		b.served <- nil
		b.Stop(t)
	})
}

// TestHelloDeadline: a connection that does not complete HELLO within the
// handshake deadline is closed, long before the idle timeout; PING does
// not extend it. A session that said HELLO is held to the idle timeout
// only.
func TestHelloDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := startBubble(t, func(c *Config) { c.IdleTimeout = time.Hour })
		defer b.Stop(t)
		start := time.Now()
		silent := b.ln.Dial(t, srcA)
		silentClosed := closedByServer(silent)
		pinger := pipeRaw(t, b.ln.Dial(t, srcA))
		pinger.roundTrip(wire.OpPing, nil)
		pingerClosed := closedByServer(pinger.nc)
		ok := b.pipeHello(t, srcA, "acme")
		okClosed := closedByServer(ok.nc)

		synctest.Wait()
		if isClosed(silentClosed) || isClosed(pingerClosed) {
			t.Fatal("closed before the hello deadline")
		}
		time.Sleep(defaultHelloTimeout) // fake time: the deadline passes
		synctest.Wait()
		if !isClosed(silentClosed) || !isClosed(pingerClosed) {
			t.Fatalf("unauthenticated connections still open %v after accept", time.Since(start))
		}
		if isClosed(okClosed) {
			t.Fatal("a session that said HELLO was closed by the hello deadline")
		}
		if n := statValue(b.srv, "conns_hello_timeouts"); n != 2 {
			t.Fatalf("conns_hello_timeouts = %d, want 2", n)
		}
		ok.nc.Close()
	})
}

// TestFrameStartedIsTimed: once the first byte of a header has arrived,
// the rest of the frame must arrive within the read timeout, not the idle
// timeout.
func TestFrameStartedIsTimed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := startBubble(t, func(c *Config) {
			c.IdleTimeout = time.Hour
			c.ReadTimeout = 2 * time.Second
		})
		defer b.Stop(t)
		partialHeader := b.pipeHello(t, srcA, "acme")
		partialBody := b.pipeHello(t, srcA, "acme")
		idle := b.pipeHello(t, srcA, "acme")
		hdr := wire.Header{Version: wire.FrameVersion, Op: wire.OpPing, RequestID: 9, BodyLen: 10}.Append(nil)
		partialHeader.writeRaw(hdr[:5])
		partialBody.writeRaw(append(hdr, 1, 2, 3))
		closed := []<-chan struct{}{closedByServer(partialHeader.nc), closedByServer(partialBody.nc)}
		idleClosed := closedByServer(idle.nc)
		time.Sleep(2*time.Second - time.Millisecond)
		synctest.Wait()
		for i, ch := range closed {
			if isClosed(ch) {
				t.Fatalf("frame %d closed before the read timeout", i)
			}
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		for i, ch := range closed {
			if !isClosed(ch) {
				t.Fatalf("frame %d started %v ago is still open", i, 2*time.Second)
			}
		}
		if isClosed(idleClosed) {
			t.Fatal("an idle session was closed by the read timeout")
		}
		idle.nc.Close()
	})
}

// TestSilentConnectionsDoNotLockOut: 350 connections from one address that
// never say HELLO cannot take the slots of a server with max_conns 300: a
// valid tenant from another address gets in at once.
func TestSilentConnectionsDoNotLockOut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := startBubble(t, func(c *Config) { c.MaxConns = 300 })
		defer b.Stop(t)
		var silent []net.Conn
		for range 350 {
			silent = append(silent, b.ln.Dial(t, srcB))
		}
		synctest.Wait()
		c := b.pipeHello(t, srcA, "acme")
		c.roundTrip(wire.OpPing, []byte("in"))
		if n := statValue(b.srv, "conns_rejected_unauth"); n != 350-defaultMaxUnauthPerAddr {
			t.Fatalf("conns_rejected_unauth = %d, want %d", n, 350-defaultMaxUnauthPerAddr)
		}
		// HELLO frees the address's unauthenticated slot.
		if n := statValue(b.srv, "conns_unauthenticated"); n != defaultMaxUnauthPerAddr {
			t.Fatalf("conns_unauthenticated = %d, want %d", n, defaultMaxUnauthPerAddr)
		}
		for _, s := range silent {
			s.Close()
		}
		c.nc.Close()
	})
}

// TestReadOnlyPutTableNotRead: a tenant without write rights that declares
// a huge PUT table is refused on its namespace, before the server reads (or
// sizes a buffer for) the rest of the table.
func TestReadOnlyPutTableNotRead(t *testing.T) {
	for _, op := range []wire.Opcode{wire.OpPut, wire.OpFillCommit} {
		t.Run(op.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				w, err := antireplay.New(antireplay.Config{Window: 5 * time.Minute, MaxNonces: 1024})
				if err != nil {
					t.Fatal(err)
				}
				g, err := security.NewGuard(testPolicy(t, testTenants(), nil), w, nil, nil)
				if err != nil {
					t.Fatal(err)
				}
				b := startBubble(t, func(c *Config) { c.Guard = g })
				defer b.Stop(t)
				c := &authConn{rawConn: pipeRaw(t, b.ln.Dial(t, srcA)), now: time.Now}
				if _, e := c.hello("", secretGamma); e != nil {
					t.Fatalf("hello: %v", e)
				}
				blob := mustCanonical(t, testNamespace("gamma"))
				const tableLen = 4 << 20 // declared, never sent
				prefix := binary.LittleEndian.AppendUint32(nil, tableLen)
				prefix = binary.LittleEndian.AppendUint32(prefix, uint32(len(blob)))
				prefix = append(prefix, blob...)
				stamp := freshStamp(time.Now()).Append(nil)
				body := append(stamp, prefix...)
				h := wire.Header{Version: wire.FrameVersion, Op: op, Flags: wire.FlagStamped, RequestID: 1,
					BodyLen: uint32(len(stamp)) + 4 + tableLen + 64}
				c.writeRaw(append(h.Append(nil), body...)) // returns once the server read it all
				synctest.Wait()
				if n := b.srv.stats.denied.Load(); n != 1 {
					t.Fatalf("denied = %d before the table was sent, want 1: the server waits to read the table first", n)
				}
				c.nc.Close()
			})
		})
	}
}

// statValue returns the STAT entry name of srv, or fails.
func statValue(srv *Server, name string) uint64 {
	for _, e := range srv.Stats() {
		if e.Name == name {
			return e.Value
		}
	}
	panic("no STAT entry " + name)
}

// bigTablePrefix is the start of an op body whose table declares tableLen
// bytes: the table length, the namespace blob, then fill bytes of the
// table (never completed by the callers).
func bigTablePrefix(op wire.Opcode, id uint64, blob []byte, tableLen uint32, fill int) []byte {
	h := wire.Header{Version: wire.FrameVersion, Op: op, RequestID: id, BodyLen: 4 + tableLen + 4096}
	b := h.Append(nil)
	b = binary.LittleEndian.AppendUint32(b, tableLen)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(blob)))
	b = append(b, blob...)
	return append(b, make([]byte, fill)...)
}

// TestRequestBuffersBounded: connections that declare 4 MiB tables and
// stall after sending 1 MiB of them take no more than the request-buffer
// budget between them; those that cannot get budget are refused after
// BufferWait, a small request needs no budget and is served during the
// attack, and every byte of budget comes back when the stalled
// connections time out.
func TestRequestBuffersBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const budget = 12 << 20
		b := startBubble(t, func(c *Config) {
			c.RequestBuffers = budget
			c.ReadTimeout = 30 * time.Second
			c.IdleTimeout = time.Hour
		})
		defer b.Stop(t)
		blob := mustCanonical(t, testNamespace("acme"))
		const attackers = 16
		conns, writers := b.stallTables(t, "acme", blob, attackers, false)
		synctest.Wait()
		if used := b.srv.bufs.InUse(); used > budget || used == 0 {
			t.Fatalf("request buffers hold %d bytes, want 1..%d", used, budget)
		}
		if statValue(b.srv, "request_buffer_waits") == 0 {
			t.Fatal("no request waited for budget")
		}
		// A usual request needs no budget and is served now.
		ok := b.pipeHello(t, srcA, "acme")
		if st := ok.put(blob, testID(1), testfix.Payload(16<<10, 1)); st != wire.StatusStored {
			t.Fatalf("small PUT during the attack: %v", st)
		}
		time.Sleep(time.Second) // BufferWait passes for those still waiting
		synctest.Wait()
		refused := statValue(b.srv, "request_buffer_refused")
		if refused == 0 {
			t.Fatal("no request was refused for want of budget")
		}
		writers.Wait() // every byte sent was read: held or skipped
		if used := b.srv.bufs.InUse(); used > budget {
			t.Fatalf("request buffers hold %d bytes, over the %d budget", used, budget)
		}
		time.Sleep(30 * time.Second) // the stalled frames' read timeout
		synctest.Wait()
		if used := b.srv.bufs.InUse(); used != 0 {
			t.Fatalf("%d bytes of budget still held after the stalled connections closed", used)
		}
		for _, c := range conns {
			c.nc.Close()
		}
		// With the budget back, a large table is served again.
		ids, payloads := chain(200)
		for i, st := range ok.putMany(blob, ids, payloads) {
			if st != wire.StatusStored {
				t.Fatalf("large PUT after the attack: block %d %v", i, st)
			}
		}
		synctest.Wait()
		if used := b.srv.bufs.InUse(); used != 0 {
			t.Fatalf("%d bytes of budget held by an idle connection", used)
		}
		ok.nc.Close()
	})
}

// chain returns n consecutive block identities of one chain (a PUT table
// of about n × 160 bytes) and their payloads.
func chain(n int) ([]identity.CacheIdentity, [][]byte) {
	var ids []identity.CacheIdentity
	var payloads [][]byte
	var parent identity.BlockKey
	for i := range n {
		id := testID(uint32(1000 + i))
		id.Parent, id.Position = parent, uint64(16*i)
		k, _ := id.Key()
		ids = append(ids, id)
		payloads = append(payloads, testfix.Payload(64, byte(i)))
		parent = k
	}
	return ids, payloads
}

// TestRequestBufferReleasedWhenIdle: a request body above reqbuf.Keep is
// charged while it is read and given back once the connection is idle;
// pipelined requests keep the buffer until the last is read.
func TestRequestBufferReleasedWhenIdle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := startBubble(t, nil)
		defer b.Stop(t)
		blob := mustCanonical(t, testNamespace("acme"))
		c := b.pipeHello(t, srcA, "acme")
		g := wire.GetRequest{Namespace: blob, Keys: make([]wire.Key, 1000)} // ~32 KiB body
		body := g.AppendTo(nil)
		if len(body) <= reqbuf.Keep {
			t.Fatalf("GET body of %d bytes does not exceed reqbuf.Keep", len(body))
		}
		c.roundTrip(wire.OpGet, body)
		synctest.Wait()
		if used := b.srv.bufs.InUse(); used != 0 {
			t.Fatalf("%d bytes of request buffers held by an idle connection", used)
		}
		c.nc.Close()
	})
}

// TestQueuedGetResponsesCharged: large GET responses waiting for a client
// that does not read are paid from the request-buffer budget, and the
// budget comes back once they are written.
func TestQueuedGetResponsesCharged(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := startBubble(t, nil)
		defer b.Stop(t)
		blob := mustCanonical(t, testNamespace("acme"))
		c := b.pipeHello(t, srcA, "acme")
		g := wire.GetRequest{Namespace: blob, Keys: make([]wire.Key, 1000)}
		body := g.AppendTo(nil)
		const n = 4
		go func() {
			for range n {
				c.send(wire.OpGet, body) // the server reads each; the client reads no answer yet
			}
		}()
		synctest.Wait()
		// The reader writes the first answer itself and blocks on the
		// client: at least that one is charged while it waits.
		if used, min := b.srv.bufs.InUse(), reqbuf.ResponseCost(1000); used < min {
			t.Fatalf("%d bytes charged while a 1000-key GET response waits, want >= %d", used, min)
		}
		for range n {
			c.recv()
		}
		synctest.Wait()
		if used := b.srv.bufs.InUse(); used != 0 {
			t.Fatalf("%d bytes still charged after the responses were written", used)
		}
		c.nc.Close()
	})
}

// TestParkedWaitCharged: a parked WAIT holds budget until it is answered.
func TestParkedWaitCharged(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := startBubble(t, nil)
		defer b.Stop(t)
		blob := mustCanonical(t, testNamespace("acme"))
		id := testID(9)
		key := mustKey(t, id)
		leader, joiner := b.pipeHello(t, srcA, "acme"), b.pipeHello(t, srcA, "acme")
		lead := leader.acquire(blob, key)[0]
		join := joiner.acquire(blob, key)[0]
		if lead.Outcome != wire.AcquireLead || join.Outcome != wire.AcquireJoined {
			t.Fatalf("acquire: %+v / %+v", lead, join)
		}
		req := wire.WaitRequest{Namespace: blob, TimeoutMillis: 10000, Fills: []uint64{join.Token.Fill}}
		joiner.send(wire.OpWait, req.AppendTo(nil))
		synctest.Wait()
		if used := b.srv.bufs.InUse(); used != reqbuf.WaitCost(1) {
			t.Fatalf("parked WAIT holds %d bytes of budget, want %d", used, reqbuf.WaitCost(1))
		}
		if st := leader.commit(blob, lead.Token, id, testfix.Payload(20<<10, 3)); st != wire.StatusStored {
			t.Fatalf("commit: %s", st)
		}
		joiner.recv()
		synctest.Wait()
		if used := b.srv.bufs.InUse(); used != 0 {
			t.Fatalf("answered WAIT still holds %d bytes of budget", used)
		}
		leader.nc.Close()
		joiner.nc.Close()
	})
}

// stallTables opens n sessions of tenant from srcA, each sending a PUT or
// FILL_COMMIT (alternately) that declares a 4 MiB table, sends 1 MiB of it
// and stalls. The writes block while the server waits for request-buffer
// budget; writers is done when every byte sent has been read. With
// settleEach, the bubble settles after each connection, so each takes what
// it can before the next starts.
func (b *bubbleServer) stallTables(t *testing.T, tenant string, blob []byte, n int, settleEach bool) (conns []*rawConn, writers *sync.WaitGroup) {
	t.Helper()
	writers = &sync.WaitGroup{}
	for i := range n {
		c := b.pipeHello(t, srcA, tenant)
		conns = append(conns, c)
		op := wire.OpPut
		if i%2 == 1 {
			op = wire.OpFillCommit
		}
		frame := bigTablePrefix(op, 7, blob, 4<<20, 1<<20)
		writers.Go(func() {
			c.nc.Write(frame) // blocks while the server waits for budget
		})
		if settleEach {
			synctest.Wait()
		}
	}
	return conns, writers
}
