package refill

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/gpucache/gpucache/api/identity"
	"github.com/gpucache/gpucache/internal/cold"
	"github.com/gpucache/gpucache/internal/cold/pack"
)

// mutation changes one field of a full identity and keeps it valid.
type mutation struct {
	field string
	block int // which block of the chain to start from
	edit  func(id *identity.CacheIdentity)
}

// everyField lists one mutation per CacheIdentity field: every namespace
// field (tenant, trust domain, model, revisions, adapter, RoPE, dtype,
// quantization, every layout/shard field) and every block field (prefix:
// parent and tokens; position; valid length).
func everyField() []mutation {
	return []mutation{
		{"tenant", 1, func(id *identity.CacheIdentity) { id.Tenant = "globex" }},
		{"trust_domain", 1, func(id *identity.CacheIdentity) { id.TrustDomain = "staging" }},
		{"model_id", 1, func(id *identity.CacheIdentity) { id.ModelID = "meta-llama/Llama-3.1-70B-Instruct" }},
		{"config_revision", 1, func(id *identity.CacheIdentity) { id.ConfigRevision = "1f0e3a1" }},
		{"tokenizer_revision", 1, func(id *identity.CacheIdentity) { id.TokenizerRevision = "6a1c13d" }},
		{"adapter", 1, func(id *identity.CacheIdentity) { id.Adapter = "" }},
		{"rope", 1, func(id *identity.CacheIdentity) { id.RoPE = "llama3 theta=10000" }},
		{"dtype", 1, func(id *identity.CacheIdentity) { id.DType = "fp16" }},
		{"quantization", 1, func(id *identity.CacheIdentity) { id.Quantization = "fp8-e4m3" }},
		{"layout.format", 1, func(id *identity.CacheIdentity) { id.Layout.Format = "vllm-hnd" }},
		{"layout.tp_rank", 1, func(id *identity.CacheIdentity) { id.Layout.TPRank = 1 }},
		{"layout.tp_size", 1, func(id *identity.CacheIdentity) { id.Layout.TPSize = 4 }},
		{"layout.pp_rank", 1, func(id *identity.CacheIdentity) { id.Layout.PPRank = 0 }},
		{"layout.pp_size", 1, func(id *identity.CacheIdentity) { id.Layout.PPSize = 3 }},
		{"layout.layer_start", 1, func(id *identity.CacheIdentity) { id.Layout.LayerStart = 0 }},
		{"layout.layer_count", 1, func(id *identity.CacheIdentity) { id.Layout.LayerCount = 32 }},
		{"layout.kv_heads", 1, func(id *identity.CacheIdentity) { id.Layout.KVHeads = 8 }},
		{"layout.head_dim", 1, func(id *identity.CacheIdentity) { id.Layout.HeadDim = 64 }},
		{"layout.block_tokens", 0, func(id *identity.CacheIdentity) { id.Layout.BlockTokens = 8 }},
		{"prefix.parent", 2, func(id *identity.CacheIdentity) { id.Parent[0] ^= 1 }},
		{"prefix.tokens", 1, func(id *identity.CacheIdentity) { id.Tokens[2]++ }},
		{"position", 1, func(id *identity.CacheIdentity) { id.Position += 4 }},
		{"valid_length", 1, func(id *identity.CacheIdentity) { id.ValidLength-- }},
	}
}

func mutate(t testing.TB, base identity.CacheIdentity, m mutation) identity.CacheIdentity {
	t.Helper()
	id := base
	id.Tokens = slices.Clone(base.Tokens)
	m.edit(&id)
	if err := id.Validate(); err != nil {
		t.Fatalf("mutation %s makes an invalid identity: %v", m.field, err)
	}
	a, _ := base.Canonical()
	b, _ := id.Canonical()
	if bytes.Equal(a, b) {
		t.Fatalf("mutation %s changes nothing", m.field)
	}
	return id
}

