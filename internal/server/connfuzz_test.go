package server

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gpucache/gpucache/api/identity"
	"github.com/gpucache/gpucache/api/wire"
	"github.com/gpucache/gpucache/internal/hot"
	"github.com/gpucache/gpucache/internal/security"
	"github.com/gpucache/gpucache/internal/security/antireplay"
	"github.com/gpucache/gpucache/internal/security/audit"
	"github.com/gpucache/gpucache/internal/testfix"
)

// Whole-connection fuzzing: the input's bytes go, as one client's stream,
// through a real Server's reader, dispatch and handlers on a net.Pipe, for
// the native protocol (FuzzNativeConn) and the RESP endpoint
// (FuzzRESPConn). Each input runs in a synctest bubble with a fresh server
// and hot tier, so it is deterministic, and a handler that waits for
// anything but the stream (a hang) is reported as a deadlock instead of
// stalling the fuzzer. The stream is closed once the server has read all
// of it; the connection must then end, and the server shut down with
// nothing left reserved or charged.
//
// The first byte chooses the mode (connFuzzMode); the rest is the stream.
// Seeds are in testdata/fuzz/<FuzzName>/; TestWriteConnFuzzSeeds writes
// them (-conn-fuzz-seeds).

// connFuzzMode is what the first input byte selects.
type connFuzzMode struct {
	secure bool // tenants and AUTH/HELLO credentials (else open mode)
	login  bool // the stream starts with a valid AUTH or HELLO
	// version is the HELLO's MaxVersion (native; 1..3).
	version uint8
	// anyKey is the RESP profile's key_format any (else lmcache).
	anyKey bool
}

func parseConnFuzzMode(b byte) connFuzzMode {
	return connFuzzMode{secure: b&1 != 0, login: b&2 != 0, version: 1 + min((b>>2)&3, 2), anyKey: b&16 != 0}
}

func (m connFuzzMode) byte() byte {
	var b byte
	if m.secure {
		b |= 1
	}
	if m.login {
		b |= 2
	}
	b |= (max(m.version, 1) - 1) << 2
	if m.anyKey {
		b |= 16
	}
	return b
}

