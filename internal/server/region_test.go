package server

import (
	"bytes"
	"context"
	"math"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/gpucache/gpucache/api/identity"
	"github.com/gpucache/gpucache/api/wire"
	"github.com/gpucache/gpucache/internal/security"
	"github.com/gpucache/gpucache/internal/security/acl"
	"github.com/gpucache/gpucache/internal/security/antireplay"
	"github.com/gpucache/gpucache/internal/security/auth"
)

// startUnixServer runs a server on a Unix socket (and TCP) over a small
// store; it returns the server and the socket path.
func startUnixServer(t *testing.T, mod func(*Config)) (*testServer, string) {
	t.Helper()
	ts := startServer(t, mod)
	path := filepath.Join(t.TempDir(), "g.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- ts.srv.ServeUnix(ln) }()
	t.Cleanup(func() {
		// startServer's cleanup (registered first, run last) shuts the
		// server down; this one waits for the Unix listener after it.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		ts.srv.Shutdown(ctx)
		<-done
	})
	return ts, path
}

// unixHello dials path and opens a version-5 session for tenant.
func unixHello(t *testing.T, path, tenant string) *rawConn {
	t.Helper()
	nc, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	nc.SetDeadline(time.Now().Add(20 * time.Second))
	c := &rawConn{t: t, nc: nc}
	req := wire.HelloRequest{MinVersion: 1, MaxVersion: wire.VersionMax, Tenant: tenant, Client: "test"}
	h, body := c.roundTrip(wire.OpHello, req.AppendTo(nil))
	if h.Flags&wire.FlagError != 0 {
		t.Fatalf("hello failed: %v", decodeErr(t, body))
	}
	return c
}

// sendFD sends one frame with fd attached (SCM_RIGHTS) on its first byte.
func (c *rawConn) sendFD(op wire.Opcode, body []byte, fd int) uint64 {
	c.t.Helper()
	c.id++
	h := wire.Header{Version: wire.FrameVersion, Op: op, RequestID: c.id, BodyLen: uint32(len(body))}
	b := append(h.Append(nil), body...)
	var oob []byte
	if fd >= 0 {
		oob = syscall.UnixRights(fd)
	}
	if _, _, err := c.nc.(*net.UnixConn).WriteMsgUnix(b, oob, nil); err != nil {
		c.t.Fatalf("sendmsg: %v", err)
	}
	return c.id
}

// register registers fd as region id and returns the answer.
func (c *rawConn) register(id uint32, fd int, n int) (wire.Header, []byte) {
	c.t.Helper()
	c.sendFD(wire.OpRegister, (&wire.RegisterRequest{Region: id, Length: uint64(n)}).AppendTo(nil), fd)
	return c.recv()
}

// mustRegister registers fd as region id and returns its mode.
func (c *rawConn) mustRegister(id uint32, fd int, n int) wire.RegionMode {
	c.t.Helper()
	h, body := c.register(id, fd, n)
	if h.Flags&wire.FlagError != 0 {
		c.t.Fatalf("register: %v", decodeErr(c.t, body))
	}
	var resp wire.RegisterResponse
	if err := resp.Decode(body); err != nil {
		c.t.Fatal(err)
	}
	return resp.Mode
}

// regionGet sends GET_INTO and returns the answer table, or the error.
func (c *rawConn) regionGet(nsBlob []byte, region uint32, keys []identity.BlockKey, slots []wire.Slot) (wire.GetIntoResponse, *wire.Error) {
	c.t.Helper()
	req := wire.GetIntoRequest{Namespace: nsBlob, Region: region, Keys: keys, Slots: slots}
	h, body := c.roundTrip(wire.OpGetInto, req.AppendTo(nil))
	var resp wire.GetIntoResponse
	if h.Flags&wire.FlagError != 0 {
		return resp, decodeErr(c.t, body)
	}
	if err := resp.Decode(body, wire.DefaultMaxBatch); err != nil {
		c.t.Fatal(err)
	}
	return resp, nil
}

// putFrom sends PUT_FROM and returns the statuses, or the error.
func (c *rawConn) putFrom(nsBlob []byte, region uint32, blocks []wire.PutBlock, offs []uint64) ([]wire.Status, *wire.Error) {
	c.t.Helper()
	req := wire.PutFromRequest{Region: region, Offsets: offs, Put: wire.PutRequest{Namespace: nsBlob, Blocks: blocks}}
	h, body := c.roundTrip(wire.OpPutFrom, req.AppendTo(nil))
	if h.Flags&wire.FlagError != 0 {
		return nil, decodeErr(c.t, body)
	}
	var resp wire.StatusResponse
	if err := resp.Decode(body, wire.DefaultMaxBatch); err != nil {
		c.t.Fatal(err)
	}
	return resp.Statuses, nil
}

// memfd returns a sealed (or, with seal false, unsealed) memfd of n bytes
// and the test's own mapping of it.
func memfd(t *testing.T, n int, seal bool) (int, []byte) {
	t.Helper()
	name := []byte("test\x00")
	fd, _, errno := syscall.Syscall(319, uintptr(unsafe.Pointer(&name[0])), 0x1|0x2, 0)
	if errno != 0 {
		t.Skipf("memfd_create: %v", errno)
	}
	if err := syscall.Ftruncate(int(fd), int64(n)); err != nil {
		t.Fatal(err)
	}
	if seal {
		if _, _, errno := syscall.Syscall(syscall.SYS_FCNTL, fd, 1033, 0x2|0x4); errno != 0 {
			t.Fatal(errno)
		}
	}
	mem, err := syscall.Mmap(int(fd), 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Munmap(mem); syscall.Close(int(fd)) })
	return int(fd), mem
}

