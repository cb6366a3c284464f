package daemon

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/gpucache/gpucache/api/identity"
	"github.com/gpucache/gpucache/client"
	"github.com/gpucache/gpucache/internal/config"
	"github.com/gpucache/gpucache/internal/security"
)

// respConn is a minimal RESP2 client for daemon tests: one command at a
// time, replies parsed strictly.
type respConn struct {
	t  *testing.T
	nc net.Conn
	br *bufio.Reader
}

func dialRESP(t *testing.T, addr string) *respConn {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	// A hang guard only; no assertion depends on it.
	nc.SetDeadline(time.Now().Add(2 * time.Minute))
	return &respConn{t: t, nc: nc, br: bufio.NewReaderSize(nc, 64<<10)}
}

func (r *respConn) do(args ...[]byte) (kind byte, line string, bulk []byte) {
	r.t.Helper()
	var b bytes.Buffer
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n", len(a))
		b.Write(a)
		b.WriteString("\r\n")
	}
	if _, err := r.nc.Write(b.Bytes()); err != nil {
		r.t.Fatal(err)
	}
	l, err := r.br.ReadString('\n')
	if err != nil || len(l) < 3 {
		r.t.Fatalf("reply: %q %v", l, err)
	}
	kind, line = l[0], l[1:len(l)-2]
	if kind == '$' && line != "-1" {
		n, err := strconv.Atoi(line)
		if err != nil {
			r.t.Fatalf("bulk length %q", line)
		}
		bulk = make([]byte, n+2)
		if _, err := io.ReadFull(r.br, bulk); err != nil {
			r.t.Fatal(err)
		}
		bulk = bulk[:n]
	}
	return kind, line, bulk
}

// TestRESPColdPresenceAfterRestart (presence counts the cold tier):
// LMCache chunks SET over RESP on a small hot tier are partly evicted
// (written behind) and partly spilled to the fs cold tier by the drain at
// shutdown. On the restarted node DRAM is empty: RESP EXISTS answers :1 for
// every chunk, native LOOKUP of the same opaque-key blocks counts them all,
// and GET returns identical bytes.
func TestRESPColdPresenceAfterRestart(t *testing.T) {
	c := testConfig()
	c.ColdStore, c.ColdDir = "fs", t.TempDir()
	c.HotCapacity, c.HotSlab, c.HotMaxClass = 4<<20, 1<<20, 1<<20
	c.ColdFlushInterval = time.Hour // evicted chunks wait until the shutdown flush
	c.RESPListen = "127.0.0.1:0"
	prof := config.RESPProfileConfig{Model: "meta-llama/Llama-3.1-8B-Instruct", ConfigRevision: "r1",
		TokenizerRevision: "t1", DType: "bfloat16", ChunkBytes: 256 << 10, KeyFormat: "lmcache"}
	c.RESPProfile = &prof
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	const n = 24 // 6 MiB of chunks on a 4 MiB hot tier
	keys := make([][]byte, n)
	vals := make([][]byte, n)
	for i := range keys {
		keys[i] = fmt.Appendf(nil, "%s@%08x@0@%064x", prof.Model, 0, i+1)
		vals[i] = bytes.Repeat([]byte{byte(i*7 + 1)}, 256<<10)
		vals[i][0], vals[i][len(vals[i])-1] = byte(i), byte(^i)
	}
	ns := prof.Namespace(security.DefaultTenant)
	d, err := ns.Digest()
	if err != nil {
		t.Fatal(err)
	}
	bkeys := make([]client.BlockKey, n)
	for i, k := range keys {
		bkeys[i] = identity.OpaqueKey(d, k)
	}
	ctx := context.Background()

	var evicted uint64
	runIndexedAddrs(t, c, func(a Addrs) {
		r := dialRESP(t, a.RESP)
		defer r.nc.Close()
		for i := range keys {
			if kind, line, _ := r.do([]byte("SET"), keys[i], vals[i]); kind != '+' || line != "OK" {
				t.Fatalf("SET %d: %c%s", i, kind, line)
			}
		}
		cl, err := client.Dial(ctx, client.Config{Addr: a.Data, Conns: 1})
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		st, err := cl.Stat(ctx)
		if err != nil {
			t.Fatal(err)
		}
		evicted = st["hot_evictions"]
	})
	if evicted == 0 || evicted >= n {
		t.Fatalf("%d of %d chunks evicted: the test needs some evicted and some spilled at drain", evicted, n)
	}

	runIndexedAddrs(t, c, func(a Addrs) {
		r := dialRESP(t, a.RESP)
		defer r.nc.Close()
		cl, err := client.Dial(ctx, client.Config{Addr: a.Data, Conns: 1})
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		// EXISTS and LOOKUP first, before any GET brings a chunk back to DRAM.
		for i := range keys {
			if kind, line, _ := r.do([]byte("EXISTS"), keys[i]); kind != ':' || line != "1" {
				t.Fatalf("EXISTS of chunk %d after restart: %c%s", i, kind, line)
			}
		}
		args := [][]byte{[]byte("EXISTS")}
		args = append(args, keys...)
		if kind, line, _ := r.do(args...); kind != ':' || line != strconv.Itoa(n) {
			t.Fatalf("EXISTS of %d chunks: %c%s", n, kind, line)
		}
		if hits, _, err := cl.Lookup(ctx, ns, bkeys, 0); err != nil || hits != n {
			t.Fatalf("native LOOKUP after restart: %d of %d (%v)", hits, n, err)
		}
		st, err := cl.Stat(ctx)
		if _, ok := st["hot_blocks"]; err != nil || !ok || st["hot_blocks"] != 0 {
			t.Fatalf("DRAM holds %d blocks after a restart: the test does not show cold presence", st["hot_blocks"])
		}
		for i := range keys {
			kind, line, got := r.do([]byte("GET"), keys[i])
			if kind != '$' || !bytes.Equal(got, vals[i]) {
				t.Fatalf("GET of chunk %d after restart: %c%s, identical %v", i, kind, line, bytes.Equal(got, vals[i]))
			}
		}
		// DEL hides the cold copy too.
		if kind, line, _ := r.do([]byte("DEL"), keys[0]); kind != ':' || line != "1" {
			t.Fatalf("DEL: %c%s", kind, line)
		}
		if kind, line, _ := r.do([]byte("GET"), keys[0]); kind != '$' || line != "-1" {
			t.Fatalf("GET after DEL: %c%s", kind, line)
		}
		if kind, line, _ := r.do([]byte("EXISTS"), keys[0]); kind != ':' || line != "0" {
			t.Fatalf("EXISTS after DEL: %c%s", kind, line)
		}
	})
}
