package pack

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/gpucache/gpucache/api/identity"
	"github.com/gpucache/gpucache/internal/cold"
	"github.com/gpucache/gpucache/internal/cold/crypt"
)

var updateCorpus = flag.Bool("update-corpus", false, "rewrite the seed corpora in testdata/fuzz from the generators in fuzz_test.go")

// Every decoder has a fuzz target. Each checks that the decoder never
// panics, that rejections carry the documented error kinds, and that
// whatever it accepts re-encodes to exactly the input (so it accepts only
// canonical bytes).

func FuzzDecodeManifest(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := DecodeManifest(b)
		if err != nil {
			if errors.Is(err, ErrLegacyManifest) {
				if !IsLegacyManifest(b) || errors.Is(err, cold.ErrCorrupt) {
					t.Fatalf("legacy answer for a non-legacy header: %v", err)
				}
				return
			}
			if !errors.Is(err, cold.ErrCorrupt) {
				t.Fatalf("error %v is not ErrCorrupt", err)
			}
			return
		}
		again, err := m.Encode()
		if err != nil {
			t.Fatalf("decoded manifest does not encode: %v", err)
		}
		if !bytes.Equal(again, b) {
			t.Fatalf("not canonical:\n in  %x\n out %x", b, again)
		}
		nsd, _ := m.Namespace.Digest()
		end := uint64(HeaderLen)
		for _, r := range m.Ranges {
			c, err := r.Identity.Canonical()
			if err != nil || !bytes.Equal(c, r.Canonical) || r.Identity.Namespace != m.Namespace {
				t.Fatalf("range identity does not match its bytes: %v", err)
			}
			if r.Key != identity.KeyFor(nsd, r.Identity.Parent, r.Identity.Tokens, r.Identity.ValidLength) {
				t.Fatal("range key is not KeyFor")
			}
			if got, ok := m.Find(r.Key); !ok || got.Offset != r.Offset {
				t.Fatal("Find does not return the range")
			}
			if r.Offset != end || r.Length == 0 {
				t.Fatal("ranges do not tile the pack")
			}
			end += r.Length
		}
		if end != m.PackSize {
			t.Fatal("ranges do not end at the pack size")
		}
		// The sealed span is every byte before the seal slot, and a kind-1
		// seal has the only accepted shape.
		slot := 3 + len(m.Seal.KeyID) + len(m.Seal.MAC)
		if !bytes.Equal(m.SealedBytes(), b[:len(b)-slot]) {
			t.Fatal("SealedBytes is not every byte before the seal slot")
		}
		switch m.Seal.Kind {
		case SealNone:
			if len(m.Seal.KeyID)+len(m.Seal.MAC) != 0 {
				t.Fatal("kind 0 with a key id or MAC accepted")
			}
		case SealHMACSHA256:
			if len(m.Seal.KeyID) == 0 || len(m.Seal.KeyID) > 32 || len(m.Seal.MAC) != 32 {
				t.Fatal("malformed kind-1 seal accepted")
			}
		default:
			t.Fatalf("seal kind %d accepted", m.Seal.Kind)
		}
		if nsb, _ := m.Namespace.Canonical(); !bytes.Equal(m.NamespaceCanonical(), nsb) {
			t.Fatal("NamespaceCanonical is not the namespace's encoding")
		}
	})
}

func FuzzDecodePointer(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := DecodePointer(b)
		if err != nil {
			if !errors.Is(err, cold.ErrCorrupt) {
				t.Fatalf("error %v is not ErrCorrupt", err)
			}
			return
		}
		again, err := p.Encode()
		if err != nil || !bytes.Equal(again, b) {
			t.Fatalf("not canonical (%v):\n in  %x\n out %x", err, b, again)
		}
	})
}

func FuzzDecodeHeader(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := DecodeHeader(b)
		if err != nil {
			if !errors.Is(err, cold.ErrCorrupt) {
				t.Fatalf("error %v is not ErrCorrupt", err)
			}
			return
		}
		if !bytes.Equal(h.Encode(), b[:HeaderLen]) {
			t.Fatalf("not canonical: %x", b[:HeaderLen])
		}
	})
}