// shmFile returns a file of n bytes under /dev/shm (which cannot be
// sealed) and the test's mapping of it.
func shmFile(t *testing.T, n int) (*os.File, []byte) {
	t.Helper()
	f, err := os.CreateTemp("/dev/shm", "gpucache-test-*")
	if err != nil {
		t.Skipf("no /dev/shm: %v", err)
	}
	t.Cleanup(func() { os.Remove(f.Name()); f.Close() })
	if err := f.Truncate(int64(n)); err != nil {
		t.Fatal(err)
	}
	mem, err := syscall.Mmap(int(f.Fd()), 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Munmap(mem) })
	return f, mem
}

// regionChain returns n identities of one chain of testNamespace("acme").
func regionChain(t *testing.T, n int) ([]identity.CacheIdentity, []identity.BlockKey) {
	t.Helper()
	ids := make([]identity.CacheIdentity, n)
	keys := make([]identity.BlockKey, n)
	var parent identity.BlockKey
	for i := range ids {
		id := testID(uint32(i + 1))
		id.Parent, id.Position = parent, uint64(i*16)
		ids[i], keys[i] = id, mustKey(t, id)
		parent = keys[i]
	}
	return ids, keys
}

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i*7)
	}
	return b
}

func TestRegionPutFromGetIntoRoundTrip(t *testing.T) {
	ts, path := startUnixServer(t, nil)
	c := unixHello(t, path, "acme")
	fd, mem := memfd(t, 1<<20, true)
	if mode := c.mustRegister(1, fd, len(mem)); mode != wire.RegionSealed {
		t.Fatalf("mode %d, want SEALED", mode)
	}
	ns := mustCanonical(t, testNamespace("acme"))
	ids, keys := regionChain(t, 3)
	sizes := []int{100 << 10, 4096, 300 << 10}
	var blocks []wire.PutBlock
	var offs []uint64
	off := 0
	for i, id := range ids {
		copy(mem[off:], pattern(sizes[i], byte(i)))
		blocks = append(blocks, putBlock(keys[i], id, sizes[i]))
		offs = append(offs, uint64(off))
		off += sizes[i]
	}
	st, werr := c.putFrom(ns, 1, blocks, offs)
	if werr != nil || st[0] != wire.StatusStored || st[1] != wire.StatusStored || st[2] != wire.StatusStored {
		t.Fatalf("PUT_FROM: %v %v", st, werr)
	}
	// The stored bytes are the server's own copy: changing the region now
	// does not change them.
	clear(mem)
	resp, payload, _ := c.get(ns, 0, keys...)
	if want := append(append(pattern(sizes[0], 0), pattern(sizes[1], 1)...), pattern(sizes[2], 2)...); !bytes.Equal(payload, want) {
		t.Fatalf("GET after PUT_FROM: %v, payload differs", resp.Blocks)
	}
	// GET_INTO into other offsets, in another order.
	slots := []wire.Slot{{Offset: 600 << 10, Len: 300 << 10}, {Offset: 0, Len: 4096}, {Offset: 4096, Len: 300 << 10}}
	got, werr := c.regionGet(ns, 1, []identity.BlockKey{keys[0], keys[1], keys[2]}, slots)
	if werr != nil {
		t.Fatal(werr)
	}
	for i, bm := range got.Blocks {
		if bm.Status != wire.StatusHit || int(bm.Len) != sizes[i] {
			t.Fatalf("entry %d: %v", i, bm)
		}
		equalBytes(t, mem[slots[i].Offset:slots[i].Offset+uint64(bm.Len)], pattern(sizes[i], byte(i)))
	}
	// A block larger than its slot: TOO_LARGE with its length, nothing written.
	mem[800<<10] = 0xee
	got, _ = c.regionGet(ns, 1, []identity.BlockKey{keys[2], {9}}, []wire.Slot{{Offset: 800 << 10, Len: 1000}, {Offset: 0, Len: 10}})
	if got.Blocks[0] != (wire.BlockMeta{Status: wire.StatusTooLarge, Len: uint32(sizes[2])}) || got.Blocks[1].Status != wire.StatusMiss || mem[800<<10] != 0xee {
		t.Fatalf("short slot and miss: %v", got.Blocks)
	}
	stats := entryMap(ts.srv.Stats())
	if stats["region_bytes_in"] != uint64(off) || stats["regions_mapped"] != 1 || stats["region_bytes_mapped"] != 1<<20 {
		t.Fatalf("stats: in %d mapped %d bytes %d", stats["region_bytes_in"], stats["regions_mapped"], stats["region_bytes_mapped"])
	}
	// UNREGISTER unmaps; the id is then unknown.
	if h, body := c.roundTrip(wire.OpUnregister, (&wire.UnregisterRequest{Region: 1}).AppendTo(nil)); h.Flags&wire.FlagError != 0 || len(body) != 0 {
		t.Fatalf("unregister: %x", body)
	}
	if _, werr := c.regionGet(ns, 1, keys[:1], slots[:1]); werr == nil || werr.Code != wire.CodeRegion {
		t.Fatalf("GET_INTO after UNREGISTER: %v", werr)
	}
	if total, n, _ := ts.srv.RegionUsage("acme"); total != 0 || n != 0 {
		t.Fatalf("after UNREGISTER: %d bytes in %d regions", total, n)
	}
}

