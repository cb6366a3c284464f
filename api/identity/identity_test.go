package identity

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// testNamespace returns a valid namespace with every field set and no field
// at a boundary value, so that any single change keeps it valid.
func testNamespace() Namespace {
	return Namespace{
		Tenant:            "acme",
		TrustDomain:       "prod",
		ModelID:           "meta-llama/Llama-3.1-8B-Instruct",
		ConfigRevision:    "0e9e39f",
		TokenizerRevision: "5f0b02c",
		Adapter:           "lora/sql-v2",
		RoPE:              "llama3 theta=500000 factor=8",
		DType:             "bf16",
		Quantization:      "none",
		Layout: Layout{
			Format: "vllm-nhd",
			TPRank: 1, TPSize: 4,
			PPRank: 1, PPSize: 2,
			LayerStart: 16, LayerCount: 16,
			KVHeads: 2, HeadDim: 128,
			BlockTokens: 16,
		},
	}
}

func seq(start uint32, n int) []uint32 {
	t := make([]uint32, n)
	for i := range t {
		t[i] = start + uint32(i)
	}
	return t
}

// testIdentity returns a valid identity of a block in the middle of a chain.
func testIdentity() CacheIdentity {
	var parent BlockKey
	for i := range parent {
		parent[i] = byte(i + 1)
	}
	return CacheIdentity{
		Namespace:   testNamespace(),
		Parent:      parent,
		Position:    32,
		Tokens:      seq(1000, 16),
		ValidLength: 16,
	}
}

func mustCanonical(t testing.TB, n Namespace) []byte {
	t.Helper()
	b, err := n.Canonical()
	if err != nil {
		t.Fatalf("Canonical: %v", err)
	}
	return b
}

// ---- field sensitivity ----

// TestEveryFieldMatters changes one field at a time and checks which derived
// values change. One row per field, so a field added to the structs without a
// row here is caught by TestFieldTableCoversStructs.
func TestEveryFieldMatters(t *testing.T) {
	type row struct {
		field  string
		mutate func(*CacheIdentity)
		inNS   bool // part of the namespace (digest and namespace encoding change)
		inKey  bool // the block key changes
	}
	str := func(p func(*CacheIdentity) *string) func(*CacheIdentity) {
		return func(c *CacheIdentity) { *p(c) += "x" }
	}
	rows := []row{
		{"Tenant", str(func(c *CacheIdentity) *string { return &c.Tenant }), true, true},
		{"TrustDomain", str(func(c *CacheIdentity) *string { return &c.TrustDomain }), true, true},
		{"ModelID", str(func(c *CacheIdentity) *string { return &c.ModelID }), true, true},
		{"ConfigRevision", str(func(c *CacheIdentity) *string { return &c.ConfigRevision }), true, true},
		{"TokenizerRevision", str(func(c *CacheIdentity) *string { return &c.TokenizerRevision }), true, true},
		{"Adapter", str(func(c *CacheIdentity) *string { return &c.Adapter }), true, true},
		{"RoPE", str(func(c *CacheIdentity) *string { return &c.RoPE }), true, true},
		{"DType", str(func(c *CacheIdentity) *string { return &c.DType }), true, true},
		{"Quantization", str(func(c *CacheIdentity) *string { return &c.Quantization }), true, true},
		{"Layout.Format", str(func(c *CacheIdentity) *string { return &c.Layout.Format }), true, true},
		{"Layout.TPRank", func(c *CacheIdentity) { c.Layout.TPRank++ }, true, true},
		{"Layout.TPSize", func(c *CacheIdentity) { c.Layout.TPSize++ }, true, true},
		{"Layout.PPRank", func(c *CacheIdentity) { c.Layout.PPRank-- }, true, true},
		{"Layout.PPSize", func(c *CacheIdentity) { c.Layout.PPSize++ }, true, true},
		{"Layout.LayerStart", func(c *CacheIdentity) { c.Layout.LayerStart++ }, true, true},
		{"Layout.LayerCount", func(c *CacheIdentity) { c.Layout.LayerCount-- }, true, true},
		{"Layout.KVHeads", func(c *CacheIdentity) { c.Layout.KVHeads++ }, true, true},
		{"Layout.HeadDim", func(c *CacheIdentity) { c.Layout.HeadDim /= 2 }, true, true},
		{"Layout.BlockTokens", func(c *CacheIdentity) { c.Layout.BlockTokens = 32 }, true, true},
		{"Parent", func(c *CacheIdentity) { c.Parent[31] ^= 1 }, false, true},
		// Position is not hashed into the key: KeyFor chains over the parent
		// key, which already fixes the prefix and therefore the position of a
		// block built by Chain. A wrong Position with a right Parent is caught
		// by comparing full canonical identities, which include it.
		{"Position", func(c *CacheIdentity) { c.Position += 16 }, false, false},
		{"Tokens", func(c *CacheIdentity) { c.Tokens[5]++ }, false, true},
		{"ValidLength", func(c *CacheIdentity) { c.ValidLength-- }, false, true},
	}
	// Opaque selects the other form of identity (no token chain); each of
	// its bytes changes the key: TestOpaqueIdentity and TestOpaqueGolden.
	covered := map[string]bool{"Opaque": true}
	for _, r := range rows {
		covered[r.field] = true
	}
	for _, f := range structFields(reflect.TypeFor[CacheIdentity](), "") {
		if !covered[f] {
			t.Errorf("field %s has no row in TestEveryFieldMatters", f)
		}
	}

	base := testIdentity()
	baseNS := mustCanonical(t, base.Namespace)
	baseDigest, _ := base.Namespace.Digest()
	baseFull, err := base.Canonical()
	if err != nil {
		t.Fatal(err)
	}
	baseKey, err := base.Key()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		t.Run(r.field, func(t *testing.T) {
			c := testIdentity()
			c.Tokens = append([]uint32(nil), c.Tokens...)
			r.mutate(&c)
			if reflect.DeepEqual(c, base) {
				t.Fatal("mutation changed nothing")
			}
			if err := c.Validate(); err != nil {
				t.Fatalf("mutated identity is invalid: %v", err)
			}
			ns := mustCanonical(t, c.Namespace)
			d, _ := c.Namespace.Digest()
			full, err := c.Canonical()
			if err != nil {
				t.Fatal(err)
			}
			k, err := c.Key()
			if err != nil {
				t.Fatal(err)
			}
			if got := !bytes.Equal(ns, baseNS); got != r.inNS {
				t.Errorf("namespace encoding changed = %v, want %v", got, r.inNS)
			}
			if got := d != baseDigest; got != r.inNS {
				t.Errorf("namespace digest changed = %v, want %v", got, r.inNS)
			}
			if bytes.Equal(full, baseFull) {
				t.Errorf("full canonical encoding did not change")
			}
			if got := k != baseKey; got != r.inKey {
				t.Errorf("block key changed = %v, want %v", got, r.inKey)
			}
		})
	}
}