// Seed row "Full expected identity": a wrong tenant, trust domain,
// model/config/tokenizer revision, adapter, prefix, position/RoPE,
// dtype/quantization, layout/shard or valid length cannot return payload
// bytes, and causes no payload-range read.
func TestCompleteIdentityMismatchesAreMissesBeforePayloadIO(t *testing.T) {
	ctx := context.Background()
	ids := chain(t, testNamespace("acme"), 3, 100)
	p, _ := buildPack(t, ids, 512)
	genuine, err := pack.DecodeManifest(p.Manifest.Body)
	if err != nil {
		t.Fatal(err)
	}
	fields := everyField()
	if len(fields) != 23 {
		t.Fatalf("%d fields; the identity has 23", len(fields))
	}
	for _, m := range fields {
		t.Run(m.field, func(t *testing.T) {
			wrong := mutate(t, ids[m.block], m)
			e := newEnv(t, Config{})
			e.publish(p)

			// Through the public API, as the index stands.
			dst := filled(512)
			n, res, err := e.r.RefillBlock(ctx, wrong, dst)
			if res.Hit || n != 0 || !allAA(dst) {
				t.Fatalf("RefillBlock = %d, %v, %v", n, res, err)
			}
			if e.payloadReads() != 0 || e.writes() != 0 {
				t.Fatalf("%d payload reads, %d writes", e.payloadReads(), e.writes())
			}

			// With the index tampered so that the wrong identity's pointer
			// leads to the genuine manifest (copied under the wrong
			// namespace's prefix where the namespace differs).
			w, err := prepare(wrong)
			if err != nil {
				t.Fatal(err)
			}
			mkey := pack.ManifestKey(w.nsd, pack.Sum(p.Manifest.Body))
			e.put(mkey, p.Manifest.Body)
			ptr := pack.Pointer{Namespace: w.nsd, Block: w.key, ManifestKey: mkey, Manifest: pack.Sum(p.Manifest.Body), ManifestSize: uint64(len(p.Manifest.Body))}
			body, err := ptr.Encode()
			if err != nil {
				t.Fatal(err)
			}
			e.put(ptr.Key(), body)
			dst = filled(512)
			n, res, err = e.r.RefillBlock(ctx, wrong, dst)
			if res.Hit || n != 0 || !allAA(dst) {
				t.Fatalf("tampered index: RefillBlock = %d, %v, %v", n, res, err)
			}
			if e.payloadReads() != 0 || e.writes() != 0 {
				t.Fatalf("tampered index: %d payload reads, %d writes", e.payloadReads(), e.writes())
			}

			// The byte-for-byte comparison itself. Suppose the keys had led
			// the wrong identity to the genuine block (position is not in
			// the block key, and a key is only a hash): handed the genuine
			// manifest under the genuine key, the wrong identity is still an
			// IdentityMismatch before any payload read.
			g, err := prepare(ids[m.block])
			if err != nil {
				t.Fatal(err)
			}
			forged := w
			forged.nsd, forged.key = g.nsd, g.key
			c, _, _ := e.r.begin(ctx, e.r.cfg.Budget)
			defer c.end()
			dst = filled(512)
			n, res, err = c.payload(forged, genuine, dest{buf: dst})
			expectMiss(t, n, res, IdentityMismatch, dst)
			if err != nil || e.payloadReads() != 0 || !allAA(dst) {
				t.Fatalf("stage check: %v, %d payload reads", err, e.payloadReads())
			}

			// The genuine identity still hits: the miss was the field.
			dst = filled(512)
			if _, res, _ := e.r.RefillBlock(ctx, ids[m.block], dst); !res.Hit {
				t.Fatalf("genuine identity missed: %v", res)
			}
		})
	}
}

// entryPoint adapts one public refill entry point to a single block.
type entryPoint func(r *Refiller, ctx context.Context, expected identity.CacheIdentity, dst []byte) (int, Result, error)

