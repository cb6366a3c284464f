package server

import (
	"bytes"
	"sync"
	"testing"

	"github.com/gpucache/gpucache/api/identity"
	"github.com/gpucache/gpucache/api/wire"
	"github.com/gpucache/gpucache/internal/control"
	"github.com/gpucache/gpucache/internal/testfix"
)

// putOpaqueBody builds a PUT_OPAQUE body.
func putOpaqueBody(nsBlob []byte, blocks []wire.OpaqueBlock, payloads [][]byte) []byte {
	req := wire.PutOpaqueRequest{Namespace: nsBlob, Blocks: blocks}
	b := wire.AppendMeta(nil, req.AppendTo(nil))
	for _, p := range payloads {
		b = append(b, p...)
	}
	return b
}

// putOpaque stores payloads under names, each with the key keyOf gives,
// and returns the statuses.
func (c *rawConn) putOpaque(nsBlob []byte, names []string, keys []identity.BlockKey, payloads [][]byte) []wire.Status {
	c.t.Helper()
	blocks := make([]wire.OpaqueBlock, len(names))
	for i := range names {
		blocks[i] = wire.OpaqueBlock{Key: keys[i], Name: []byte(names[i]), Len: uint32(len(payloads[i]))}
	}
	h, body := c.roundTrip(wire.OpPutOpaque, putOpaqueBody(nsBlob, blocks, payloads))
	if h.Flags&wire.FlagError != 0 {
		c.t.Fatalf("put opaque: %v", decodeErr(c.t, body))
	}
	var resp wire.StatusResponse
	if err := resp.Decode(body, wire.DefaultMaxBatch); err != nil || len(resp.Statuses) != len(names) {
		c.t.Fatalf("put opaque response: %v %v", err, resp)
	}
	return resp.Statuses
}

func opaqueKeyOf(t *testing.T, ns identity.Namespace, name string) identity.BlockKey {
	t.Helper()
	d, err := ns.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return identity.OpaqueKey(d, []byte(name))
}

