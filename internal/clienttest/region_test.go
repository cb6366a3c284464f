package clienttest_test

import (
	"bytes"
	"path/filepath"
	"testing"

	"github.com/gpucache/gpucache/api/wire"
	. "github.com/gpucache/gpucache/client"
)

// startUnix runs a real server with a Unix-socket listener too.
func startUnix(t *testing.T) *startedUnix {
	t.Helper()
	ts := startServer(t, "127.0.0.1:0", wire.Limits{})
	path := filepath.Join(t.TempDir(), "g.sock")
	if err := ts.ListenUnix(path); err != nil {
		t.Fatal(err)
	}
	return &startedUnix{tcp: ts.Addr, unix: path, stats: func() map[string]uint64 {
		m := map[string]uint64{}
		for _, e := range ts.Srv.Stats() {
			m[e.Name] = e.Value
		}
		return m
	}}
}

type startedUnix struct {
	tcp, unix string
	stats     func() map[string]uint64
}

// TestRegionGetPutByteEquality: over the Unix socket, a Put whose payloads
// lie in a region and a GetInto into a region move no payload over the
// socket (the server's region counters say so) and read back the same
// bytes; the same calls over TCP, or from ordinary buffers, use the socket.
func TestRegionGetPutByteEquality(t *testing.T) {
	srv := startUnix(t)
	ctx := testCtx(t)
	c, err := Dial(ctx, Config{Network: "unix", Addr: srv.unix, Conns: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.ProtocolVersion() != wire.Version5 {
		t.Fatalf("version %d", c.ProtocolVersion())
	}
	reg, err := c.NewRegion(4 << 20)
	if err != nil {
		t.Fatal(err)
	}
	mem := reg.Bytes()
	ns := testNS("default")
	blocks := testBlocks(t, ns, 3, 256<<10, 5)
	want := make([][]byte, len(blocks))
	for i := range blocks {
		want[i] = blocks[i].Data
		// Stage each payload inside the region.
		dst := mem[i*(1<<20) : i*(1<<20)+len(blocks[i].Data)]
		copy(dst, blocks[i].Data)
		blocks[i].Data = dst
	}
	st, err := c.Put(ctx, ns, blocks)
	if err != nil || st[0] != StatusStored || st[2] != StatusStored {
		t.Fatalf("Put from the region: %v %v", st, err)
	}
	if got := srv.stats()["region_bytes_in"]; got != 3*256<<10 {
		t.Fatalf("region_bytes_in = %d, want %d", got, 3*256<<10)
	}
	clear(mem)
	dst := [][]byte{mem[3<<20 : 3<<20+256<<10], mem[2<<20 : 2<<20+256<<10], mem[0 : 256<<10]}
	res := make([]GetResult, 3)
	keys := keysOf(blocks)
	if hits := c.GetInto(ctx, ns, keys, dst, res); hits != 3 {
		t.Fatalf("GetInto into the region: %d hits", hits)
	}
	for i := range res {
		if !bytes.Equal(res[i].Data, want[i]) || &res[i].Data[0] != &dst[i][0] {
			t.Fatalf("block %d differs or is not in its buffer", i)
		}
	}
	if got := srv.stats()["region_bytes_out"]; got != 3*256<<10 {
		t.Fatalf("region_bytes_out = %d", got)
	}
	// A buffer outside every region goes over the socket and still reads.
	out := [][]byte{make([]byte, 256<<10)}
	if hits := c.GetInto(ctx, ns, keys[:1], out, res[:1]); hits != 1 || !bytes.Equal(out[0], want[0]) {
		t.Fatal("GetInto outside a region failed")
	}
	if got := srv.stats()["region_bytes_out"]; got != 3*256<<10 {
		t.Fatalf("a socket GetInto counted region bytes: %d", got)
	}
	// A buffer too small for its block: ErrShortBuffer, as on the socket.
	c.GetInto(ctx, ns, keys[:1], [][]byte{mem[:100:100]}, res[:1])
	if res[0].Hit || res[0].Reason != ErrShortBuffer {
		t.Fatalf("short region buffer: hit %v reason %v", res[0].Hit, res[0].Reason)
	}
	if err := c.CloseRegion(ctx, reg); err != nil {
		t.Fatal(err)
	}
	if got := srv.stats()["regions_mapped"]; got != 0 {
		t.Fatalf("after CloseRegion the server maps %d regions", got)
	}
}

// TestRegionOverTCPFallsBack: a region on a TCP client is never used: the
// calls go over the socket.
func TestRegionOverTCPFallsBack(t *testing.T) {
	srv := startUnix(t)
	ctx := testCtx(t)
	c, err := Dial(ctx, Config{Addr: srv.tcp})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	reg, err := c.NewRegion(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseRegion(ctx, reg)
	ns := testNS("default")
	blocks := testBlocks(t, ns, 1, 1000, 1)
	want := blocks[0].Data
	blocks[0].Data = reg.Bytes()[:1000]
	copy(blocks[0].Data, want)
	if st, err := c.Put(ctx, ns, blocks); err != nil || st[0] != StatusStored {
		t.Fatalf("Put: %v %v", st, err)
	}
	res := make([]GetResult, 1)
	if c.GetInto(ctx, ns, keysOf(blocks), [][]byte{reg.Bytes()[4096:8192]}, res) != 1 || !bytes.Equal(res[0].Data, want) {
		t.Fatal("GetInto over TCP failed")
	}
	if s := srv.stats(); s["regions_registered"] != 0 || s["region_bytes_in"] != 0 {
		t.Fatalf("a TCP client used a region: %v", s)
	}
}

// TestRegionAdjacentBuffers: buffers cut from one region without a
// capacity limit reach to its end; the client clips each slot at the next
// buffer, so the server's overlap check passes and every block lands in
// its own buffer. Buffers that overlap within their lengths go over the
// socket.
func TestRegionAdjacentBuffers(t *testing.T) {
	srv := startUnix(t)
	ctx := testCtx(t)
	c, err := Dial(ctx, Config{Addr: "unix:" + srv.unix})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	reg, err := c.NewRegion(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	ns := testNS("default")
	blocks := testBlocks(t, ns, 3, 4096, 9)
	if _, err := c.Put(ctx, ns, blocks); err != nil {
		t.Fatal(err)
	}
	mem := reg.Bytes()
	dst := [][]byte{mem[8192:12288], mem[0:4096], mem[4096:8192]} // each with cap to the region's end
	res := make([]GetResult, 3)
	if hits := c.GetInto(ctx, ns, keysOf(blocks), dst, res); hits != 3 {
		t.Fatalf("%d hits", hits)
	}
	for i := range blocks {
		if !bytes.Equal(dst[i], blocks[i].Data) {
			t.Fatalf("block %d differs", i)
		}
	}
	if got := srv.stats()["region_bytes_out"]; got != 3*4096 {
		t.Fatalf("region_bytes_out = %d, want %d", got, 3*4096)
	}
	// Overlapping buffers: the socket path, still correct for the last one.
	over := [][]byte{mem[0:4096], mem[2048:6144]}
	if hits := c.GetInto(ctx, ns, keysOf(blocks)[:2], over, res[:2]); hits != 2 || !bytes.Equal(over[1], blocks[1].Data) {
		t.Fatalf("overlapping buffers: %d hits", hits)
	}
	if got := srv.stats()["region_bytes_out"]; got != 3*4096 {
		t.Fatalf("overlapping buffers went through the region: %d", got)
	}
}