func entryPoints() map[string]entryPoint {
	return map[string]entryPoint{
		"RefillBlock":    (*Refiller).RefillBlock,
		"RefillDegraded": (*Refiller).RefillDegraded,
		"RefillForTenant": func(r *Refiller, ctx context.Context, expected identity.CacheIdentity, dst []byte) (int, Result, error) {
			return r.RefillForTenant(ctx, "acme", expected, dst)
		},
		"RefillKey": func(r *Refiller, ctx context.Context, expected identity.CacheIdentity, dst []byte) (int, Result, error) {
			k, _ := expected.Key() // an invalid identity gives the zero key, which RefillKey refuses
			return r.RefillKey(ctx, expected.Namespace, k, dst)
		},
		"RefillKeyInto": func(r *Refiller, ctx context.Context, expected identity.CacheIdentity, dst []byte) (int, Result, error) {
			k, _ := expected.Key()
			return r.RefillKeyInto(ctx, expected.Namespace, k, func(int) ([]byte, bool) { return dst, true })
		},
		"RefillMatching": func(r *Refiller, ctx context.Context, expected identity.CacheIdentity, dst []byte) (int, Result, error) {
			ns, res, err := r.RefillMatching(ctx, []identity.CacheIdentity{expected}, [][]byte{dst})
			if len(ns) == 1 {
				return ns[0], res, err
			}
			return 0, res, err
		},
	}
}