func entryMap(es []wire.StatEntry) map[string]uint64 {
	m := make(map[string]uint64, len(es))
	for _, e := range es {
		m[e.Name] = e.Value
	}
	return m
}

func TestRegionRefusals(t *testing.T) {
	ts, path := startUnixServer(t, nil)
	c := unixHello(t, path, "acme")
	// No descriptor.
	if h, body := c.register(1, -1, 4096); h.Flags&wire.FlagError == 0 || decodeErr(t, body).Code != wire.CodeRegion {
		t.Fatal("REGISTER without a descriptor was not refused REGION")
	}
	// An unsealed memfd.
	fd, _ := memfd(t, 4096, false)
	if h, body := c.register(1, fd, 4096); h.Flags&wire.FlagError == 0 || decodeErr(t, body).Code != wire.CodeRegion {
		t.Fatal("an unsealed memfd was registered")
	}
	// Not a regular file: a pipe.
	var p [2]int
	if err := syscall.Pipe(p[:]); err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(p[0])
	defer syscall.Close(p[1])
	if h, body := c.register(1, p[0], 4096); h.Flags&wire.FlagError == 0 || decodeErr(t, body).Code != wire.CodeRegion {
		t.Fatal("a pipe was registered")
	}
	// Longer than the file.
	fd2, _ := memfd(t, 4096, true)
	if h, body := c.register(1, fd2, 8192); h.Flags&wire.FlagError == 0 || decodeErr(t, body).Code != wire.CodeRegion {
		t.Fatal("a region longer than its file was registered")
	}
	// A malformed REGISTER still consumes its descriptor: the next one gets its own.
	c.sendFD(wire.OpRegister, []byte{1, 2, 3}, fd2)
	if h, body := c.recv(); h.Flags&wire.FlagError == 0 || decodeErr(t, body).Code != wire.CodeMalformed {
		t.Fatal("a malformed REGISTER was not refused MALFORMED")
	}
	c.mustRegister(1, fd2, 4096)
	// The same id twice.
	if h, body := c.register(1, fd2, 4096); h.Flags&wire.FlagError == 0 || decodeErr(t, body).Code != wire.CodeRegion {
		t.Fatal("region id 1 was registered twice")
	}
	// Over TCP: REGION.
	tc := dialRaw(t, ts.addr)
	req := wire.HelloRequest{MinVersion: 1, MaxVersion: wire.VersionMax, Tenant: "acme", Client: "test"}
	tc.roundTrip(wire.OpHello, req.AppendTo(nil))
	h, body := tc.roundTrip(wire.OpRegister, (&wire.RegisterRequest{Region: 1, Length: 4096}).AppendTo(nil))
	if h.Flags&wire.FlagError == 0 || decodeErr(t, body).Code != wire.CodeRegion {
		t.Fatal("REGISTER over TCP was not refused REGION")
	}
	ns := mustCanonical(t, testNamespace("acme"))
	if _, werr := tc.regionGet(ns, 1, []identity.BlockKey{{1}}, []wire.Slot{{Len: 1}}); werr == nil || werr.Code != wire.CodeRegion {
		t.Fatalf("GET_INTO over TCP: %v", werr)
	}
	// A version-4 session does not know the opcodes.
	old := dialRaw(t, ts.addr)
	old.roundTrip(wire.OpHello, (&wire.HelloRequest{MinVersion: 1, MaxVersion: 4, Tenant: "acme", Client: "old"}).AppendTo(nil))
	if h, body := old.roundTrip(wire.OpGetInto, nil); h.Flags&wire.FlagError == 0 || decodeErr(t, body).Code != wire.CodeUnknownOpcode {
		t.Fatal("GET_INTO in a version-4 session was not UNKNOWN_OPCODE")
	}
	if ts.srv.Stats() == nil {
		t.Fatal("no stats")
	}
}