func FuzzParseKey(f *testing.F) {
	f.Fuzz(func(t *testing.T, s string) {
		if ns, sum, err := ParsePackKey(s); err == nil && PackKey(ns, sum) != s {
			t.Fatalf("pack key %q re-encodes as %q", s, PackKey(ns, sum))
		} else if err != nil && !errors.Is(err, cold.ErrCorrupt) {
			t.Fatal(err)
		}
		if ns, sum, err := ParseManifestKey(s); err == nil && ManifestKey(ns, sum) != s {
			t.Fatalf("manifest key %q re-encodes as %q", s, ManifestKey(ns, sum))
		} else if err != nil && !errors.Is(err, cold.ErrCorrupt) {
			t.Fatal(err)
		}
		if ns, k, err := ParsePointerKey(s); err == nil && PointerKey(ns, k) != s {
			t.Fatalf("pointer key %q re-encodes as %q", s, PointerKey(ns, k))
		} else if err != nil && !errors.Is(err, cold.ErrCorrupt) {
			t.Fatal(err)
		}
	})
}

func FuzzDecodeIdentity(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) {
		id, err := decodeIdentity(b)
		if err != nil {
			if !errors.Is(err, cold.ErrCorrupt) {
				t.Fatalf("error %v is not ErrCorrupt", err)
			}
			return
		}
		c, err := id.Canonical()
		if err != nil || !bytes.Equal(c, b) {
			t.Fatalf("not canonical (%v):\n in  %x\n out %x", err, b, c)
		}
	})
}

// seedCorpora returns, per fuzz target, named seed inputs: valid encodings
// and one of each documented kind of malformed input.
func seedCorpora(t testing.TB) map[string]map[string]any {
	t.Helper()
	ns := testNamespace("acme")
	p := mustBuild(t, ns, blocksOf(chain(t, ns, 3, 7), 40))
	lora := testNamespace("globex")
	lora.Adapter = "lora/sql-v2"
	lora.Layout.TPRank, lora.Layout.TPSize = 1, 2
	q := mustBuild(t, lora, blocksOf(chain(t, lora, 1, 1), 16))

	manifests := map[string]any{
		"valid-three-blocks": p.Manifest.Body,
		"valid-one-block":    q.Manifest.Body,
		"legacy-v1":          legacyManifest(1, []byte("old v1 body")),
		"legacy-v2":          legacyManifest(2, nil),
		"legacy-v2-v3-body":  setVersion(p.Manifest.Body, 2),
	}
	// Sealed manifests (kind 1): a short key id, the longest key id, and a
	// seal whose MAC does not verify (decodes; VerifySeal rejects it).
	kr := testKeyring(t, "k1")
	manifests["valid-sealed-three-blocks"] = mustBuildSealed(t, ns, blocksOf(chain(t, ns, 3, 7), 40), kr).Manifest.Body
	long := testKeyring(t, strings.Repeat("k", 32))
	manifests["valid-sealed-max-key-id"] = mustBuildSealed(t, lora, blocksOf(chain(t, lora, 1, 1), 16), long).Manifest.Body
	forged := mustDecode(t, manifests["valid-sealed-three-blocks"].([]byte))
	forged.Seal.MAC[0] ^= 1
	fb, err := forged.Encode()
	if err != nil {
		t.Fatal(err)
	}
	manifests["valid-sealed-bad-mac"] = fb
	for name, b := range malformedManifests(t) {
		manifests["malformed-"+slug(name)] = b
	}
	// Manifest v4 (encode.go): encrypted and compressed, reproducible
	// through a fixed nonce stream.
	ids := chain(t, ns, 2, 7)
	kvBlocks := []Block{{Identity: ids[0], Payload: kvLike(ids[0], 512)}, {Identity: ids[1], Payload: randomBytes(512)}}
	for name, o := range map[string]Options{
		"valid-v4-aes":      {Encrypter: cryptRing(t, "c1", "c1"), Rand: &countingRand{}},
		"valid-v4-zstd":     {Compressor: testZstd(t)},
		"valid-v4-aes-zstd": {Encrypter: cryptRing(t, "c1", "c1"), Compressor: testZstd(t), Rand: &countingRand{}, Sealer: kr},
	} {
		v4, err := BuildWith(ns, kvBlocks, o)
		if err != nil {
			t.Fatal(err)
		}
		manifests[name] = v4.Manifest.Body
	}
	for name, b := range malformedV4(t) {
		manifests["malformed-v4-"+slug(name)] = b
	}
	pl, err := BuildWith(ns, kvBlocks, Options{Compressor: testZstd(t), BytePlanes: true, Encrypter: cryptRing(t, "c1", "c1"), Rand: &countingRand{}})
	if err != nil {
		t.Fatal(err)
	}
	manifests["valid-v4-aes-zstd-planes"] = pl.Manifest.Body
	opens := map[string]any{}
	for name, b := range validOpenRangeInputs(t) {
		opens[name] = b
		bad := bytes.Clone(b)
		bad[len(bad)-1] ^= 1
		opens["malformed-last-byte-"+name] = bad
		opens["malformed-truncated-"+name] = b[:len(b)-3]
	}
	opens["valid-zstd-planes"] = openRangeInput(4|2, 300, testZstd(t).Compress(nil, crypt.Shuffle2(nil, kvLike(chain(t, testNamespace("fuzz"), 1, 1)[0], 300))))
	opens["malformed-zstd-bomb"] = openRangeInput(2, 300, testZstd(t).Compress(nil, make([]byte, 1<<20)))

	pointers := map[string]any{"valid": p.Pointers[0].Body, "valid-2": q.Pointers[0].Body}
	for i, b := range [][]byte{nil, p.Pointers[0].Body[:100], []byte("GCPT\x02\x00")} {
		pointers[fmt.Sprintf("malformed-%d", i)] = b
	}
	bad := bytes.Clone(p.Pointers[0].Body)
	bad[len(bad)-9] ^= 1
	pointers["malformed-digest"] = bad

	headers := map[string]any{
		"valid":           p.Object.Body[:HeaderLen],
		"valid-with-body": p.Object.Body,
		"malformed-short": p.Object.Body[:10],
		"malformed-zero":  make([]byte, HeaderLen),
	}

	keys := map[string]any{
		"pack":          p.Object.Key,
		"manifest":      p.Manifest.Key,
		"pointer":       p.Pointers[0].Key,
		"malformed-hex": strings.ToUpper(p.Object.Key),
		"malformed-cut": p.Manifest.Key[:80],
	}

	idSeeds := map[string]any{}
	for i, id := range chain(t, lora, 2, 3) {
		c, _ := id.Canonical()
		idSeeds[fmt.Sprintf("valid-%d", i)] = c
		idSeeds[fmt.Sprintf("malformed-trailing-%d", i)] = append(bytes.Clone(c), 0)
		idSeeds[fmt.Sprintf("malformed-truncated-%d", i)] = c[:len(c)-3]
	}
	idSeeds["malformed-namespace-header"] = p.Manifest.Body[12:40]

	return map[string]map[string]any{
		"FuzzDecodeManifest": manifests,
		"FuzzDecodePointer":  pointers,
		"FuzzDecodeHeader":   headers,
		"FuzzParseKey":       keys,
		"FuzzDecodeIdentity": idSeeds,
		"FuzzOpenRange":      opens,
	}
}