// Seed row "Every public refill entry point": generation (RefillBlock),
// matching, degraded and for-tenant all require and enforce the expected
// CacheIdentity; there is no tenant-free helper.
func TestEveryRefillEntryRequiresAndChecksExpectedIdentity(t *testing.T) {
	// Every exported Refill* method takes the expected identity: adding an
	// entry point without one fails here, and so does adding one this
	// test does not exercise.
	entries := entryPoints()
	idType := reflect.TypeFor[identity.CacheIdentity]()
	nsType, keyType := reflect.TypeFor[identity.Namespace](), reflect.TypeFor[identity.BlockKey]()
	rt := reflect.TypeFor[*Refiller]()
	var seen []string
	for i := range rt.NumMethod() {
		mt := rt.Method(i)
		if !strings.HasPrefix(mt.Name, "Refill") {
			continue
		}
		seen = append(seen, mt.Name)
		takesID, takesNS, takesKey := false, false, false
		for j := range mt.Type.NumIn() {
			in := mt.Type.In(j)
			if in == idType || (in.Kind() == reflect.Slice && in.Elem() == idType) {
				takesID = true
			}
			takesNS = takesNS || in == nsType
			takesKey = takesKey || in == keyType
		}
		takesID = takesID || (takesNS && takesKey) // RefillKey: namespace and key
		if !takesID {
			t.Errorf("%s takes no expected identity", mt.Name)
		}
	}
	if want := slices.Sorted(maps.Keys(entries)); !slices.Equal(seen, want) {
		t.Fatalf("Refill methods %v, tested %v", seen, want)
	}

	ctx := context.Background()
	ids := chain(t, testNamespace("acme"), 2, 100)
	p, payloads := buildPack(t, ids, 512)
	// Another tenant holds the same tokens, one block further.
	globex := chain(t, testNamespace("globex"), 3, 100)
	q, globexPayloads := buildPack(t, globex, 512)
	acme2 := chain(t, testNamespace("acme"), 3, 100)[2]
	moved := ids[1]
	moved.Position += 4

	for _, name := range slices.Sorted(maps.Keys(entries)) {
		refill := entries[name]
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, Config{})
			e.publish(p)
			e.publish(q)

			dst := filled(512)
			n, res, err := refill(e.r, ctx, ids[0], dst)
			if !res.Hit || err != nil || n != 512 || !bytes.Equal(dst, payloads[0]) {
				t.Fatalf("expected identity: %d %v %v", n, res, err)
			}

			// No identity at all: refused before the store.
			e.reset()
			dst = filled(512)
			n, res, err = refill(e.r, ctx, identity.CacheIdentity{}, dst)
			want := InvalidRequest
			if name == "RefillForTenant" {
				want = TenantMismatch // the session is acme; "" is not
			}
			expectMiss(t, n, res, want, dst)
			if e.calls() != 0 {
				t.Fatalf("zero identity: %d store calls (%v)", e.calls(), err)
			}
			// A namespace without a block: refused before the store.
			partial := identity.CacheIdentity{Namespace: testNamespace("acme")}
			n, res, _ = refill(e.r, ctx, partial, dst)
			expectMiss(t, n, res, InvalidRequest, dst)
			if e.calls() != 0 {
				t.Fatalf("namespace-only identity: %d store calls", e.calls())
			}

			// acme asks for tokens only globex has: a miss, never globex's
			// bytes.
			n, res, _ = refill(e.r, ctx, acme2, dst)
			expectMiss(t, n, res, NotFound, dst)
			if e.payloadReads() != 0 {
				t.Fatal("payload read for another tenant's block")
			}
			// globex's identity gets globex's bytes, except through a
			// session authenticated as acme.
			n, res, _ = refill(e.r, ctx, globex[0], dst)
			if name == "RefillForTenant" {
				expectMiss(t, n, res, TenantMismatch, dst)
			} else if !res.Hit || !bytes.Equal(dst, globexPayloads[0]) || bytes.Equal(dst, payloads[0]) {
				t.Fatalf("globex identity: %v", res)
			}

			// The right block key, the wrong position. RefillKey is given
			// no position (a GET carries none; the chain implies it), so it
			// reads the block the key names (so does RefillKeyInto); the
			// others compare the full identity and miss.
			e.reset()
			dst = filled(512)
			n, res, _ = refill(e.r, ctx, moved, dst)
			if name == "RefillKey" || name == "RefillKeyInto" {
				if !res.Hit || !bytes.Equal(dst, payloads[1]) {
					t.Fatalf("RefillKey of the stored key: %v", res)
				}
				return
			}
			expectMiss(t, n, res, IdentityMismatch, dst)
			if e.payloadReads() != 0 || e.writes() != 0 || !allAA(dst) {
				t.Fatalf("mismatch: %d payload reads, %d writes", e.payloadReads(), e.writes())
			}
		})
	}

	// RefillForTenant: the session's tenant must be the expected tenant.
	e := newEnv(t, Config{})
	e.publish(p)
	e.publish(q)
	for _, session := range []string{"", "globex", "ACME", "acme "} {
		dst := filled(512)
		n, res, err := e.r.RefillForTenant(ctx, session, ids[0], dst)
		expectMiss(t, n, res, TenantMismatch, dst)
		if err != nil || e.calls() != 0 || !allAA(dst) {
			t.Fatalf("session %q: %v, %d store calls", session, err, e.calls())
		}
	}

	// RefillMatching: a "chain" that is not one is refused before the store.
	for name, chainIDs := range map[string][]identity.CacheIdentity{
		"two tenants":      {ids[0], globex[1]},
		"gap":              {ids[1], ids[0]},
		"empty":            nil,
		"invalid in chain": {ids[0], {}},
	} {
		dsts := make([][]byte, len(chainIDs))
		for i := range dsts {
			dsts[i] = filled(512)
		}
		ns, res, err := e.r.RefillMatching(ctx, chainIDs, dsts)
		if len(ns) != 0 || res.Reason != InvalidRequest || !errors.Is(err, ErrInvalidRequest) || e.calls() != 0 {
			t.Fatalf("%s: %v %v %v, %d store calls", name, ns, res, err, e.calls())
		}
	}
	if _, res, _ := e.r.RefillMatching(ctx, ids, [][]byte{filled(512)}); res.Reason != InvalidRequest {
		t.Fatalf("dst count mismatch: %v", res)
	}
}

