package client

import (
	"bytes"
	"context"
	"encoding/binary"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/gpucache/gpucache/api/wire"
)

// FuzzGetTable fuzzes the client's GET answer table check against the wire
// package's decoder as an oracle: whatever the client accepts, the wire
// decoder accepts too, with the same payload total, only HIT and MISS
// statuses, and no block over the payload limit.
func FuzzGetTable(f *testing.F) {
	for _, p := range [][][]byte{{[]byte("abc"), nil, []byte("defg")}, {nil, nil, nil}, {[]byte("abc")}} {
		body := getAnswer(p)
		f.Add(body[4:], uint8(3), uint32(len(body)))
	}
	f.Add([]byte{3, 0, 0, 0, 9, 0, 0, 0, 0}, uint8(1), uint32(13))
	f.Fuzz(func(t *testing.T, table []byte, n uint8, bodyLen uint32) {
		const maxPayload = 1 << 20
		total, err := checkGetTable(table, int(n), maxPayload, bodyLen)
		if err != nil {
			return
		}
		var resp wire.GetResponse
		wtotal, werr := resp.Decode(table, wire.DefaultMaxBatch)
		if werr != nil || wtotal != total || len(resp.Blocks) != int(n) {
			t.Fatalf("client accepted a table the wire decoder rejects: %v (totals %d, %d)", werr, total, wtotal)
		}
		if uint64(bodyLen) != 4+uint64(len(table))+total {
			t.Fatalf("accepted payload total %d does not fill a %d-byte body", total, bodyLen)
		}
		for i, b := range resp.Blocks {
			if (b.Status != wire.StatusHit && b.Status != wire.StatusMiss) || b.Len > maxPayload {
				t.Fatalf("block %d: accepted %s with %d bytes", i, b.Status, b.Len)
			}
		}
	})
}

// FuzzGetAnswer feeds arbitrary bytes to a live client as the body of a GET
// answer (end to end; its seed corpus runs in every test run, while
// FuzzGetTable is the fast target for long fuzzing, because the goroutines
// here make coverage nondeterministic and slow the fuzzer down). The client must never panic or hang,
// and must present bytes as a hit only when the answer is a well-formed GET
// answer for the keys asked, and then exactly the announced bytes.
func FuzzGetAnswer(f *testing.F) {
	const nkeys = 3
	f.Add(getAnswer([][]byte{[]byte("abc"), nil, []byte("defg")}))
	f.Add(getAnswer([][]byte{nil, nil, nil}))
	f.Add(getAnswer([][]byte{pattern(5000, 7), []byte("x"), nil}))
	f.Add(getAnswer([][]byte{[]byte("abc")})) // wrong key count
	f.Add([]byte{})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	trunc := getAnswer([][]byte{[]byte("abcdef"), nil, []byte("gh")})
	f.Add(trunc[:len(trunc)-3])

	var mu sync.Mutex
	var answer []byte
	fs := newFake(f, func(fc *fakeConn, h wire.Header, body []byte) {
		if h.Op != wire.OpGet {
			return
		}
		mu.Lock()
		b := answer
		mu.Unlock()
		// The frame is always complete (its length is the body's), so the
		// connection stays usable unless the client drops it as untrusted.
		fc.nc.Write(frameBytes(h, 0, uint32(len(b)), b))
	}).start()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	f.Cleanup(cancel)
	// In-memory pipes instead of TCP: the client drops the connection after
	// every malformed answer, and TCP would pile up TIME_WAIT sockets.
	cfg := Config{Addr: fs.addr(), Tenant: "acme", Conns: 1, RequestTimeout: 2 * time.Second}
	cfg.hooks = &hooks{dial: func(context.Context, string) (net.Conn, error) {
		cli, srv := net.Pipe()
		fs.wg.Add(1)
		go func() {
			defer fs.wg.Done()
			fs.serve(&fakeConn{nc: srv})
		}()
		return cli, nil
	}}
	c, err := Dial(ctx, cfg)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { c.Close() })
	ns := testNS("acme")
	keys := keysOf(testBlocks(f, ns, nkeys, 16, 1))

	f.Fuzz(func(t *testing.T, body []byte) {
		mu.Lock()
		answer = body
		mu.Unlock()
		start := time.Now()
		res := c.Get(context.Background(), ns, keys)
		if d := time.Since(start); d > time.Second {
			t.Fatalf("Get took %v: %v", d, res[0].Reason)
		}
		want, ok := parseGetAnswer(body, nkeys)
		for i, r := range res {
			if !r.Hit {
				if r.Reason == nil {
					t.Fatalf("block %d: miss without a reason", i)
				}
				continue
			}
			if !ok {
				t.Fatalf("block %d: hit from a malformed answer", i)
			}
			if want[i] == nil || !bytes.Equal(r.Data, want[i]) {
				t.Fatalf("block %d: hit with %d bytes that the answer did not announce", i, len(r.Data))
			}
		}
	})
}

// parseGetAnswer is an independent reading of a GET answer body: the
// payload of each hit, or ok=false if the body is malformed.
func parseGetAnswer(body []byte, nkeys int) (payloads [][]byte, ok bool) {
	if len(body) < 4 {
		return nil, false
	}
	metaLen := binary.LittleEndian.Uint32(body)
	if uint64(metaLen) > uint64(len(body)-4) {
		return nil, false
	}
	var resp wire.GetResponse
	total, err := resp.Decode(body[4:4+metaLen], wire.DefaultMaxBatch)
	if err != nil || len(resp.Blocks) != nkeys || total != uint64(len(body))-4-uint64(metaLen) {
		return nil, false
	}
	rest := body[4+metaLen:]
	payloads = make([][]byte, nkeys)
	for i, b := range resp.Blocks {
		if b.Status == wire.StatusHit {
			payloads[i], rest = rest[:b.Len], rest[b.Len:]
		}
	}
	return payloads, true
}
