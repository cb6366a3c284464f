package server

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/gpucache/gpucache/api/identity"
	"github.com/gpucache/gpucache/api/wire"
)

// FuzzUnixConn drives the Unix-socket connection handler end to end: a
// real server on a real Unix socket, a client that opens a version-5
// session and registers two regions (a sealed memfd as region 1, a
// /dev/shm file as region 2, GUARDED), then sends the input's bytes as the
// rest of its stream (bit 0 of the first byte attaches one more
// descriptor to them). After the stream the client half-closes; the server
// must end the connection, and afterwards hold nothing: no reservation,
// pin, lease, mapped region, or descriptor.
//
// Seeds are in testdata/fuzz/FuzzUnixConn/; TestWriteConnFuzzSeeds-style
// regeneration: go test -run TestWriteUnixFuzzSeeds -conn-fuzz-seeds.
func FuzzUnixConn(f *testing.F) {
	f.Add([]byte{0})
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) == 0 {
			return
		}
		runUnixFuzz(t, in[0]&1 != 0, in[1:])
	})
}

// unixFuzzRegion is the size of each region the fuzz client registers.
const unixFuzzRegion = 64 << 10

func runUnixFuzz(t *testing.T, extraFD bool, stream []byte) {
	fdsBefore := openFDs(t)
	srv, store := connFuzzServer(t, connFuzzMode{})
	defer store.Close()
	path := filepath.Join(t.TempDir(), "f.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.ServeUnix(ln) }()

	nc, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	uc := nc.(*net.UnixConn)
	uc.SetDeadline(time.Now().Add(time.Minute)) // a safety net: a hang fails
	drained := make(chan error, 1)
	go func() {
		_, err := io.Copy(io.Discard, uc)
		drained <- err
	}()
	send := func(b []byte, fd int) {
		var oob []byte
		if fd >= 0 {
			oob = syscall.UnixRights(fd)
		}
		uc.WriteMsgUnix(b, oob, nil) // an error: the server closed first
	}
	send(nativeFrame(wire.OpHello, 0, (&wire.HelloRequest{MinVersion: 1, MaxVersion: wire.VersionMax, Tenant: "default", Client: "fuzz"}).AppendTo(nil)), -1)
	sealed := fuzzMemfd(t)
	send(nativeFrame(wire.OpRegister, 0, (&wire.RegisterRequest{Region: 1, Length: unixFuzzRegion}).AppendTo(nil)), sealed)
	if shm, err := os.CreateTemp("/dev/shm", "gpucache-fuzz-*"); err == nil {
		shm.Truncate(unixFuzzRegion)
		send(nativeFrame(wire.OpRegister, 0, (&wire.RegisterRequest{Region: 2, Length: unixFuzzRegion}).AppendTo(nil)), int(shm.Fd()))
		os.Remove(shm.Name())
		shm.Close()
	}
	extra := -1
	if extraFD {
		extra = sealed
	}
	if len(stream) > 0 {
		send(stream, extra)
	}
	syscall.Close(sealed)
	uc.CloseWrite()
	<-drained
	uc.Close()
	if err := srv.Shutdown(context.Background()); err != nil {
		t.Errorf("shutdown: %v", err)
	}
	if err := <-served; err != nil && err != ErrClosed {
		t.Errorf("serve: %v", err)
	}
	if st := store.Stats(); st.InFlight != 0 || st.Pinned != 0 || st.LeasesActive != 0 {
		t.Errorf("after the connection ended: %d reservations in flight, %d pinned, %d leases", st.InFlight, st.Pinned, st.LeasesActive)
	}
	if total, n, _ := srv.RegionUsage("default"); total != 0 || n != 0 {
		t.Errorf("after the connection ended: %d regions of %d bytes still mapped", n, total)
	}
	if after := openFDs(t); after != fdsBefore {
		t.Errorf("%d descriptors open before the connection, %d after", fdsBefore, after)
	}
}

// fuzzMemfd returns a sealed memfd of unixFuzzRegion bytes.
func fuzzMemfd(t *testing.T) int {
	t.Helper()
	name := []byte("fuzz\x00")
	fd, _, errno := syscall.Syscall(319, uintptr(unsafePointer(&name[0])), 0x1|0x2, 0)
	if errno != 0 {
		t.Skipf("memfd_create: %v", errno)
	}
	syscall.Ftruncate(int(fd), unixFuzzRegion)
	syscall.Syscall(syscall.SYS_FCNTL, fd, 1033, 0x2|0x4)
	return int(fd)
}

// openFDs counts this process's open descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd: %v", err)
	}
	return len(ents)
}