// TestRegionOffsets: every (offset, length) is checked against the region,
// without overflow, and GET_INTO slots must not overlap; the request is
// then refused whole and nothing is written.
func TestRegionOffsets(t *testing.T) {
	_, path := startUnixServer(t, nil)
	c := unixHello(t, path, "acme")
	fd, mem := memfd(t, 64<<10, true)
	c.mustRegister(7, fd, len(mem))
	ns := mustCanonical(t, testNamespace("acme"))
	ids, keys := regionChain(t, 2)
	c.put(ns, ids[0], pattern(1000, 1))
	c.put(ns, ids[1], pattern(1000, 2))
	for _, tc := range []struct {
		name  string
		slots []wire.Slot
	}{
		{"past the end", []wire.Slot{{Offset: 64<<10 - 10, Len: 1000}, {Offset: 0, Len: 1000}}},
		{"offset overflows", []wire.Slot{{Offset: math.MaxUint64 - 10, Len: 1000}, {Offset: 0, Len: 1000}}},
		{"offset beyond", []wire.Slot{{Offset: 1 << 40, Len: 1}, {Offset: 0, Len: 1000}}},
		{"overlapping", []wire.Slot{{Offset: 0, Len: 1000}, {Offset: 999, Len: 1000}}},
		{"same slot", []wire.Slot{{Offset: 5000, Len: 1000}, {Offset: 5000, Len: 1000}}},
	} {
		clear(mem)
		if _, werr := c.regionGet(ns, 7, keys, tc.slots); werr == nil || werr.Code != wire.CodeMalformed {
			t.Fatalf("%s: %v, want MALFORMED", tc.name, werr)
		}
		if !bytes.Equal(mem, make([]byte, len(mem))) {
			t.Fatalf("%s: a refused GET_INTO wrote into the region", tc.name)
		}
	}
	// Adjacent slots are fine.
	got, werr := c.regionGet(ns, 7, keys, []wire.Slot{{Offset: 1000, Len: 1000}, {Offset: 0, Len: 1000}})
	if werr != nil || got.Blocks[0].Status != wire.StatusHit || got.Blocks[1].Status != wire.StatusHit {
		t.Fatalf("adjacent slots: %v %v", got.Blocks, werr)
	}
	equalBytes(t, mem[1000:2000], pattern(1000, 1))
	equalBytes(t, mem[:1000], pattern(1000, 2))
	// PUT_FROM: out of range and overflowing offsets are refused; sources
	// may overlap (they are only read).
	ids2, keys2 := regionChain(t, 4)
	blocks := []wire.PutBlock{putBlock(keys2[2], ids2[2], 2000), putBlock(keys2[3], ids2[3], 2000)}
	for _, offs := range [][]uint64{{0, 64<<10 - 100}, {0, math.MaxUint64 - 5}} {
		if _, werr := c.putFrom(ns, 7, blocks, offs); werr == nil || werr.Code != wire.CodeMalformed {
			t.Fatalf("PUT_FROM at %v: %v, want MALFORMED", offs, werr)
		}
	}
	if st, werr := c.putFrom(ns, 7, blocks, []uint64{0, 500}); werr != nil || st[0] != wire.StatusStored || st[1] != wire.StatusStored {
		t.Fatalf("overlapping PUT_FROM sources: %v %v", st, werr)
	}
	_, payload, _ := c.get(ns, 0, keys2[3])
	equalBytes(t, payload, mem[500:2500])
}