// legacyHeader is a v1/v2 manifest header followed by an opaque old body.
func legacyHeader(v uint16, body string) []byte {
	return append(binary.LittleEndian.AppendUint16([]byte("GCMF"), v), body...)
}

// plantManifest stores body as a manifest of the identity's namespace under
// its content key and points the identity's pointer at it. It returns the
// manifest key.
func plantManifest(t testing.TB, e *env, id identity.CacheIdentity, body []byte) string {
	t.Helper()
	w, err := prepare(id)
	if err != nil {
		t.Fatal(err)
	}
	mkey := pack.ManifestKey(w.nsd, pack.Sum(body))
	e.put(mkey, body)
	ptr := pack.Pointer{Namespace: w.nsd, Block: w.key, ManifestKey: mkey, Manifest: pack.Sum(body), ManifestSize: uint64(len(body))}
	pb, err := ptr.Encode()
	if err != nil {
		t.Fatal(err)
	}
	e.put(ptr.Key(), pb)
	return mkey
}

// Seed row "Legacy manifests": valid legacy v1/v2 headers yield Missing with
// zero payload-range reads; the old entries are neither rewritten nor
// deleted.
func TestLegacyV1AndV2AreCleanMissesWithoutPayloadReads(t *testing.T) {
	ctx := context.Background()
	ids := chain(t, testNamespace("acme"), 2, 100)
	p, _ := buildPack(t, ids, 512)
	fixtures := map[string][]byte{
		"v1":                 legacyHeader(1, "v1 manifest: opaque to this code"),
		"v2":                 legacyHeader(2, "v2 manifest: opaque to this code"),
		"v1 header only":     legacyHeader(1, ""),
		"v3 body labelled 2": append(legacyHeader(2, ""), p.Manifest.Body[6:]...),
	}
	for _, name := range slices.Sorted(maps.Keys(fixtures)) {
		for ename, refill := range entryPoints() {
			t.Run(name+"/"+ename, func(t *testing.T) {
				e := newEnv(t, Config{})
				e.publish(p) // the pack object exists: only the manifest is legacy
				mkey := plantManifest(t, e, ids[1], fixtures[name])
				dst := filled(512)
				n, res, err := refill(e.r, ctx, ids[1], dst)
				expectMiss(t, n, res, Legacy, dst)
				if err != nil || !allAA(dst) {
					t.Fatalf("legacy miss carries an error: %v", err)
				}
				if e.payloadReads() != 0 || e.count(cold.OpPut, "") != 0 || e.count(cold.OpDelete, "") != 0 {
					t.Fatalf("%d payload reads, %d puts, %d deletes", e.payloadReads(), e.count(cold.OpPut, ""), e.count(cold.OpDelete, ""))
				}
				if !bytes.Equal(e.get(mkey), fixtures[name]) {
					t.Fatal("the legacy manifest changed")
				}
				if e.r.Breaker() != Closed {
					t.Fatal("a legacy miss tripped the breaker")
				}
			})
		}
	}
}

