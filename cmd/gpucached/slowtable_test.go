package main

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/gpucache/gpucache/api/identity"
	"github.com/gpucache/gpucache/api/wire"
	"github.com/gpucache/gpucache/client"
	"github.com/gpucache/gpucache/internal/security/antireplay"
)

// slowBlockSize is the payload of every block of the slow PUTs: one
// hot_min_class slot.
const slowBlockSize = 16 << 10

// slowConn is one connection of the slow-table attack: its PUT frame up
// to the end of its table (the payloads that follow are zeros), and how
// much of the body the daemon has been sent.
type slowConn struct {
	nc       net.Conn
	frame    []byte // header, stamp, table length and table
	tableEnd int    // len(frame): where the payloads start
	sent     int
}

// slowPut builds a stamped, well-formed PUT of tenant: 64 chained blocks
// of tokens token ids each (block_tokens of its namespace), seeded by
// seed so that every connection's keys differ, each with a payload of
// slowBlockSize bytes.
func slowPut(t *testing.T, tenant string, tokens, seed int) []byte {
	t.Helper()
	ns := identity.Namespace{Tenant: tenant, TrustDomain: "slow", ModelID: "m", ConfigRevision: "1", TokenizerRevision: "1",
		RoPE: "r", DType: "fp16", Quantization: "none", Layout: identity.Layout{Format: "f", TPSize: 1, PPSize: 1,
			LayerCount: 1, KVHeads: 1, HeadDim: 1, BlockTokens: uint32(tokens)}}
	blob, err := ns.Canonical()
	if err != nil {
		t.Fatal(err)
	}
	req := wire.PutRequest{Namespace: blob}
	var parent identity.BlockKey
	for i := range 64 {
		toks := make([]uint32, tokens)
		for j := range toks {
			toks[j] = uint32(seed<<20 + i*tokens + j)
		}
		id := identity.CacheIdentity{Namespace: ns, Parent: parent, Position: uint64(i * tokens), Tokens: toks, ValidLength: uint32(tokens)}
		k, err := id.Key()
		if err != nil {
			t.Fatal(err)
		}
		req.Blocks = append(req.Blocks, wire.PutBlock{Key: k, Parent: parent, ValidLength: uint32(tokens), Len: slowBlockSize,
			Position: id.Position, TokenIDs: toks})
		parent = k
	}
	table := req.AppendTo(nil)
	var nonce [16]byte
	rand.Read(nonce[:])
	h := wire.Header{Version: wire.FrameVersion, Op: wire.OpPut, Flags: wire.FlagStamped, RequestID: 1,
		BodyLen: uint32(wire.StampSize + 4 + len(table) + len(req.Blocks)*slowBlockSize)}
	b := h.Append(nil)
	b = antireplay.NewStamp(time.Now(), nonce).Append(b)
	return wire.AppendMeta(b, table)
}

