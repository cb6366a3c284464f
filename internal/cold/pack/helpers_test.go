package pack

import (
	"bytes"
	"testing"
	"time"

	"github.com/gpucache/gpucache/api/identity"
	"github.com/gpucache/gpucache/internal/security/seal"
)

func testNamespace(tenant string) identity.Namespace {
	return identity.Namespace{
		Tenant:            tenant,
		TrustDomain:       "prod",
		ModelID:           "meta-llama/Llama-3.1-8B-Instruct",
		ConfigRevision:    "0e9e39f",
		TokenizerRevision: "5f0b02c",
		Adapter:           "",
		RoPE:              "llama3 theta=500000",
		DType:             "bf16",
		Quantization:      "none",
		Layout: identity.Layout{
			Format: "vllm-nhd", TPRank: 0, TPSize: 1, PPRank: 0, PPSize: 1,
			LayerStart: 0, LayerCount: 32, KVHeads: 8, HeadDim: 128, BlockTokens: 4,
		},
	}
}

// chain returns n identities of one token chain starting at token seed.
func chain(t testing.TB, ns identity.Namespace, n int, seed uint32) []identity.CacheIdentity {
	t.Helper()
	tokens := make([]uint32, n*int(ns.Layout.BlockTokens))
	for i := range tokens {
		tokens[i] = seed + uint32(i)
	}
	ids, err := identity.Identities(ns, tokens)
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// payload returns size deterministic bytes derived from the block's first
// token, so different blocks get different bytes.
func payload(id identity.CacheIdentity, size int) []byte {
	b := make([]byte, size)
	for j := range b {
		b[j] = byte(int(id.Tokens[0])*31 + j*7 + j>>8)
	}
	return b
}

func blocksOf(ids []identity.CacheIdentity, size int) []Block {
	bs := make([]Block, len(ids))
	for i, id := range ids {
		bs[i] = Block{Identity: id, Payload: payload(id, size+i)}
	}
	return bs
}

func mustBuild(t testing.TB, ns identity.Namespace, blocks []Block) *Pack {
	t.Helper()
	p, err := Build(ns, blocks)
	if err != nil {
		t.Fatal(err)
	}
	if err := Verify(p); err != nil {
		t.Fatalf("Verify of a fresh pack: %v", err)
	}
	return p
}

func mustDecode(t testing.TB, b []byte) *Manifest {
	t.Helper()
	m, err := DecodeManifest(b)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// reseal makes p consistent again after a test changed m or obj: it sets the
// pack key, digest and size from obj, re-encodes m, renames the manifest and
// rewrites every pointer. Tests then break exactly one thing.
func reseal(t testing.TB, p *Pack, m *Manifest, obj []byte) {
	t.Helper()
	nsd, err := m.Namespace.Digest()
	if err != nil {
		t.Fatal(err)
	}
	m.PackDigest = Sum(obj)
	m.PackKey = PackKey(nsd, m.PackDigest)
	m.PackSize = uint64(len(obj))
	mb, err := m.Encode()
	if err != nil {
		t.Fatal(err)
	}
	p.Object = Object{Key: m.PackKey, Body: obj}
	p.Manifest = Object{Key: ManifestKey(nsd, Sum(mb)), Body: mb}
	p.Pointers = nil
	for _, r := range m.Ranges {
		ptr := Pointer{Namespace: nsd, Block: r.Key, ManifestKey: p.Manifest.Key, Manifest: Sum(mb), ManifestSize: uint64(len(mb))}
		body, err := ptr.Encode()
		if err != nil {
			t.Fatal(err)
		}
		p.Pointers = append(p.Pointers, Object{Key: ptr.Key(), Body: body})
	}
}

func clonePack(p *Pack) *Pack {
	q := *p
	q.Object.Body = append([]byte(nil), p.Object.Body...)
	q.Manifest.Body = append([]byte(nil), p.Manifest.Body...)
	q.Pointers = append([]Object(nil), p.Pointers...)
	return &q
}

// testEpoch is the fixed time of every test keyring's clock.
var testEpoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// testKeyring returns a keyring at a fixed time holding one key, id, whose
// secret is derived from id (so seals are reproducible).
func testKeyring(t testing.TB, id string) *seal.Keyring {
	t.Helper()
	kr := seal.New(func() time.Time { return testEpoch })
	if err := kr.Add(seal.KeyID(id), bytes.Repeat([]byte(id+"/secret"), 8)[:32], testEpoch); err != nil {
		t.Fatal(err)
	}
	return kr
}

func mustBuildSealed(t testing.TB, ns identity.Namespace, blocks []Block, s Sealer) *Pack {
	t.Helper()
	p, err := BuildWith(ns, blocks, Options{Sealer: s})
	if err != nil {
		t.Fatal(err)
	}
	if err := Verify(p); err != nil {
		t.Fatalf("Verify of a fresh sealed pack: %v", err)
	}
	return p
}

// sealFunc adapts a function to Sealer, for sealers that misbehave.
type sealFunc func(nsCanonical, sealed []byte) (seal.Seal, error)

func (f sealFunc) Seal(nsCanonical, sealed []byte) (seal.Seal, error) { return f(nsCanonical, sealed) }
