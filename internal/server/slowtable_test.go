package server

import (
	"errors"
	"io"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gpucache/gpucache/api/identity"
	"github.com/gpucache/gpucache/api/wire"
	"github.com/gpucache/gpucache/internal/testfix"
)

// slowPutFrame is a well-formed PUT frame of n chained blocks of
// testNamespace("acme"), each of tokens token ids and a payload of size
// bytes, and the offset where its table ends (the first payload byte).
func slowPutFrame(t *testing.T, n, tokens, size int) (frame []byte, tableEnd int) {
	t.Helper()
	ns := testNamespace("acme")
	ns.Layout.BlockTokens = uint32(tokens)
	blob := mustCanonical(t, ns)
	var blocks []wire.PutBlock
	var payloads [][]byte
	var parent identity.BlockKey
	for i := range n {
		toks := make([]uint32, tokens)
		for j := range toks {
			toks[j] = uint32(i*tokens + j)
		}
		id := identity.CacheIdentity{Namespace: ns, Parent: parent, Position: uint64(i * tokens), Tokens: toks, ValidLength: uint32(tokens)}
		k := mustKey(t, id)
		blocks = append(blocks, putBlock(k, id, size))
		payloads = append(payloads, testfix.Payload(size, byte(i)))
		parent = k
	}
	body := putBody(blob, blocks, payloads)
	h := wire.Header{Version: wire.FrameVersion, Op: wire.OpPut, RequestID: 1, BodyLen: uint32(len(body))}
	frame = append(h.Append(nil), body...)
	return frame, len(frame) - n*size
}

// drip writes b a few bytes at a time, one step of fake time apart, until
// it is all written or a write fails (the server closed the connection).
// It returns how many bytes the server read and the write error.
func drip(c *rawConn, b []byte, chunk int, step time.Duration) (int, error) {
	for off := 0; off < len(b); off += chunk {
		if _, err := c.nc.Write(b[off:min(off+chunk, len(b))]); err != nil {
			return off, err
		}
		time.Sleep(step)
	}
	return len(b), nil
}

// TestSlowTableClosedAtReadTimeout: a well-formed PUT whose namespace is
// valid (so its rights are checked and the server goes on reading) and
// whose bytes keep arriving, a few at a time, is still closed at the read
// timeout counted from its first byte: progress does not extend it. That
// holds while the table arrives (small, inside the connection's own
// buffer, or large, paid from the request-buffer budget) and while its
// payloads do (a hot-tier slot reserved). Everything it held comes back:
// the budget, the slot, its goroutines (goleak); and another session is
// served throughout.
func TestSlowTableClosedAtReadTimeout(t *testing.T) {
	const readTimeout = 5 * time.Second
	const step = 100 * time.Millisecond
	for _, tc := range []struct {
		name           string
		blocks, tokens int
		// head is sent at once; the rest drips from there.
		head func(tableEnd int) int
	}{
		// 8 blocks of 16 tokens: a table of about 1 KiB; the drip starts
		// right after the namespace has been checked.
		{"small table", 8, 16, func(int) int { return wire.HeaderSize + 4 + 4 + 300 }},
		// 64 blocks of 256 tokens: about 70 KiB, above reqbuf.Keep; 40 KiB at
		// once grow the buffer to 64 KiB, paid from the budget.
		{"large table", 64, 256, func(int) int { return 40 << 10 }},
		// The whole table and 100 bytes of the first payload: its slot is
		// reserved, the payload drips into it.
		{"payload", 8, 16, func(tableEnd int) int { return tableEnd + 100 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := startBubble(t, func(c *Config) {
					c.ReadTimeout = readTimeout
					c.IdleTimeout = time.Hour
				})
				defer b.Stop(t)
				other := b.pipeHello(t, srcB, "beta")
				c := b.pipeHello(t, srcA, "acme")
				frame, tableEnd := slowPutFrame(t, tc.blocks, tc.tokens, 16<<10)
				head := tc.head(tableEnd)
				if tc.name != "payload" && head >= tableEnd {
					t.Fatalf("head %d reaches the end of the table %d", head, tableEnd)
				}
				start := time.Now()
				c.writeRaw(frame[:head]) // returns once the server has read it
				synctest.Wait()
				if tc.name == "large table" && b.srv.bufs.InUse() == 0 {
					t.Fatal("a 40 KiB partial table holds no request-buffer budget")
				}
				if tc.name == "payload" && inFlightSlots(b.srv) == 0 {
					t.Fatal("no slot reserved for the dripping payload")
				}
				// Another tenant is served while the drip goes on.
				betaBlob := mustCanonical(t, testNamespace("beta"))
				id := testID(7)
				id.Namespace = testNamespace("beta")
				payload := testfix.Payload(16<<10, 7)
				if st := other.put(betaBlob, id, payload); st != wire.StatusStored {
					t.Fatalf("other tenant's PUT during the drip: %v", st)
				}
				end := tableEnd - 1 // never completes the table
				if tc.name == "payload" {
					end = len(frame) - 1 // never completes the body
				}
				sent, err := drip(c, frame[head:end], 4, step)
				if err == nil {
					t.Fatalf("the server read the whole %d-byte drip over %v; the read timeout is %v", end-head, time.Since(start), readTimeout)
				}
				if !errors.Is(err, io.ErrClosedPipe) {
					t.Fatalf("drip: %v", err)
				}
				if took := time.Since(start); took < readTimeout || took > readTimeout+step {
					t.Fatalf("closed %v after the frame's first byte, want the read timeout %v", took, readTimeout)
				}
				if sent == 0 {
					t.Fatal("nothing dripped before the close")
				}
				synctest.Wait()
				if used := b.srv.bufs.InUse(); used != 0 {
					t.Fatalf("%d bytes of request buffers held after the connection closed", used)
				}
				if n := inFlightSlots(b.srv); n != 0 {
					t.Fatalf("%d bytes of hot-tier slots still reserved for a PUT in flight after the connection closed", n)
				}
				if n := statValue(b.srv, "conns_open"); n != 1 {
					t.Fatalf("conns_open = %d, want the other session only", n)
				}
				resp, got, _ := other.get(betaBlob, 0, mustKey(t, id))
				if len(resp.Blocks) != 1 || resp.Blocks[0].Status != wire.StatusHit {
					t.Fatalf("other tenant's GET after the drip: %+v", resp)
				}
				equalBytes(t, got, payload)
				other.nc.Close()
			})
		})
	}
}