// TestPutOpaque: a version-3 session stores opaque-key blocks; the server
// verifies each key as OpaqueKey(ns digest, name) (a token-chain key or a
// key of another name is KEY_MISMATCH), a second store is EXISTS and
// leaves the bytes alone, GET reads the block by key, Lower.Stored sees the
// opaque identity, and an oversized block is TOO_LARGE without upsetting
// the stream.
func TestPutOpaque(t *testing.T) {
	type stored struct {
		id  identity.CacheIdentity
		key identity.BlockKey
	}
	var mu sync.Mutex
	var seen []stored
	ts := startServer(t, func(c *Config) {
		c.Lower = &tierFuncs{stored: func(id identity.CacheIdentity, _ identity.NamespaceDigest, key identity.BlockKey) {
			mu.Lock()
			defer mu.Unlock()
			id.Opaque = bytes.Clone(id.Opaque)
			seen = append(seen, stored{id, key})
		}}
	})
	ns := testNamespace("acme")
	blob := mustCanonical(t, ns)
	c, resp := helloV(t, ts.addr, "acme", 1, wire.VersionMax)
	if resp.Version != wire.VersionMax {
		t.Fatalf("negotiated %d", resp.Version)
	}
	name := "llama@00000000@0@ab12cd"
	key := opaqueKeyOf(t, ns, name)
	one, two := testfix.Payload(3000, 1), testfix.Payload(3000, 2)
	chain := mustKey(t, testID(1))
	st := c.putOpaque(blob, []string{name, "other", name, "big"},
		[]identity.BlockKey{key, key, chain, opaqueKeyOf(t, ns, "big")},
		[][]byte{one, two, two, make([]byte, 2<<20)})
	want := []wire.Status{wire.StatusStored, wire.StatusKeyMismatch, wire.StatusKeyMismatch, wire.StatusTooLarge}
	for i := range want {
		if st[i] != want[i] {
			t.Fatalf("statuses %v, want %v", st, want)
		}
	}
	if st := c.putOpaque(blob, []string{name}, []identity.BlockKey{key}, [][]byte{two}); st[0] != wire.StatusExists {
		t.Fatalf("second store %v, want EXISTS", st)
	}
	g, payload, _ := c.get(blob, 0, key)
	if g.Blocks[0].Status != wire.StatusHit {
		t.Fatalf("get %v", g)
	}
	equalBytes(t, payload, one)
	// Another tenant's namespace misses the same name.
	other := mustCanonical(t, testNamespace("beta"))
	cb, _ := helloV(t, ts.addr, "beta", 1, wire.VersionMax)
	if g, _, _ := cb.get(other, 0, opaqueKeyOf(t, testNamespace("beta"), name)); g.Blocks[0].Status != wire.StatusMiss {
		t.Fatalf("tenant beta reads acme's block: %v", g)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 1 || seen[0].key != key || string(seen[0].id.Opaque) != name || seen[0].id.Namespace != ns ||
		len(seen[0].id.Tokens) != 0 || seen[0].id.KeyIn(mustDigest(t, ns)) != key {
		t.Fatalf("Lower.Stored saw %+v", seen)
	}
}

func mustDigest(t *testing.T, ns identity.Namespace) identity.NamespaceDigest {
	t.Helper()
	d, err := ns.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestPutOpaqueVersions: PUT_OPAQUE is a version-3 operation: a version-2
// session gets UNKNOWN_OPCODE with its body skipped (the connection
// stays), and a server pinned to version 2 never negotiates 3.
func TestPutOpaqueVersions(t *testing.T) {
	ts := startServer(t, nil)
	blob := mustCanonical(t, testNamespace("acme"))
	key := opaqueKeyOf(t, testNamespace("acme"), "k")
	body := putOpaqueBody(blob, []wire.OpaqueBlock{{Key: key, Name: []byte("k"), Len: 3}}, [][]byte{[]byte("abc")})
	c, _ := helloV(t, ts.addr, "acme", 1, 2)
	c.send(wire.OpPutOpaque, body)
	c.expectError(wire.CodeUnknownOpcode)
	if g, _, _ := c.get(blob, 0, key); g.Blocks[0].Status != wire.StatusMiss {
		t.Fatalf("a refused PUT_OPAQUE stored its block: %v", g)
	}
	pinned := startServer(t, func(c *Config) { c.MaxVersion = 2 })
	if _, resp := helloV(t, pinned.addr, "acme", 1, wire.VersionMax); resp.Version != wire.Version2 {
		t.Fatalf("pinned server negotiated %d", resp.Version)
	}
}

// TestPutOpaqueOwnership: in a cluster, PUT_OPAQUE of a key another member
// owns is WRONG_EPOCH with the body skipped, like PUT.
func TestPutOpaqueOwnership(t *testing.T) {
	v, err := control.NewView(7, testMembers())
	if err != nil {
		t.Fatal(err)
	}
	ts, _ := startClusterServer(t, "node-a", v, nil)
	ns := testNamespace("acme")
	blob := mustCanonical(t, ns)
	var own, foreign string
	for i := 0; own == "" || foreign == ""; i++ {
		name := string(rune('a'+i%26)) + string(rune('a'+i/26))
		if m, _ := control.Owner(v, opaqueKeyOf(t, ns, name)); m.ID == "node-a" {
			own = name
		} else {
			foreign = name
		}
	}
	c, _ := helloV(t, ts.addr, "acme", 1, wire.VersionMax)
	blocks := []wire.OpaqueBlock{{Key: opaqueKeyOf(t, ns, foreign), Name: []byte(foreign), Len: 2}}
	c.send(wire.OpPutOpaque, putOpaqueBody(blob, blocks, [][]byte{[]byte("xy")}))
	if e := c.expectError(wire.CodeWrongEpoch); e.Epoch != 7 {
		t.Fatalf("epoch %d", e.Epoch)
	}
	if st := c.putOpaque(blob, []string{own}, []identity.BlockKey{opaqueKeyOf(t, ns, own)}, [][]byte{[]byte("xy")}); st[0] != wire.StatusStored {
		t.Fatalf("owned key: %v", st)
	}
}
