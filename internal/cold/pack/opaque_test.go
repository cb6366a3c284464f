package pack

import (
	"bytes"
	"testing"

	"github.com/gpucache/gpucache/api/identity"
)

// TestOpaqueBlocksRoundTrip: a pack may hold opaque-key blocks (RESP,
// ADR 0016) next to token-chain blocks; the manifest binds each to its own
// key, decodes them back exactly, and a record whose key is not the key
// of its opaque name fails closed.
func TestOpaqueBlocksRoundTrip(t *testing.T) {
	ns := testNamespace("acme")
	d, _ := ns.Digest()
	ids := chain(t, ns, 2, 7)
	blocks := blocksOf(ids, 100)
	for i, name := range []string{"m@00000000@0@aa", "m@00000001@0@aa"} {
		blocks = append(blocks, Block{Identity: identity.CacheIdentity{Namespace: ns, Opaque: []byte(name)},
			Payload: bytes.Repeat([]byte{byte(i + 1)}, 300+i)})
	}
	p := mustBuild(t, ns, blocks)
	m := mustDecode(t, p.Manifest.Body)
	for i, b := range blocks {
		k := b.Identity.KeyIn(d)
		rg, ok := m.Find(k)
		if !ok {
			t.Fatalf("block %d not in the manifest", i)
		}
		if !bytes.Equal(rg.Identity.Opaque, b.Identity.Opaque) || len(rg.Identity.Tokens) != len(b.Identity.Tokens) {
			t.Fatalf("block %d decoded as another identity", i)
		}
		if rg.Length != uint64(len(b.Payload)) {
			t.Fatalf("block %d length %d", i, rg.Length)
		}
	}
	// The opaque name is bound by the key: rename it and the manifest no
	// longer decodes.
	body := bytes.Replace(bytes.Clone(p.Manifest.Body), []byte("m@00000001@0@aa"), []byte("m@00000001@0@ab"), 1)
	if _, err := DecodeManifest(body); err == nil {
		t.Fatal("a manifest whose opaque name does not match its key decoded")
	}
}