// TestWriteUnixFuzzSeeds writes FuzzUnixConn's seeds (with
// -conn-fuzz-seeds), or checks they are in the corpus.
func TestWriteUnixFuzzSeeds(t *testing.T) {
	dir := filepath.Join("testdata", "fuzz", "FuzzUnixConn")
	seeds := unixSeeds(t)
	if *connFuzzSeeds {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, seed := range slices.Sorted(maps.Keys(seeds)) {
		file := filepath.Join(dir, "seed-"+seed)
		want := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", seeds[seed])
		if *connFuzzSeeds {
			if err := os.WriteFile(file, []byte(want), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if got, err := os.ReadFile(file); err != nil || string(got) != want {
			t.Errorf("%s is missing or stale (err %v): run go test -run TestWriteUnixFuzzSeeds -conn-fuzz-seeds", file, err)
		}
	}
}

// unixSeeds are region requests, valid and not, alone and pipelined.
func unixSeeds(t *testing.T) map[string][]byte {
	ns := mustCanonical(t, testNamespace("default"))
	ids, keys := make([]identity.CacheIdentity, 3), make([]identity.BlockKey, 3)
	var parent identity.BlockKey
	for i := range ids {
		id := testID(uint32(i + 1))
		id.Namespace, id.Parent, id.Position = testNamespace("default"), parent, uint64(16*i)
		ids[i], keys[i] = id, mustKey(t, id)
		parent = keys[i]
	}
	putFrom := func(region uint32, offs ...uint64) []byte {
		var blocks []wire.PutBlock
		for i := range offs {
			blocks = append(blocks, putBlock(keys[i], ids[i], 4096))
		}
		return nativeFrame(wire.OpPutFrom, 0, (&wire.PutFromRequest{Region: region, Offsets: offs, Put: wire.PutRequest{Namespace: ns, Blocks: blocks}}).AppendTo(nil))
	}
	getInto := func(region uint32, slots ...wire.Slot) []byte {
		return nativeFrame(wire.OpGetInto, 0, (&wire.GetIntoRequest{Namespace: ns, Region: region, Keys: keys[:len(slots)], Slots: slots}).AppendTo(nil))
	}
	d := mustDigest(t, testNamespace("default"))
	ok1 := identity.OpaqueKey(d, []byte("c1"))
	putOpaqueFrom := nativeFrame(wire.OpPutOpaqueFrom, 0, (&wire.PutOpaqueFromRequest{Region: 1, Offsets: []uint64{0},
		Put: wire.PutOpaqueRequest{Namespace: ns, Blocks: []wire.OpaqueBlock{{Key: ok1, Name: []byte("c1"), Len: 4096}}}}).AppendTo(nil))
	frames := map[string][]byte{
		"put-opaque-from":   putOpaqueFrom,
		"put-from":          putFrom(1, 0, 4096, 8192),
		"put-from-guarded":  putFrom(2, 0, 100),
		"put-from-outside":  putFrom(1, unixFuzzRegion-10),
		"put-from-unknown":  putFrom(9, 0),
		"get-into":          getInto(1, wire.Slot{Offset: 0, Len: 4096}, wire.Slot{Offset: 4096, Len: 4096}),
		"get-into-guarded":  getInto(2, wire.Slot{Offset: 8192, Len: 8192}),
		"get-into-overlap":  getInto(1, wire.Slot{Offset: 0, Len: 4096}, wire.Slot{Offset: 100, Len: 4096}),
		"get-into-outside":  getInto(1, wire.Slot{Offset: 1 << 62, Len: 4096}),
		"get-into-short":    getInto(1, wire.Slot{Offset: 0, Len: 10}),
		"unregister":        nativeFrame(wire.OpUnregister, 0, (&wire.UnregisterRequest{Region: 1}).AppendTo(nil)),
		"unregister-bad":    nativeFrame(wire.OpUnregister, 0, (&wire.UnregisterRequest{Region: 5}).AppendTo(nil)),
		"register-no-fd":    nativeFrame(wire.OpRegister, 0, (&wire.RegisterRequest{Region: 3, Length: 4096}).AppendTo(nil)),
		"register-dup":      nativeFrame(wire.OpRegister, 0, (&wire.RegisterRequest{Region: 1, Length: 4096}).AppendTo(nil)),
		"register-malform":  nativeFrame(wire.OpRegister, 0, []byte{1}),
		"put-then-get":      append(nativeFrame(wire.OpPut, 0, putBody(ns, []wire.PutBlock{putBlock(keys[0], ids[0], 4096)}, [][]byte{make([]byte, 4096)})), getInto(1, wire.Slot{Len: 4096})...),
		"get-into-v5-table": getInto(1),
	}
	out := map[string][]byte{}
	var all []byte
	for _, name := range slices.Sorted(maps.Keys(frames)) {
		out["m0-"+name] = append([]byte{0}, frames[name]...)
		all = append(all, frames[name]...)
	}
	out["m0-pipelined"] = append([]byte{0}, all...)
	out["m1-register-extra-fd"] = append([]byte{1}, nativeFrame(wire.OpRegister, 0, (&wire.RegisterRequest{Region: 3, Length: 4096}).AppendTo(nil))...)
	out["m1-stray-fd"] = append([]byte{1}, frames["get-into"]...)
	return out
}