// Seed row "Budget and malformed input": malformed v3 metadata fails closed
// (Missing(Corrupt), an error wrapping cold.ErrCorrupt) before any payload
// read. Every malformed manifest is stored under its own content key, so
// the check that catches it is the decoder's, not the digest's.
func TestMalformedV3FailsClosedBeforePayloadIO(t *testing.T) {
	ctx := context.Background()
	ids := chain(t, testNamespace("acme"), 3, 100)
	p, _ := buildPack(t, ids, 512)
	edit := func(f func(m *pack.Manifest)) []byte {
		m, err := pack.DecodeManifest(p.Manifest.Body)
		if err != nil {
			t.Fatal(err)
		}
		f(m)
		b, err := m.Encode()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	good := p.Manifest.Body
	manifests := map[string][]byte{
		"truncated":               good[:len(good)/2],
		"truncated seal":          good[:len(good)-1],
		"trailing bytes":          append(slices.Clone(good), 0, 0),
		"version 4":               func() []byte { b := slices.Clone(good); b[4] = 4; return b }(),
		"version 0":               func() []byte { b := slices.Clone(good); b[4] = 0; return b }(),
		"zero ranges":             edit(func(m *pack.Manifest) { m.Ranges = nil }),
		"ranges repeated":         edit(func(m *pack.Manifest) { m.Ranges = append(m.Ranges, m.Ranges...)[:4] }),
		"overlapping ranges":      edit(func(m *pack.Manifest) { m.Ranges[1].Offset -= 8; m.Ranges[1].Length += 8 }),
		"range out of bounds":     edit(func(m *pack.Manifest) { m.Ranges[2].Length += 1 << 20 }),
		"range before payload":    edit(func(m *pack.Manifest) { m.Ranges[0].Offset = 0 }),
		"identity does not parse": edit(func(m *pack.Manifest) { m.Ranges[1].Canonical = []byte("GCID\x01\x13??") }),
		"identity invalid": edit(func(m *pack.Manifest) {
			c := slices.Clone(m.Ranges[1].Canonical)
			binary.LittleEndian.PutUint32(c[len(c)-16-5-4:], 0) // valid_length 0
			m.Ranges[1].Canonical = c
		}),
		"identity of another tenant": edit(func(m *pack.Manifest) {
			o := chain(t, testNamespace("globex"), 2, 100)[1]
			m.Ranges[1].Identity, m.Ranges[1].Canonical = o, nil
		}),
		"key is not KeyFor(identity)": edit(func(m *pack.Manifest) { m.Ranges[1].Key, m.Ranges[2].Key = m.Ranges[2].Key, m.Ranges[1].Key }),
		"pack digest mismatch":        edit(func(m *pack.Manifest) { m.PackDigest[3] ^= 1 }),
		"pack key of other namespace": edit(func(m *pack.Manifest) {
			d, _ := testNamespace("globex").Digest()
			m.PackKey = pack.PackKey(d, m.PackDigest)
		}),
		"reserved seal": edit(func(m *pack.Manifest) {
			m.Seal = pack.Seal{Kind: pack.SealHMACSHA256, KeyID: []byte("k1"), MAC: make([]byte, 32)}
		}),
		"not a manifest": []byte("GCPK this is a pack header"),
	}
	type tc struct {
		setup func(e *env)
	}
	cases := map[string]tc{}
	for name, body := range manifests {
		cases["manifest/"+name] = tc{func(e *env) { plantManifest(t, e, ids[1], body) }}
	}
	w, _ := prepare(ids[1])
	ptrKey := pack.PointerKey(w.nsd, w.key)
	cases["digest: manifest bytes replaced under its key"] = tc{func(e *env) {
		other := edit(func(m *pack.Manifest) { m.Ranges = m.Ranges[:2]; m.PackSize = m.Ranges[1].Offset + m.Ranges[1].Length })
		e.put(p.Manifest.Key, append(other, make([]byte, len(good)-len(other))...))
	}}
	cases["pointer: garbage"] = tc{func(e *env) { e.put(ptrKey, make([]byte, pack.PointerLen)) }}
	cases["pointer: too short"] = tc{func(e *env) { e.put(ptrKey, []byte("GCPT")) }}
	cases["pointer: names another block"] = tc{func(e *env) { e.put(ptrKey, p.Pointers[2].Body) }}
	cases["pointer: understates the manifest size"] = tc{func(e *env) {
		ptr, _ := pack.DecodePointer(p.Pointers[1].Body)
		ptr.ManifestSize--
		b, _ := ptr.Encode()
		e.put(ptrKey, b)
	}}
	cases["pointer: overstates the manifest size"] = tc{func(e *env) {
		ptr, _ := pack.DecodePointer(p.Pointers[1].Body)
		ptr.ManifestSize++
		b, _ := ptr.Encode()
		e.put(ptrKey, b)
	}}
	cases["manifest lacks the block"] = tc{func(e *env) {
		// A valid pack of blocks 0 and 2 only, named by block 1's pointer.
		q, _ := buildPack(t, []identity.CacheIdentity{ids[0], ids[2]}, 512)
		e.publish(q)
		e.put(ptrKey, func() []byte {
			ptr, _ := pack.DecodePointer(q.Pointers[0].Body)
			ptr.Block = w.key
			b, _ := ptr.Encode()
			return b
		}())
	}}

	for _, name := range slices.Sorted(maps.Keys(cases)) {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, Config{})
			e.publish(p)
			cases[name].setup(e)
			dst := filled(512)
			n, res, err := e.r.RefillBlock(ctx, ids[1], dst)
			expectMiss(t, n, res, Corrupt, dst)
			if !errors.Is(err, cold.ErrCorrupt) {
				t.Fatalf("error %v does not wrap cold.ErrCorrupt", err)
			}
			if e.payloadReads() != 0 || e.writes() != 0 || !allAA(dst) {
				t.Fatalf("%d payload reads, %d writes", e.payloadReads(), e.writes())
			}
			if e.r.Breaker() != Closed {
				t.Fatal("corruption tripped the breaker")
			}
		})
	}
}