// advance sends every connection's frame up to offset off(c), in writes of
// at most chunk bytes (0: one write), each connection from its own
// goroutine: a write blocks while the daemon does not read (waiting for
// budget).
func advance(t *testing.T, conns []*slowConn, off func(*slowConn) int, chunk int) {
	t.Helper()
	zeros := make([]byte, 4*slowBlockSize)
	var wg sync.WaitGroup
	for _, c := range conns {
		end := off(c)
		if end <= c.sent {
			continue
		}
		wg.Go(func() {
			for c.sent < end {
				n := end - c.sent
				if chunk > 0 {
					n = min(n, chunk)
				}
				var b []byte
				if c.sent < c.tableEnd {
					b = c.frame[c.sent:min(c.sent+n, c.tableEnd)]
				} else {
					b = zeros[:min(n, len(zeros))]
				}
				m, err := c.nc.Write(b)
				c.sent += m
				if err != nil {
					t.Errorf("write at %d of %d: %v", c.sent, end, err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// TestMemoryBoundSlowTables runs gpucached with tenants and opens 1,000
// authenticated connections of one tenant that each send a well-formed,
// stamped PUT whose namespace is valid (so the daemon checks its rights
// and reads on), slowly: the test moves every connection forward by a
// step (one byte, the header, a few bytes at a time through the
// namespace and the table, ...), lets the daemon read all of it, measures
// its RSS and STAT, and takes the next step; up to one byte short of the
// end of the table, then on into the payloads, which drip into reserved
// hot-tier slots. Its peak RSS (VmHWM) must stay under the memory bound of
// docs/OPERATIONS.md at every step, the request buffers within their
// budget; another tenant's PUTs and GETs are served, their bytes
// unchanged, all along; and once the attackers go, every byte of budget
// and every reserved slot comes back.
//
// "small tables" (64 blocks of 16 tokens: 9.6 KiB) fit the 16 KiB every
// connection may hold without budget: all 1,000 tables are held at once.
// "large tables" (64 blocks of 256 tokens: 70 KiB) grow buffers paid from
// request_buffers: the tenant's share admits some, the rest are refused
// RATE_LIMITED after request_buffer_wait and their bytes skipped.
//
// A table that never completes is closed at read_timeout from its first
// byte, however slowly it keeps coming: internal/server
// TestSlowTableClosedAtReadTimeout shows it in fake time; here read_timeout
// is 10 minutes so that it does not end the attack.
func TestMemoryBoundSlowTables(t *testing.T) {
	if testing.Short() {
		t.Skip("builds binaries and opens 1,000 connections")
	}
	raiseNOFILE(t, 2*attackConns+512)
	bin := buildDaemon(t)
	for _, tc := range []struct {
		name   string
		tokens int
	}{{"small tables", 16}, {"large tables", 256}} {
		t.Run(tc.name, func(t *testing.T) { slowTables(t, bin, tc.tokens) })
	}
}

func slowTables(t *testing.T, bin string, tokens int) {
	d, writerSecret, victimSecret, opsSecret := startAttackNode(t, bin, "victim", "*=rw")
	pid := d.cmd.Process.Pid
	bound := memoryBound(attackHot, 16<<10, attackReqBufs, attackMaxConns, attackMaxInFlight, attackNonces)
	_, port, _ := net.SplitHostPort(d.addr)
	ops := authDial(t, d.addr, opsSecret)
	victim := newVictim(t, d.addr, victimSecret)
	startRSS := procStatus(t, pid, "VmRSS")

	conns := make([]*slowConn, attackConns)
	for i := range conns {
		f := slowPut(t, "writer", tokens, i)
		conns[i] = &slowConn{nc: authDial(t, d.addr, writerSecret), frame: f, tableEnd: len(f)}
	}
	idleRSS := procStatus(t, pid, "VmRSS")
	tableLen := conns[0].tableEnd - wire.HeaderSize - wire.StampSize - 4
	t.Logf("bound %d MiB; RSS %d MiB at start, %d MiB with %d idle sessions; table %d bytes",
		bound>>20, startRSS>>20, idleRSS>>20, attackConns, tableLen)

	// Where each step leaves every connection: offsets into the frame
	// (header, stamp, table length, namespace, table, payloads), and the
	// size of the writes that get there (0: one write).
	nsStart := wire.HeaderSize + wire.StampSize + 4
	nsLen := int(binary.LittleEndian.Uint32(conns[0].frame[nsStart:]))
	at := func(n int) func(*slowConn) int { return func(*slowConn) int { return n } }
	tablePart := func(num, den int) func(*slowConn) int {
		return func(c *slowConn) int { return nsStart + (c.tableEnd-nsStart)*num/den }
	}
	payload := func(n int) func(*slowConn) int { return func(c *slowConn) int { return c.tableEnd + n } }
	steps := []struct {
		name  string
		off   func(*slowConn) int
		chunk int
	}{
		{"1 byte", at(1), 0},
		{"header", at(wire.HeaderSize), 3},
		{"stamp and table length", at(nsStart), 4},
		{"half the namespace", at(nsStart + 4 + nsLen/2), 3},
		{"namespace", at(nsStart + 4 + nsLen), 3},
		{"+256 bytes, 3 at a time", func(*slowConn) int { return nsStart + 4 + nsLen + 256 }, 3},
		{"1/4 table", tablePart(1, 4), 0},
		{"1/2 table", tablePart(1, 2), 0},
		{"3/4 table", tablePart(3, 4), 0},
		{"table - 64 bytes", func(c *slowConn) int { return c.tableEnd - 64 }, 0},
		{"table - 1 byte, 3 at a time", func(c *slowConn) int { return c.tableEnd - 1 }, 3},
		{"table complete", payload(0), 1},
		{"payload 3 bytes", payload(3), 1},
		{"payload half a block", payload(slowBlockSize / 2), 0},
		{"payload 1 block + 3 bytes", payload(slowBlockSize + 3), 0},
		{"payload 2 blocks - 1 byte", payload(2*slowBlockSize - 1), 0},
	}
	var peak int64
	for i, s := range steps {
		began := time.Now()
		advance(t, conns, s.off, s.chunk)
		if t.Failed() {
			t.FailNow()
		}
		awaitDrained(t, port)
		hwm, rss := procStatus(t, pid, "VmHWM"), procStatus(t, pid, "VmRSS")
		peak = max(peak, hwm)
		st := stat(t, ops)
		t.Logf("step %2d %-28s VmRSS %3d MiB, VmHWM %3d MiB; request buffers %5d KiB; refused %d; slots in flight %5d KiB; conns %d; %v",
			i, s.name, rss>>20, hwm>>20, st["request_buffer_bytes"]>>10, st["request_buffer_refused"],
			(st["hot_bytes_reserved"]-st["hot_bytes_cached"])>>10, st["conns_open"], time.Since(began).Round(time.Millisecond))
		if hwm > bound {
			t.Fatalf("step %q: daemon peak RSS %d MiB exceeds the memory bound %d MiB of its settings", s.name, hwm>>20, bound>>20)
		}
		if st["request_buffer_bytes"] > attackReqBufs {
			t.Fatalf("step %q: request buffers hold %d bytes, over the %d budget", s.name, st["request_buffer_bytes"], attackReqBufs)
		}
		if share := st["request_buffer_tenant_limit_bytes"]; st["request_buffer_bytes"] > share {
			t.Fatalf("step %q: one tenant's connections hold %d bytes of request buffers, over its %d share", s.name, st["request_buffer_bytes"], share)
		}
		if n := st["replays_rejected"]; n != 0 {
			t.Fatalf("step %q: %d stamps refused REPLAY: those PUTs never reached their tables", s.name, n)
		}
		inFlight := st["hot_bytes_reserved"] - st["hot_bytes_cached"]
		if tokens == 16 && s.off(conns[0]) >= conns[0].tableEnd && inFlight != attackConns*slowBlockSize {
			t.Fatalf("step %q: %d bytes of slots reserved for PUTs in flight, want one block for each of %d connections", s.name, inFlight, attackConns)
		}
		if want := uint64(attackConns + 2); st["conns_open"] != want {
			t.Fatalf("step %q: conns_open %d, want %d: the daemon closed attackers", s.name, st["conns_open"], want)
		}
		victim.check(t, i)
	}

	// A slow PUT that completes is answered: stored, or refused whole for
	// want of budget, its bytes skipped, the stream in sync.
	finished := conns[:8]
	advance(t, finished, func(c *slowConn) int { return c.tableEnd + 64*slowBlockSize }, 0)
	var stored, refused int
	for _, c := range finished {
		h, body := readResponse(t, c.nc)
		if h.Flags&wire.FlagError != 0 {
			e, _ := wire.DecodeError(body)
			if e == nil || e.Code != wire.CodeRateLimited {
				t.Fatalf("a completed slow PUT was answered %v", e)
			}
			refused++
			continue
		}
		var resp wire.StatusResponse
		if err := resp.Decode(body, 64); err != nil {
			t.Fatal(err)
		}
		for j, st := range resp.Statuses {
			if st != wire.StatusStored {
				t.Fatalf("a completed slow PUT: block %d %v", j, st)
			}
		}
		stored++
	}
	t.Logf("completed slow PUTs: %d stored, %d refused RATE_LIMITED", stored, refused)
	if tokens == 16 && refused > 0 {
		t.Fatalf("%d small-table PUTs refused: they need no budget", refused)
	}

	st := stat(t, ops)
	t.Logf("peak VmHWM %d MiB, bound %d MiB; request_buffer_waits %d, request_buffer_refused %d, hot_tenant_rejects %d",
		peak>>20, bound>>20, st["request_buffer_waits"], st["request_buffer_refused"], st["hot_tenant_rejects"])

	// The attackers go: every byte of budget, every slot comes back.
	for _, c := range conns {
		c.nc.Close()
	}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		st = stat(t, ops)
		if st["conns_open"] == 2 && st["request_buffer_bytes"] == 0 && st["hot_bytes_reserved"] == st["hot_bytes_cached"] {
			break
		}
		<-tick.C
	}
	victim.check(t, len(steps))
}

// awaitDrained waits until the daemon has read (or skipped) every byte
// sent to port.
func awaitDrained(t *testing.T, port string) {
	t.Helper()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !drained(t, port) {
		<-tick.C
	}
}

// readResponse reads one response frame.
func readResponse(t *testing.T, nc net.Conn) (wire.Header, []byte) {
	t.Helper()
	var hb [wire.HeaderSize]byte
	if _, err := io.ReadFull(nc, hb[:]); err != nil {
		t.Fatal(err)
	}
	h, err := wire.DecodeHeader(hb[:])
	if err != nil {
		t.Fatal(err)
	}
	body := make([]byte, h.BodyLen)
	if _, err := io.ReadFull(nc, body); err != nil {
		t.Fatal(err)
	}
	return h, body
}

// victim is a well-behaved client of another tenant: at every check it
// stores one more block and reads back every block it stored.
type victim struct {
	c        *client.Client
	ns       client.Namespace
	keys     []client.BlockKey
	payloads [][]byte
}

func newVictim(t *testing.T, addr string, secret []byte) *victim {
	t.Helper()
	// No time budget: a loaded machine may be slow, never wrong.
	c, err := client.Dial(t.Context(), client.Config{Addr: addr, Secret: secret, Conns: 1, RequestTimeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	ns := client.Namespace{Tenant: "victim", TrustDomain: "slow", ModelID: "m", ConfigRevision: "1", TokenizerRevision: "1",
		RoPE: "r", DType: "fp16", Quantization: "none", Layout: client.Layout{Format: "f", TPSize: 1, PPSize: 1,
			LayerCount: 1, KVHeads: 1, HeadDim: 1, BlockTokens: 16}}
	return &victim{c: c, ns: ns}
}

func (v *victim) check(t *testing.T, step int) {
	t.Helper()
	toks := make([]uint32, 16)
	for i := range toks {
		toks[i] = uint32(step*16 + i + 7)
	}
	ids, err := client.Identities(v.ns, toks)
	if err != nil {
		t.Fatal(err)
	}
	payload := bytes.Repeat([]byte{byte(step), 0x5a}, slowBlockSize/2)
	sts, err := v.c.Put(t.Context(), v.ns, client.BlocksOf(ids, [][]byte{payload}))
	if err != nil || len(sts) != 1 || sts[0] != client.StatusStored {
		t.Fatalf("step %d: the other tenant's PUT: %v %v", step, sts, err)
	}
	k, err := ids[0].Key()
	if err != nil {
		t.Fatal(err)
	}
	v.keys = append(v.keys, k)
	v.payloads = append(v.payloads, payload)
	for i, r := range v.c.Get(t.Context(), v.ns, v.keys) {
		if !r.Hit || !bytes.Equal(r.Data, v.payloads[i]) {
			t.Fatalf("step %d: the other tenant's block %d: hit %v (%v), %d bytes", step, i, r.Hit, r.Reason, len(r.Data))
		}
	}
}