// structFields lists the leaf field paths of t, flattening embedded structs
// and naming nested ones with a dot ("Layout.Format").
func structFields(t reflect.Type, prefix string) []string {
	var out []string
	for f := range t.Fields() {
		switch {
		case f.Anonymous:
			out = append(out, structFields(f.Type, prefix)...)
		case f.Type.Kind() == reflect.Struct:
			out = append(out, structFields(f.Type, prefix+f.Name+".")...)
		default:
			out = append(out, prefix+f.Name)
		}
	}
	return out
}

// TestNoFieldBoundaryAmbiguity moves bytes across a field boundary; the
// length prefixes must keep the encodings apart.
func TestNoFieldBoundaryAmbiguity(t *testing.T) {
	a, b := testNamespace(), testNamespace()
	a.Tenant, a.TrustDomain = "ab", "c"
	b.Tenant, b.TrustDomain = "a", "bc"
	if bytes.Equal(mustCanonical(t, a), mustCanonical(t, b)) {
		t.Fatal("encodings collide across the tenant/trust_domain boundary")
	}
	a, b = testNamespace(), testNamespace()
	a.Adapter, a.RoPE = "", "xy"
	b.Adapter, b.RoPE = "x", "y"
	if bytes.Equal(mustCanonical(t, a), mustCanonical(t, b)) {
		t.Fatal("encodings collide across the adapter/rope boundary")
	}
}

// ---- validation ----