// Seed row "Budget and malformed input": corrupt payloads fail closed, and
// another object substituted under the pack key returns no loaded bytes.
func TestCorruptPayloadAndContentKeySubstitutionReturnNoBytes(t *testing.T) {
	ctx := context.Background()
	ids := chain(t, testNamespace("acme"), 3, 100)
	p, payloads := buildPack(t, ids, 512)
	// A different pack with the same shape (same sizes, other bytes).
	other, _ := buildPack(t, chain(t, testNamespace("acme"), 3, 9000), 512)

	cases := map[string]func(e *env){
		"flipped payload byte": func(e *env) {
			b := slices.Clone(p.Object.Body)
			b[pack.HeaderLen+512+100] ^= 0x01
			e.put(p.Object.Key, b)
		},
		"another pack under this key": func(e *env) { e.put(p.Object.Key, other.Object.Body) },
		"zeroed payload":              func(e *env) { e.put(p.Object.Key, make([]byte, len(p.Object.Body))) },
		"blocks swapped in the object": func(e *env) {
			b := slices.Clone(p.Object.Body)
			copy(b[pack.HeaderLen+512:], p.Object.Body[pack.HeaderLen+1024:pack.HeaderLen+1536])
			e.put(p.Object.Key, b)
		},
	}
	for _, name := range slices.Sorted(maps.Keys(cases)) {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, Config{})
			e.publish(p)
			cases[name](e)
			dst := filled(600)
			n, res, err := e.r.RefillBlock(ctx, ids[1], dst)
			if res.Hit || res.Reason != Corrupt || n != 0 || !errors.Is(err, cold.ErrCorrupt) {
				t.Fatalf("got %d %v %v", n, res, err)
			}
			// The read happened, so its bytes were zeroed; nothing past
			// the payload was touched.
			if !allZero(dst[:512]) || !allAA(dst[512:]) {
				t.Fatal("dst holds loaded bytes after a corrupt payload")
			}
			if e.payloadReads() != 1 || e.writes() != 0 {
				t.Fatalf("%d payload reads, %d writes", e.payloadReads(), e.writes())
			}

			// A chain keeps its good leading run and loads nothing of the
			// corrupt block or after it.
			dsts := [][]byte{filled(512), filled(512), filled(512)}
			ns, res, err := e.r.RefillMatching(ctx, ids, dsts)
			if name == "another pack under this key" || name == "zeroed payload" {
				if len(ns) != 0 || res.Reason != Corrupt || !allZero(dsts[0]) || !allAA(dsts[1]) {
					t.Fatalf("chain: %v %v %v", ns, res, err)
				}
				return
			}
			if len(ns) != 1 || !bytes.Equal(dsts[0], payloads[0]) || res.Reason != Corrupt || !allZero(dsts[1]) || !allAA(dsts[2]) {
				t.Fatalf("chain: %v %v %v", ns, res, err)
			}
		})
	}

	// A truncated pack object: the range read fails, nothing is returned.
	e := newEnv(t, Config{})
	e.publish(p)
	e.put(p.Object.Key, p.Object.Body[:pack.HeaderLen+600])
	dst := filled(512)
	n, res, err := e.r.RefillBlock(ctx, ids[1], dst)
	if res.Reason != Corrupt || n != 0 || !errors.Is(err, cold.ErrCorrupt) || (!allZero(dst) && !allAA(dst)) {
		t.Fatalf("truncated: %d %v %v", n, res, err)
	}
}