// connFuzzServer is a fresh server for one input: a small hot tier,
// the test tenants in secure mode (under a fixed clock), RESP profiles for
// acme and default, and no wait for request buffers, so an input's time
// is bounded by its bytes.
func connFuzzServer(t *testing.T, m connFuzzMode) (*Server, *hot.Store) {
	store, err := hot.New(hot.Config{CapacityBytes: 1 << 20, MinClass: 4 << 10, MaxClass: 64 << 10, SlabBytes: 256 << 10,
		TagSize: HotTagSize, TenantHoldBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	prof := respProfile(0)
	prof.AnyKey = m.anyKey
	cfg := Config{Store: store, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Limits:       wire.Limits{MaxFrame: 256 << 10, MaxBatch: 64, MaxInFlight: 4},
		RESPProfiles: map[string]RESPProfile{"acme": prof, "default": prof},
		BufferWait:   time.Nanosecond,
	}
	if m.secure {
		clock := testfix.NewClock(time.Unix(1_800_000_000, 0))
		w, err := antireplay.New(antireplay.Config{Window: 5 * time.Minute, MaxNonces: 64, TenantNonces: 16, Now: clock.Now})
		if err != nil {
			t.Fatal(err)
		}
		cfg.Guard, err = security.NewGuard(testPolicy(t, testTenants(), nil), w, audit.New(io.Discard), clock.Now)
		if err != nil {
			t.Fatal(err)
		}
	}
	srv, err := New(cfg)
	if err != nil {
		store.Close()
		t.Fatal(err)
	}
	return srv, store
}

// runConnFuzz sends stream to a fresh server as one client, closes it
// once the server has read it (or stopped reading), and checks the
// connection ended and the server shut down with nothing held.
func runConnFuzz(t *testing.T, m connFuzzMode, serve func(*Server, net.Listener) error, stream []byte) {
	synctest.Test(t, func(t *testing.T) {
		srv, store := connFuzzServer(t, m)
		defer store.Close()
		ln := newPipeListener()
		served := make(chan error, 1)
		go func() { served <- serve(srv, ln) }()
		client := ln.Dial(t, net.IPv4(10, 0, 0, 1))
		drained := make(chan struct{})
		go func() {
			defer close(drained)
			io.Copy(io.Discard, client)
		}()
		client.Write(stream) // returns once the server read it all, or an error once it closed
		// Let the server execute what it read and write its replies (the
		// drain reads them) until it waits for more: so every input runs
		// the same steps, whatever the scheduling.
		synctest.Wait()
		client.Close()
		<-drained
		if err := srv.Shutdown(context.Background()); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
		if st := store.Stats(); st.InFlight != 0 || st.Pinned != 0 || st.LeasesActive != 0 {
			t.Errorf("after the connection ended: %d reservations in flight, %d pinned, %d leases", st.InFlight, st.Pinned, st.LeasesActive)
		}
		for _, e := range srv.Stats() {
			switch e.Name {
			case "conn_panics", "request_buffer_bytes", "conns_open", "conns_unauthenticated", "fill_live", "fill_waiters":
				if e.Value != 0 {
					t.Errorf("%s %d after the connection ended", e.Name, e.Value)
				}
			}
		}
	})
}

// nativeLogin is a HELLO frame that opens a session in mode m.
func nativeLogin(m connFuzzMode) []byte {
	req := wire.HelloRequest{MinVersion: 1, MaxVersion: m.version, Tenant: security.DefaultTenant, Client: "fuzz"}
	if m.secure {
		req.Tenant = ""
		req.HasAuth, req.Auth, req.Credential = true, wire.AuthBearer, secretA
	}
	return nativeFrame(wire.OpHello, 0, req.AppendTo(nil))
}

// nativeFrame is one request frame.
func nativeFrame(op wire.Opcode, flags wire.Flags, body []byte) []byte {
	h := wire.Header{Version: wire.FrameVersion, Op: op, Flags: flags, RequestID: 1, BodyLen: uint32(len(body))}
	return append(h.Append(nil), body...)
}

// respLogin is an AUTH that opens acme's session (or is ignored in open
// mode).
func respLogin() []byte { return command([]byte("AUTH"), []byte("acme"), secretA) }

func FuzzNativeConn(f *testing.F) { fuzzConn(f, nativeLogin, (*Server).Serve) }

func FuzzRESPConn(f *testing.F) {
	fuzzConn(f, func(connFuzzMode) []byte { return respLogin() }, (*Server).ServeRESP)
}

// fuzzConn drives one connection handler with the input's bytes: the first
// byte picks the mode (and whether login's frames go first), the rest is
// the stream.
func fuzzConn(f *testing.F, login func(connFuzzMode) []byte, serve func(*Server, net.Listener) error) {
	f.Add([]byte{0})
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) == 0 {
			return
		}
		m := parseConnFuzzMode(in[0])
		var stream []byte
		if m.login {
			stream = login(m)
		}
		stream = append(stream, in[1:]...)
		runConnFuzz(t, m, serve, stream)
	})
}

var connFuzzSeeds = flag.Bool("conn-fuzz-seeds", false, "write the seed corpora of FuzzNativeConn and FuzzRESPConn")