// TestRegionOtherConnection: a region belongs to the connection that
// registered it; another connection of the same tenant cannot name it.
func TestRegionOtherConnection(t *testing.T) {
	_, path := startUnixServer(t, nil)
	a, b := unixHello(t, path, "acme"), unixHello(t, path, "acme")
	fd, mem := memfd(t, 4096, true)
	a.mustRegister(1, fd, len(mem))
	ns := mustCanonical(t, testNamespace("acme"))
	id := testID(1)
	a.put(ns, id, pattern(100, 3))
	if _, werr := b.regionGet(ns, 1, []identity.BlockKey{mustKey(t, id)}, []wire.Slot{{Len: 100}}); werr == nil || werr.Code != wire.CodeRegion {
		t.Fatalf("GET_INTO naming another connection's region: %v", werr)
	}
	if mem[0] != 0 {
		t.Fatal("another connection wrote into the region")
	}
}

// TestRegionTenantBound: a tenant at tenant_region_bytes is refused
// further regions; another tenant still registers and reads.
func TestRegionTenantBound(t *testing.T) {
	ts, path := startUnixServer(t, func(c *Config) { c.TenantRegionBytes, c.RegionBytes = 64<<10, 192<<10 })
	a1, a2 := unixHello(t, path, "acme"), unixHello(t, path, "acme")
	fd, _ := memfd(t, 64<<10, true)
	a1.mustRegister(1, fd, 48<<10)
	// The bound is the tenant's, across its connections.
	if h, body := a2.register(1, fd, 32<<10); h.Flags&wire.FlagError == 0 || decodeErr(t, body).Code != wire.CodeRegion {
		t.Fatal("acme passed tenant_region_bytes on its second connection")
	}
	b := unixHello(t, path, "other")
	fdB, memB := memfd(t, 64<<10, true)
	b.mustRegister(1, fdB, 64<<10)
	nsB := mustCanonical(t, testNamespace("other"))
	idB := testID(5)
	idB.Namespace = testNamespace("other")
	b.put(nsB, idB, pattern(5000, 9))
	got, werr := b.regionGet(nsB, 1, []identity.BlockKey{mustKey(t, idB)}, []wire.Slot{{Len: 5000}})
	if werr != nil || got.Blocks[0].Status != wire.StatusHit {
		t.Fatalf("the other tenant's GET_INTO: %v %v", got.Blocks, werr)
	}
	equalBytes(t, memB[:5000], pattern(5000, 9))
	if _, _, acme := ts.srv.RegionUsage("acme"); acme != 48<<10 {
		t.Fatalf("acme holds %d registered bytes", acme)
	}
	// Each session's STAT shows its own tenant's registered bytes.
	h, body := b.roundTrip(wire.OpStat, nil)
	var stat wire.StatResponse
	if err := stat.Decode(body); err != nil || h.Flags&wire.FlagError != 0 {
		t.Fatal(err)
	}
	if m := entryMap(stat.Entries); m["tenant_region_bytes"] != 64<<10 || m["tenant_region_quota_bytes"] != 64<<10 {
		t.Fatalf("other's STAT: region bytes %d quota %d", m["tenant_region_bytes"], m["tenant_region_quota_bytes"])
	}
	// The server-wide bound.
	c := unixHello(t, path, "third")
	fdC, _ := memfd(t, 64<<10, true)
	c.mustRegister(1, fdC, 64<<10)
	d := unixHello(t, path, "fourth")
	if h, body := d.register(1, fdC, 64<<10); h.Flags&wire.FlagError == 0 || decodeErr(t, body).Code != wire.CodeRegion {
		t.Fatal("region_bytes was passed")
	}
}