// inFlightSlots is the hot-tier slot bytes of srv reserved for PUTs in
// flight: reserved but not cached.
func inFlightSlots(srv *Server) uint64 {
	return statValue(srv, "hot_bytes_reserved") - statValue(srv, "hot_bytes_cached")
}

// TestRefusedTableGivesBudgetBack: a table refused for want of budget
// gives back the buffer it had grown before the rest of its body is
// skipped. The skip lasts as long as the client takes to send that rest
// (a slow one: up to the read timeout), and budget held meanwhile would
// refuse others for nothing. The stream stays in sync: once the rest has
// arrived the refusal is answered and the session goes on.
func TestRefusedTableGivesBudgetBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const budget = 12 << 20
		b := startBubble(t, func(c *Config) {
			c.RequestBuffers = budget
			c.ReadTimeout = time.Hour
			c.IdleTimeout = time.Hour
		})
		defer b.Stop(t)
		blob := mustCanonical(t, testNamespace("acme"))
		const tableLen = 4 << 20
		// Two holders grow their buffers to 4 MiB each (2 MiB of table
		// sent) and stall.
		for range 2 {
			h := b.pipeHello(t, srcA, "acme")
			h.writeRaw(bigTablePrefix(wire.OpPut, 1, blob, tableLen, 2<<20))
		}
		synctest.Wait()
		if used := b.srv.bufs.InUse(); used != 8<<20 {
			t.Fatalf("holders take %d bytes of budget, want %d", used, 8<<20)
		}
		// The third grows to 2 MiB, then needs 2 MiB more: over the
		// tenant's share (reqbuf.MaxRequestCost, about 10.8 MiB).
		c := b.pipeHello(t, srcA, "acme")
		prefix := bigTablePrefix(wire.OpPut, 5, blob, tableLen, 1<<20)
		c.writeRaw(prefix)
		synctest.Wait()
		if used := b.srv.bufs.InUse(); used != 10<<20 {
			t.Fatalf("budget in use %d, want %d", used, 10<<20)
		}
		more := make([]byte, 1<<20)
		wrote := make(chan error, 1)
		go func() { _, err := c.nc.Write(more); wrote <- err }()
		time.Sleep(defaultBufferWait) // the wait for budget passes: refused
		if err := <-wrote; err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if n := statValue(b.srv, "request_buffer_refused"); n != 1 {
			t.Fatalf("request_buffer_refused = %d, want 1", n)
		}
		// Skipping the rest of the refused table holds no budget.
		if used := b.srv.bufs.InUse(); used != 8<<20 {
			t.Fatalf("budget in use %d while the refused table's rest is skipped, want the holders' %d", used, 8<<20)
		}
		sent := len(prefix) - wire.HeaderSize + len(more)
		c.writeRaw(make([]byte, 4+tableLen+4096-sent)) // the rest of the body
		c.expectError(wire.CodeRateLimited)
		c.roundTrip(wire.OpPing, []byte("in sync"))
	})
}