// TestWriteConnFuzzSeeds writes the seeds of the connection fuzz targets
// (with -conn-fuzz-seeds): every kind of request the other tests send,
// alone and pipelined, malformed frames, and inputs that once stopped the
// server. Without the flag it only checks that each seed is in the corpus.
func TestWriteConnFuzzSeeds(t *testing.T) {
	for name, seeds := range map[string]map[string][]byte{"FuzzNativeConn": nativeSeeds(t), "FuzzRESPConn": respSeeds()} {
		dir := filepath.Join("testdata", "fuzz", name)
		if *connFuzzSeeds {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		for seed, in := range seeds {
			file := filepath.Join(dir, "seed-"+seed)
			want := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", in)
			if *connFuzzSeeds {
				if err := os.WriteFile(file, []byte(want), 0o644); err != nil {
					t.Fatal(err)
				}
				continue
			}
			if got, err := os.ReadFile(file); err != nil || string(got) != want {
				t.Errorf("%s is missing or stale (err %v): run go test -run TestWriteConnFuzzSeeds -conn-fuzz-seeds", file, err)
			}
		}
	}
}

// nativeSeeds are the native protocol's seeds, each a mode byte and a
// stream.
func nativeSeeds(t *testing.T) map[string][]byte {
	out := map[string][]byte{}
	for _, m := range []connFuzzMode{{login: true, version: 3}, {secure: true, login: true, version: 3}, {secure: true, version: 1}} {
		tenant := security.DefaultTenant
		if m.secure {
			tenant = "acme"
		}
		ns := mustCanonical(t, testNamespace(tenant))
		id := testID(1)
		id.Namespace = testNamespace(tenant)
		key := mustKey(t, id)
		payload := bytes.Repeat([]byte{0xab}, 4<<10)
		tok := wire.FillToken{Fill: 1, Epoch: 1, Turn: 1} // the first ACQUIRE's
		var nonce byte
		frame := func(op wire.Opcode, body []byte) []byte {
			if !m.secure || !op.Mutating() {
				return nativeFrame(op, 0, body)
			}
			nonce++ // a stamp is good once
			st := antireplay.NewStamp(time.Unix(1_800_000_000, 0), [16]byte{nonce})
			return nativeFrame(op, wire.FlagStamped, append(st.Append(nil), body...))
		}
		lookup := wire.LookupRequest{Namespace: ns, LeaseTTLMillis: 1000, Keys: []wire.Key{key}}
		get := wire.GetRequest{Namespace: ns, Keys: []wire.Key{key, {}}}
		del := wire.DeleteRequest{Namespace: ns, Keys: []wire.Key{key}}
		acq := wire.AcquireRequest{Namespace: ns, Keys: []wire.Key{key}}
		abort := wire.FillAbortRequest{Namespace: ns, Tokens: []wire.FillToken{tok}}
		wait := wire.WaitRequest{Namespace: ns, TimeoutMillis: 60000, Fills: []uint64{1}}
		commit := wire.FillCommitRequest{Namespace: ns, Blocks: []wire.FillBlock{{Token: tok, Key: key, Parent: id.Parent,
			ValidLength: id.ValidLength, Len: uint32(len(payload)), Position: id.Position, TokenIDs: id.Tokens}}}
		okey := identity.OpaqueKey(mustDigest(t, testNamespace(tenant)), []byte("k1"))
		opaque := putOpaqueBody(ns, []wire.OpaqueBlock{{Key: okey, Name: []byte("k1"), Len: uint32(len(payload))}}, [][]byte{payload})
		frames := map[string][]byte{
			"ping":        frame(wire.OpPing, []byte("still serving")),
			"ping-empty":  frame(wire.OpPing, nil),
			"stat":        frame(wire.OpStat, nil),
			"members":     frame(wire.OpMembers, nil),
			"lookup":      frame(wire.OpLookup, lookup.AppendTo(nil)),
			"get":         frame(wire.OpGet, get.AppendTo(nil)),
			"put":         frame(wire.OpPut, putBody(ns, []wire.PutBlock{putBlock(key, id, len(payload))}, [][]byte{payload})),
			"delete":      frame(wire.OpDelete, del.AppendTo(nil)),
			"acquire":     frame(wire.OpAcquire, acq.AppendTo(nil)),
			"fill-commit": frame(wire.OpFillCommit, append(wire.AppendMeta(nil, commit.AppendTo(nil)), payload...)),
			"fill-abort":  frame(wire.OpFillAbort, abort.AppendTo(nil)),
			"wait":        frame(wire.OpWait, wait.AppendTo(nil)),
			"put-opaque":  frame(wire.OpPutOpaque, opaque),
			"stale-stamp": nativeFrame(wire.OpDelete, wire.FlagStamped, append(antireplay.NewStamp(time.Unix(1, 0), [16]byte{}).Append(nil), del.AppendTo(nil)...)),
			"bad-magic":   append([]byte("GET / HTTP/1.1\r\n"), make([]byte, wire.HeaderSize)...),
			"unknown-op":  nativeFrame(wire.Opcode(200), 0, []byte("x")),
			"too-large":   wire.Header{Version: wire.FrameVersion, Op: wire.OpPut, RequestID: 1, BodyLen: 1 << 30}.Append(nil),
			"truncated":   nativeFrame(wire.OpGet, 0, get.AppendTo(nil))[:wire.HeaderSize+5],
			"short-stamp": wire.Header{Version: wire.FrameVersion, Op: wire.OpDelete, Flags: wire.FlagStamped, RequestID: 1, BodyLen: 3}.Append(nil),
		}
		var all []byte
		for _, name := range slices.Sorted(maps.Keys(frames)) {
			if !strings.HasPrefix(name, "bad") && name != "too-large" && name != "truncated" {
				all = append(all, frames[name]...)
			}
			out[fmt.Sprintf("m%d-%s", m.byte(), name)] = append([]byte{m.byte()}, frames[name]...)
		}
		out[fmt.Sprintf("m%d-pipelined", m.byte())] = append([]byte{m.byte()}, all...)
		if !m.login {
			wrong := wire.HelloRequest{MinVersion: 1, MaxVersion: 3, Client: "fuzz", HasAuth: true, Auth: wire.AuthBearer, Credential: []byte("wrong")}
			out[fmt.Sprintf("m%d-hello-wrong", m.byte())] = append([]byte{m.byte()}, bytes.Repeat(nativeFrame(wire.OpHello, 0, wrong.AppendTo(nil)), 3)...)
		}
	}
	return out
}

// respSeeds are the RESP endpoint's seeds.
func respSeeds() map[string][]byte {
	long := strings.Repeat("v", 5000)
	cmds := map[string][]byte{
		"ping":          command(strs("PING")...),
		"ping-msg":      command(strs("PING", "hello")...),
		"ping-long":     command(strs("PING", long)...),
		"auth":          command(strs("AUTH", "acme", string(secretA))...),
		"auth-secret":   command(strs("AUTH", string(secretA))...),
		"auth-wrong":    bytes.Repeat(command(strs("AUTH", "acme", "not-the-secret")...), 3),
		"set":           command(strs("SET", mpKey(1), "chunk")...),
		"set-long":      command(strs("SET", mpKey(2), long)...),
		"set-anykey":    command(strs("SET", "key:000000000042", "xxx")...),
		"set-metadata":  command(strs("SET", respModel+"@1@0@00ff@bfloat16metadata", strings.Repeat("m", 28))...),
		"set-options":   command(strs("SET", mpKey(1), "v", "EX", "10")...),
		"get":           command(strs("GET", mpKey(1))...),
		"exists":        command(strs("EXISTS", mpKey(1), mpKey(2))...),
		"del":           command(strs("DEL", mpKey(1), mpKey(2))...),
		"select":        command(strs("SELECT", "0")...),
		"client":        command(strs("CLIENT", "SETNAME", "lmcache")...),
		"config-save":   command(strs("CONFIG", "GET", "save")...),
		"config-aof":    command(strs("CONFIG", "GET", "appendonly")...),
		"config-other":  command(strs("CONFIG", "SET", "x", "y")...),
		"hello":         command(strs("HELLO", "3")...),
		"unknown":       command(strs("FLUSHALL")...),
		"unknown-long":  command(strs("ECHO", long)...),
		"quit":          command(strs("QUIT")...),
		"empty-arrays":  []byte("*0\r\n*-1\r\n"),
		"long-name":     []byte(longName),
		"long-name-all": []byte(longName + strings.Repeat("P", 4097) + "\r\n"),
		"inline":        []byte("GET key\r\n"),
		"negative-len":  []byte("*2\r\n$3\r\nGET\r\n$-5\r\n"),
		"garbage-len":   []byte("*2\r\n$3\r\nGET\r\n$1x\r\nk\r\n"),
		"garbage-array": []byte("*zz\r\n"),
		"huge-array":    []byte("*100000000\r\n"),
		"oversized":     []byte("*3\r\n$3\r\nSET\r\n$3\r\nkey\r\n$99999999\r\n"),
		"truncated-set": []byte("*3\r\n$3\r\nSET\r\n$" + fmt.Sprint(len(mpKey(5))) + "\r\n" + mpKey(5) + "\r\n$100000\r\nabc"),
	}
	// Commands that end the connection are left out of the pipelined seed.
	closing := []string{"quit", "auth-wrong", "long-name", "long-name-all", "inline", "negative-len", "garbage-len",
		"garbage-array", "huge-array", "oversized", "truncated-set"}
	out := map[string][]byte{}
	for _, m := range []connFuzzMode{{}, {login: true}, {secure: true}, {secure: true, login: true}, {secure: true, login: true, anyKey: true}} {
		var all []byte
		for _, name := range slices.Sorted(maps.Keys(cmds)) {
			out[fmt.Sprintf("m%d-%s", m.byte(), name)] = append([]byte{m.byte()}, cmds[name]...)
			if !slices.Contains(closing, name) {
				all = append(all, cmds[name]...)
			}
		}
		out[fmt.Sprintf("m%d-pipelined", m.byte())] = append([]byte{m.byte()}, all...)
	}
	return out
}