func slug(s string) string {
	return strings.Map(func(r rune) rune {
		if r == ' ' || r == '/' {
			return '-'
		}
		return r
	}, s)
}

// corpusFile renders one input in Go's "go test fuzz v1" format.
func corpusFile(v any) string {
	switch v := v.(type) {
	case []byte:
		return "go test fuzz v1\n[]byte(" + strconv.Quote(string(v)) + ")\n"
	case string:
		return "go test fuzz v1\nstring(" + strconv.Quote(v) + ")\n"
	}
	panic(fmt.Sprintf("corpus value %T", v))
}

// TestFuzzSeedCorpora keeps testdata/fuzz in step with seedCorpora; run with
// -update-corpus after changing a format.
func TestFuzzSeedCorpora(t *testing.T) {
	for target, seeds := range seedCorpora(t) {
		dir := filepath.Join("testdata", "fuzz", target)
		if *updateCorpus {
			if err := os.RemoveAll(dir); err != nil {
				t.Fatal(err)
			}
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		for _, name := range slices.Sorted(maps.Keys(seeds)) {
			path := filepath.Join(dir, name)
			want := corpusFile(seeds[name])
			if *updateCorpus {
				if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
					t.Fatal(err)
				}
				continue
			}
			got, err := os.ReadFile(path)
			if err != nil || string(got) != want {
				t.Errorf("%s is missing or stale (run go test -run TestFuzzSeedCorpora -update-corpus): %v", path, err)
			}
		}
	}
}
