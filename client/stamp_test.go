package client

import (
	"encoding/binary"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/gpucache/gpucache/api/wire"
)

// TestClientStampIsLittleEndian reads the stamp the client puts in front of
// a mutating request the way api/wire/doc.go specifies it, without the
// replay package: u64 little-endian unix nanoseconds, then 16 nonce bytes.
// Before ADR 0012 the client wrote the timestamp big-endian.
func TestClientStampIsLittleEndian(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	stamps := make(chan []byte, 4)
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait)
	t.Cleanup(func() { ln.Close() })
	wg.Go(func() {
		nc, err := ln.Accept()
		if err != nil {
			return
		}
		defer nc.Close()
		var hb [wire.HeaderSize]byte
		for {
			if _, err := io.ReadFull(nc, hb[:]); err != nil {
				return
			}
			h, err := wire.DecodeHeader(hb[:])
			if err != nil {
				return
			}
			body := make([]byte, h.BodyLen)
			if _, err := io.ReadFull(nc, body); err != nil {
				return
			}
			var resp []byte
			switch h.Op {
			case wire.OpHello:
				r := wire.HelloResponse{Version: wire.Version1, Server: "fake", Limits: wire.DefaultLimits(),
					HasSession: true, Tenant: "acme", Session: wire.SessionStampRequired}
				resp = r.AppendTo(nil)
			case wire.OpDelete:
				if h.Flags&wire.FlagStamped == 0 || len(body) < wire.StampSize {
					stamps <- nil
				} else {
					stamps <- body[:wire.StampSize]
				}
				r := wire.StatusResponse{Statuses: []wire.Status{wire.StatusDeleted}}
				resp = r.AppendTo(nil)
			default:
				return
			}
			nc.Write(frameBytes(h, 0, uint32(len(resp)), resp))
		}
	})
	c := dialTest(t, ln.Addr().String(), func(c *Config) { c.Conns = 1; c.Secret = []byte("acme-secret-0123456789abcdef") })
	ns := testNS("acme")
	keys := keysOf(testBlocks(t, ns, 1, 8, 1))
	var seen [][16]byte
	for range 2 {
		before := time.Now().UnixNano()
		if _, err := c.Delete(testCtx(t), ns, keys); err != nil {
			t.Fatal(err)
		}
		after := time.Now().UnixNano()
		s := <-stamps
		if s == nil {
			t.Fatal("DELETE went out unstamped although the session requires stamps")
		}
		ts := binary.LittleEndian.Uint64(s[:8])
		if ts < uint64(before) || ts > uint64(after) {
			t.Fatalf("stamp % x: little-endian timestamp %d is not between %d and %d (big-endian: %d)",
				s, ts, before, after, binary.BigEndian.Uint64(s[:8]))
		}
		seen = append(seen, [16]byte(s[8:]))
	}
	if seen[0] == seen[1] {
		t.Fatalf("two requests carried the same nonce %x", seen[0])
	}
}