// copyHook runs a test's action before the n-th region copy (counted from
// 1 after each set).
type copyHook struct {
	mu sync.Mutex
	fn func(n int)
	n  int
}

func (h *copyHook) install(c *Config) { c.Hooks = &Hooks{RegionCopy: h.run} }

func (h *copyHook) set(fn func(n int)) {
	h.mu.Lock()
	h.fn, h.n = fn, 0
	h.mu.Unlock()
}

func (h *copyHook) run() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.n++
	if h.fn != nil {
		h.fn(h.n)
	}
}

// TestRegionGuardedTruncatedMidGet: a /dev/shm file cannot be sealed; the
// client truncates it while the server copies a GET_INTO into it. The
// copy faults, the entry and the later ones answer FAULT, the region is
// dropped, and the server goes on serving this and other connections.
func TestRegionGuardedTruncatedMidGet(t *testing.T) {
	hook := &copyHook{}
	ts, path := startUnixServer(t, hook.install)
	c := unixHello(t, path, "acme")
	f, mem := shmFile(t, 1<<20)
	if mode := c.mustRegister(1, int(f.Fd()), len(mem)); mode != wire.RegionGuarded {
		t.Fatalf("a /dev/shm file registered as mode %d, want GUARDED", mode)
	}
	ns := mustCanonical(t, testNamespace("acme"))
	ids, keys := regionChain(t, 3)
	for i, id := range ids {
		c.put(ns, id, pattern(64<<10, byte(i)))
	}
	hook.set(func(n int) {
		if n == 2 {
			f.Truncate(0) // the client shrinks its file under the server
		}
	})
	slots := []wire.Slot{{Offset: 0, Len: 64 << 10}, {Offset: 512 << 10, Len: 64 << 10}, {Offset: 768 << 10, Len: 64 << 10}}
	got, werr := c.regionGet(ns, 1, keys, slots)
	hook.set(nil)
	if werr != nil {
		t.Fatal(werr)
	}
	want := []wire.Status{wire.StatusHit, wire.StatusFault, wire.StatusFault}
	for i, bm := range got.Blocks {
		if bm.Status != want[i] {
			t.Fatalf("statuses %v, want %v", got.Blocks, want)
		}
	}
	if _, werr := c.regionGet(ns, 1, keys[:1], slots[:1]); werr == nil || werr.Code != wire.CodeRegion {
		t.Fatalf("the faulted region is still usable: %v", werr)
	}
	if st := entryMap(ts.srv.Stats()); st["region_faults"] != 1 || st["regions_mapped"] != 0 {
		t.Fatalf("faults %d, mapped %d", st["region_faults"], st["regions_mapped"])
	}
	// The connection and the server still serve.
	_, payload, _ := c.get(ns, 0, keys[2])
	equalBytes(t, payload, pattern(64<<10, 2))
	other := unixHello(t, path, "acme")
	_, payload, _ = other.get(ns, 0, keys[1])
	equalBytes(t, payload, pattern(64<<10, 1))
}

// TestRegionGuardedTruncatedMidPut: the same fault during PUT_FROM stores
// nothing of the faulted entry or the later ones.
func TestRegionGuardedTruncatedMidPut(t *testing.T) {
	hook := &copyHook{}
	_, path := startUnixServer(t, hook.install)
	c := unixHello(t, path, "acme")
	f, mem := shmFile(t, 1<<20)
	c.mustRegister(1, int(f.Fd()), len(mem))
	ns := mustCanonical(t, testNamespace("acme"))
	ids, keys := regionChain(t, 3)
	var blocks []wire.PutBlock
	for i, id := range ids {
		copy(mem[i*(256<<10):], pattern(64<<10, byte(i)))
		blocks = append(blocks, putBlock(keys[i], id, 64<<10))
	}
	hook.set(func(n int) {
		if n == 2 {
			f.Truncate(0)
		}
	})
	st, werr := c.putFrom(ns, 1, blocks, []uint64{0, 256 << 10, 512 << 10})
	hook.set(nil)
	if werr != nil || st[0] != wire.StatusStored || st[1] != wire.StatusFault || st[2] != wire.StatusFault {
		t.Fatalf("PUT_FROM across a truncation: %v %v", st, werr)
	}
	resp, _, _ := c.get(ns, 0, keys...)
	if resp.Blocks[0].Status != wire.StatusHit || resp.Blocks[1].Status != wire.StatusMiss || resp.Blocks[2].Status != wire.StatusMiss {
		t.Fatalf("after the faulted PUT_FROM: %v", resp.Blocks)
	}
}