// Seed row "Budget and malformed input": over-budget manifests are not
// downloaded through refill, and disallowed payload ranges are not
// downloaded.
func TestOverBudgetNotDownloaded(t *testing.T) {
	ctx := context.Background()
	ids := chain(t, testNamespace("acme"), 3, 100)
	p, payloads := buildPack(t, ids, 4096)

	t.Run("payload over budget", func(t *testing.T) {
		e := newEnv(t, Config{Budget: 4095})
		e.publish(p)
		dst := filled(4096)
		n, res, err := e.r.RefillBlock(ctx, ids[0], dst)
		expectMiss(t, n, res, OverBudget, dst)
		if err != nil || e.payloadReads() != 0 || !allAA(dst) {
			t.Fatalf("%v, %d payload reads", err, e.payloadReads())
		}
	})
	t.Run("degraded budget", func(t *testing.T) {
		e := newEnv(t, Config{Budget: 8192, DegradedBudget: 2048})
		e.publish(p)
		dst := filled(4096)
		n, res, _ := e.r.RefillDegraded(ctx, ids[0], dst)
		expectMiss(t, n, res, OverBudget, dst)
		if e.payloadReads() != 0 {
			t.Fatal("degraded refill downloaded an over-budget payload")
		}
		if n, res, _ := e.r.RefillBlock(ctx, ids[0], dst); !res.Hit || !bytes.Equal(dst[:n], payloads[0]) {
			t.Fatalf("the normal budget fits: %v", res)
		}
	})
	t.Run("chain shares one budget", func(t *testing.T) {
		e := newEnv(t, Config{Budget: 2*4096 + 4095})
		e.publish(p)
		dsts := [][]byte{filled(4096), filled(4096), filled(4096)}
		ns, res, _ := e.r.RefillMatching(ctx, ids, dsts)
		if len(ns) != 2 || res.Reason != OverBudget || !allAA(dsts[2]) {
			t.Fatalf("%v %v", ns, res)
		}
		if e.payloadReads() != 2 {
			t.Fatalf("%d payload reads, want 2", e.payloadReads())
		}
	})
	t.Run("manifest over ManifestMax", func(t *testing.T) {
		e := newEnv(t, Config{ManifestMax: int64(len(p.Manifest.Body)) - 1})
		e.publish(p)
		for name, refill := range entryPoints() {
			dst := filled(4096)
			n, res, err := refill(e.r, ctx, ids[0], dst)
			expectMiss(t, n, res, OverBudget, dst)
			if err != nil || e.count(cold.OpRangeGet, "manifests/") != 0 || e.payloadReads() != 0 {
				t.Fatalf("%s: %v; %d manifest reads, %d payload reads", name, err, e.count(cold.OpRangeGet, "manifests/"), e.payloadReads())
			}
		}
	})
	t.Run("manifest at ManifestMax", func(t *testing.T) {
		e := newEnv(t, Config{ManifestMax: int64(len(p.Manifest.Body))})
		e.publish(p)
		if _, res, _ := e.r.RefillBlock(ctx, ids[0], filled(4096)); !res.Hit {
			t.Fatalf("%v", res)
		}
	})
}