func TestValidateNamespace(t *testing.T) {
	required := []struct {
		name string
		set  func(*Namespace)
	}{
		{"tenant", func(n *Namespace) { n.Tenant = "" }},
		{"trust_domain", func(n *Namespace) { n.TrustDomain = "" }},
		{"model_id", func(n *Namespace) { n.ModelID = "" }},
		{"config_revision", func(n *Namespace) { n.ConfigRevision = "" }},
		{"tokenizer_revision", func(n *Namespace) { n.TokenizerRevision = "" }},
		{"rope", func(n *Namespace) { n.RoPE = "" }},
		{"dtype", func(n *Namespace) { n.DType = "" }},
		{"quantization", func(n *Namespace) { n.Quantization = "" }},
		{"layout.format", func(n *Namespace) { n.Layout.Format = "" }},
	}
	for _, r := range required {
		t.Run("empty/"+r.name, func(t *testing.T) {
			n := testNamespace()
			r.set(&n)
			checkInvalid(t, n.Validate(), r.name)
			_, err := n.Canonical()
			checkInvalid(t, err, r.name)
			_, err = n.Digest()
			checkInvalid(t, err, r.name)
			_, err = Chain(n, seq(0, 4))
			checkInvalid(t, err, r.name)
		})
	}
	t.Run("empty/adapter allowed", func(t *testing.T) {
		n := testNamespace()
		n.Adapter = ""
		if err := n.Validate(); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("string at limit allowed", func(t *testing.T) {
		n := testNamespace()
		n.ModelID = strings.Repeat("m", MaxStringLen)
		if err := n.Validate(); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("string over limit", func(t *testing.T) {
		n := testNamespace()
		n.ModelID = strings.Repeat("m", MaxStringLen+1)
		checkInvalid(t, n.Validate(), "model_id")
		n = testNamespace()
		n.Adapter = strings.Repeat("a", MaxStringLen+1)
		checkInvalid(t, n.Validate(), "adapter")
	})
	t.Run("invalid utf-8", func(t *testing.T) {
		n := testNamespace()
		n.DType = "fp\xff16"
		checkInvalid(t, n.Validate(), "dtype")
	})

	layout := []struct {
		name  string
		field string
		set   func(*Layout)
	}{
		{"tp_size zero", "tp_size", func(l *Layout) { l.TPSize, l.TPRank = 0, 0 }},
		{"tp_rank == tp_size", "tp_rank", func(l *Layout) { l.TPRank = l.TPSize }},
		{"pp_size zero", "pp_size", func(l *Layout) { l.PPSize, l.PPRank = 0, 0 }},
		{"pp_rank > pp_size", "pp_rank", func(l *Layout) { l.PPRank = l.PPSize + 5 }},
		{"layer_count zero", "layer_count", func(l *Layout) { l.LayerCount = 0 }},
		{"layers overflow", "layer_start", func(l *Layout) { l.LayerStart, l.LayerCount = 0xffffffff, 2 }},
		{"kv_heads zero", "kv_heads", func(l *Layout) { l.KVHeads = 0 }},
		{"head_dim zero", "head_dim", func(l *Layout) { l.HeadDim = 0 }},
		{"block_tokens zero", "block_tokens", func(l *Layout) { l.BlockTokens = 0 }},
		{"block_tokens over max", "block_tokens", func(l *Layout) { l.BlockTokens = MaxBlockTokens + 1 }},
	}
	for _, r := range layout {
		t.Run("layout/"+r.name, func(t *testing.T) {
			n := testNamespace()
			r.set(&n.Layout)
			checkInvalid(t, n.Validate(), r.field)
		})
	}
	t.Run("layout/boundaries allowed", func(t *testing.T) {
		n := testNamespace()
		n.Layout.BlockTokens = MaxBlockTokens
		n.Layout.LayerStart, n.Layout.LayerCount = 0xffffffff-7, 7
		n.Layout.TPRank, n.Layout.TPSize = 0xfffffffe, 0xffffffff
		if err := n.Validate(); err != nil {
			t.Fatal(err)
		}
	})
}

func TestValidateIdentity(t *testing.T) {
	cases := []struct {
		name  string
		field string
		set   func(*CacheIdentity)
	}{
		{"no tokens", "tokens", func(c *CacheIdentity) { c.Tokens = nil }},
		{"more tokens than block_tokens", "block_tokens", func(c *CacheIdentity) { c.Tokens = seq(0, 17) }},
		{"valid_length zero", "valid_length", func(c *CacheIdentity) { c.ValidLength = 0 }},
		{"valid_length over tokens", "valid_length", func(c *CacheIdentity) { c.ValidLength = 17 }},
		{"position not aligned", "position", func(c *CacheIdentity) { c.Position = 33 }},
		{"zero parent past the start", "parent", func(c *CacheIdentity) { c.Parent = BlockKey{} }},
		{"parent at position 0", "parent", func(c *CacheIdentity) { c.Position = 0 }},
		{"bad namespace", "tenant", func(c *CacheIdentity) { c.Tenant = "" }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := testIdentity()
			tc.set(&c)
			checkInvalid(t, c.Validate(), tc.field)
			_, err := c.Canonical()
			checkInvalid(t, err, tc.field)
			_, err = c.Key()
			checkInvalid(t, err, tc.field)
		})
	}
	t.Run("first block", func(t *testing.T) {
		c := testIdentity()
		c.Parent, c.Position = BlockKey{}, 0
		if err := c.Validate(); err != nil {
			t.Fatal(err)
		}
	})
}

func checkInvalid(t *testing.T, err error, field string) {
	t.Helper()
	if !errors.Is(err, ErrInvalid) {
		t.Fatalf("err = %v, want ErrInvalid", err)
	}
	if !strings.Contains(err.Error(), field) {
		t.Fatalf("err %q does not name field %q", err, field)
	}
}

// ---- keys and chains ----

// refKey is KeyFor written out plainly, to check its buffering.
func refKey(ns NamespaceDigest, parent BlockKey, tokens []uint32, validLength uint32) BlockKey {
	var b []byte
	b = append(b, "gpucache/blockkey/v1\x00"...)
	b = append(b, ns[:]...)
	b = append(b, parent[:]...)
	b = binary.LittleEndian.AppendUint32(b, validLength)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(tokens)))
	for _, t := range tokens {
		b = binary.LittleEndian.AppendUint32(b, t)
	}
	return sha256.Sum256(b)
}

func TestKeyForMatchesReference(t *testing.T) {
	d, _ := testNamespace().Digest()
	parent := testIdentity().Parent
	for n := 0; n <= 300; n++ {
		toks := seq(uint32(n)*7919, n)
		if got, want := KeyFor(d, parent, toks, uint32(n)), refKey(d, parent, toks, uint32(n)); got != want {
			t.Fatalf("%d tokens: KeyFor %s, reference %s", n, got, want)
		}
	}
}

func TestChain(t *testing.T) {
	ns := testNamespace()
	ns.Layout.BlockTokens = 4
	d, _ := ns.Digest()
	toks := seq(500, 10)

	keys, err := Chain(ns, toks)
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 3 {
		t.Fatalf("%d keys, want 3 (4+4+2 tokens)", len(keys))
	}
	blocks := [][]uint32{toks[0:4], toks[4:8], toks[8:10]}
	var parent BlockKey
	for i, blk := range blocks {
		if want := KeyFor(d, parent, blk, uint32(len(blk))); keys[i] != want {
			t.Errorf("key %d = %s, want %s", i, keys[i], want)
		}
		id := CacheIdentity{Namespace: ns, Parent: parent, Position: uint64(4 * i), Tokens: blk, ValidLength: uint32(len(blk))}
		if k, err := id.Key(); err != nil || k != keys[i] {
			t.Errorf("block %d: identity key %s, %v; chain key %s", i, k, err, keys[i])
		}
		if keys[i].IsZero() {
			t.Errorf("key %d is zero", i)
		}
		parent = keys[i]
	}

	// A prefix of the tokens gives a prefix of the chain.
	pre, err := Chain(ns, toks[:8])
	if err != nil || !reflect.DeepEqual(pre, keys[:2]) {
		t.Errorf("Chain(first 8) = %v, %v; want %v", pre, err, keys[:2])
	}
	// A change in an early block changes every later key.
	toks2 := append([]uint32(nil), toks...)
	toks2[1]++
	keys2, _ := Chain(ns, toks2)
	for i := range keys {
		if keys[i] == keys2[i] {
			t.Errorf("key %d unchanged after token 1 changed", i)
		}
	}
	// Exact multiple and single token.
	if k, _ := Chain(ns, toks[:8]); len(k) != 2 {
		t.Errorf("8 tokens: %d keys, want 2", len(k))
	}
	if k, _ := Chain(ns, toks[:1]); len(k) != 1 || k[0] != KeyFor(d, BlockKey{}, toks[:1], 1) {
		t.Errorf("1 token: %v", k)
	}
	if _, err := Chain(ns, nil); !errors.Is(err, ErrInvalid) {
		t.Errorf("no tokens: err = %v, want ErrInvalid", err)
	}
}

func TestDigestIsSHA256OfCanonical(t *testing.T) {
	n := testNamespace()
	d, err := n.Digest()
	if err != nil {
		t.Fatal(err)
	}
	if d != NamespaceDigest(sha256.Sum256(mustCanonical(t, n))) {
		t.Fatal("digest is not SHA-256 of the canonical encoding")
	}
	if got := fmt.Sprint(d); got != hex.EncodeToString(d[:]) {
		t.Fatalf("String() = %s", got)
	}
}

func BenchmarkChain(b *testing.B) {
	ns := testNamespace()
	for _, n := range []int{512, 4096, 32768} {
		toks := seq(1, n)
		b.Run(fmt.Sprintf("tokens=%d", n), func(b *testing.B) {
			b.SetBytes(int64(4 * n))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Chain(ns, toks); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func TestIdentitiesMatchChain(t *testing.T) {
	ns := testNamespace()
	tokens := make([]uint32, 3*int(ns.Layout.BlockTokens)+5)
	for i := range tokens {
		tokens[i] = uint32(i * 3)
	}
	keys, err := Chain(ns, tokens)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := Identities(ns, tokens)
	if err != nil || len(ids) != len(keys) {
		t.Fatalf("Identities: %d, %v; Chain: %d", len(ids), err, len(keys))
	}
	for i, id := range ids {
		k, err := id.Key()
		if err != nil || k != keys[i] {
			t.Fatalf("identity %d: key %v, %v; want Chain's", i, k, err)
		}
	}
	if ids[len(ids)-1].ValidLength != 5 {
		t.Fatalf("short last block: valid length %d", ids[len(ids)-1].ValidLength)
	}
}