// TestRegionClientUnmapsMidGet: the client unmapping its own view and
// closing its descriptor cannot hurt the server, which has its own mapping.
func TestRegionClientUnmapsMidGet(t *testing.T) {
	hook := &copyHook{}
	_, path := startUnixServer(t, hook.install)
	c := unixHello(t, path, "acme")
	fd, mem := memfd(t, 1<<20, true)
	c.mustRegister(1, fd, len(mem))
	ns := mustCanonical(t, testNamespace("acme"))
	ids, keys := regionChain(t, 2)
	for i, id := range ids {
		c.put(ns, id, pattern(4096, byte(i)))
	}
	// A second mapping the test reads back through after the first goes.
	view, err := syscall.Mmap(fd, 0, len(mem), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Munmap(view)
	hook.set(func(n int) {
		if n == 1 {
			syscall.Munmap(mem)
		}
	})
	got, werr := c.regionGet(ns, 1, keys, []wire.Slot{{Offset: 0, Len: 4096}, {Offset: 4096, Len: 4096}})
	hook.set(nil)
	if werr != nil || got.Blocks[0].Status != wire.StatusHit || got.Blocks[1].Status != wire.StatusHit {
		t.Fatalf("GET_INTO while the client unmaps: %v %v", got.Blocks, werr)
	}
	equalBytes(t, view[4096:8192], pattern(4096, 1))
}

// TestRegionsUnmappedOnClose: a connection that closes (a client killed
// with its regions registered looks the same to the server) gives its
// regions back.
func TestRegionsUnmappedOnClose(t *testing.T) {
	closed := make(chan struct{}, 4)
	ts, path := startUnixServer(t, func(c *Config) { c.Hooks = &Hooks{ConnClosed: func() { closed <- struct{}{} }} })
	c := unixHello(t, path, "acme")
	fd, _ := memfd(t, 64<<10, true)
	c.mustRegister(1, fd, 64<<10)
	c.mustRegister(2, fd, 32<<10)
	if total, n, _ := ts.srv.RegionUsage("acme"); total != 96<<10 || n != 2 {
		t.Fatalf("%d bytes in %d regions", total, n)
	}
	c.nc.Close()
	<-closed
	if total, n, acme := ts.srv.RegionUsage("acme"); total != 0 || n != 0 || acme != 0 {
		t.Fatalf("after close: %d bytes in %d regions (acme %d)", total, n, acme)
	}
}

// TestUnixPeerUID: over the Unix socket a HELLO without a credential
// authenticates by the peer's uid, read from the kernel; over TCP it does
// not.
func TestUnixPeerUID(t *testing.T) {
	guard := unixUIDGuard(t, uint32(os.Getuid()))
	ts, path := startUnixServer(t, func(c *Config) { c.Guard = guard })
	nc, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	c := &rawConn{t: t, nc: nc}
	h, body := c.roundTrip(wire.OpHello, (&wire.HelloRequest{MinVersion: 1, MaxVersion: wire.VersionMax, Client: "t", HasAuth: true, Auth: wire.AuthNone, Credential: []byte{}}).AppendTo(nil))
	if h.Flags&wire.FlagError != 0 {
		t.Fatalf("HELLO by uid: %v", decodeErr(t, body))
	}
	var resp wire.HelloResponse
	if err := resp.Decode(body); err != nil || resp.Tenant != "uidtenant" {
		t.Fatalf("session tenant %q (%v), want uidtenant", resp.Tenant, err)
	}
	tc := dialRaw(t, ts.addr)
	h, body = tc.roundTrip(wire.OpHello, (&wire.HelloRequest{MinVersion: 1, MaxVersion: wire.VersionMax, Client: "t", HasAuth: true, Auth: wire.AuthNone, Credential: []byte{}}).AppendTo(nil))
	if h.Flags&wire.FlagError == 0 || decodeErr(t, body).Code != wire.CodeUnauthenticated {
		t.Fatal("a TCP HELLO without a credential opened a session")
	}
}

// unixUIDGuard authenticates the test tenants by secret and uid as tenant
// "uidtenant".
func unixUIDGuard(t *testing.T, uid uint32) *security.Guard {
	t.Helper()
	tenants := append(testTenants(), auth.Tenant{Name: "uidtenant", UnixUIDs: []uint32{uid}})
	p := testPolicy(t, tenants, nil)
	r, err := acl.ParseRule("uidtenant:*=rw")
	if err != nil {
		t.Fatal(err)
	}
	if p.ACL, err = acl.NewPolicy(r); err != nil {
		t.Fatal(err)
	}
	w, err := antireplay.New(antireplay.Config{Window: 5 * time.Minute, MaxNonces: 1024, TenantNonces: 256})
	if err != nil {
		t.Fatal(err)
	}
	g, err := security.NewGuard(p, w, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// unsafePointer converts for the raw syscalls of the region tests.
func unsafePointer(p *byte) unsafe.Pointer { return unsafe.Pointer(p) }

// TestRegionPutOpaqueFrom: opaque-key blocks (an engine's named chunks)
// are stored from a region, verified against their names, and read back
// through GET and GET_INTO.
func TestRegionPutOpaqueFrom(t *testing.T) {
	_, path := startUnixServer(t, nil)
	c := unixHello(t, path, "acme")
	fd, mem := memfd(t, 256<<10, true)
	c.mustRegister(1, fd, len(mem))
	ns := testNamespace("acme")
	blob := mustCanonical(t, ns)
	d := mustDigest(t, ns)
	copy(mem, pattern(8192, 4))
	copy(mem[65536:], pattern(1000, 5))
	k1, k2 := identity.OpaqueKey(d, []byte("chunk-1")), identity.OpaqueKey(d, []byte("chunk-2"))
	req := wire.PutOpaqueFromRequest{Region: 1, Offsets: []uint64{0, 65536, 0}, Put: wire.PutOpaqueRequest{Namespace: blob, Blocks: []wire.OpaqueBlock{
		{Key: k1, Name: []byte("chunk-1"), Len: 8192},
		{Key: k2, Name: []byte("chunk-2"), Len: 1000},
		{Key: k1, Name: []byte("not-chunk-1"), Len: 10}, // the key is not this name's
	}}}
	h, body := c.roundTrip(wire.OpPutOpaqueFrom, req.AppendTo(nil))
	var st wire.StatusResponse
	if h.Flags&wire.FlagError != 0 || st.Decode(body, wire.DefaultMaxBatch) != nil {
		t.Fatalf("PUT_OPAQUE_FROM: %x", body)
	}
	if want := []wire.Status{wire.StatusStored, wire.StatusStored, wire.StatusKeyMismatch}; !slices.Equal(st.Statuses, want) {
		t.Fatalf("statuses %v, want %v", st.Statuses, want)
	}
	_, payload, _ := c.get(blob, 0, k1, k2)
	equalBytes(t, payload, append(pattern(8192, 4), pattern(1000, 5)...))
	got, werr := c.regionGet(blob, 1, []identity.BlockKey{k2}, []wire.Slot{{Offset: 128 << 10, Len: 1000}})
	if werr != nil || got.Blocks[0].Status != wire.StatusHit {
		t.Fatalf("GET_INTO of an opaque block: %v %v", got.Blocks, werr)
	}
	equalBytes(t, mem[128<<10:128<<10+1000], pattern(1000, 5))
	// Out of range: refused whole.
	req.Offsets = []uint64{0, 256<<10 - 10, 0}
	if h, body := c.roundTrip(wire.OpPutOpaqueFrom, req.AppendTo(nil)); h.Flags&wire.FlagError == 0 || decodeErr(t, body).Code != wire.CodeMalformed {
		t.Fatal("an out-of-range PUT_OPAQUE_FROM was not refused")
	}
}
