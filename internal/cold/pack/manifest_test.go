package pack

import (
	"bytes"
	"encoding/binary"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/gpucache/gpucache/api/identity"
	"github.com/gpucache/gpucache/internal/cold"
)

// goodManifest returns a three-block pack and its decoded manifest.
func goodManifest(t testing.TB) (*Pack, *Manifest) {
	t.Helper()
	ns := testNamespace("acme")
	p := mustBuild(t, ns, blocksOf(chain(t, ns, 3, 7), 40))
	return p, mustDecode(t, p.Manifest.Body)
}

// legacyManifest returns a legacy header of version v followed by body.
func legacyManifest(v uint16, body []byte) []byte {
	b := binary.LittleEndian.AppendUint16([]byte("GCMF"), v)
	return append(b, body...)
}

// setVersion returns b with its u16 manifest version replaced.
func setVersion(b []byte, v uint16) []byte {
	b = bytes.Clone(b)
	binary.LittleEndian.PutUint16(b[4:], v)
	return b
}

// malformedManifests returns v3 manifests each broken in one way, each of
// which must fail with cold.ErrCorrupt. Used by the tests and as fuzz seeds.
func malformedManifests(t testing.TB) map[string][]byte {
	t.Helper()
	p, _ := goodManifest(t)
	good := p.Manifest.Body
	edit := func(f func(m *Manifest)) []byte {
		m := mustDecode(t, good)
		f(m)
		b, err := m.Encode()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	otherNS, _ := testNamespace("evil").Digest()
	out := map[string][]byte{
		"empty":            nil,
		"bad magic":        append([]byte("GCMX"), good[4:]...),
		"version 0":        setVersion(good, 0),
		"version 4":        setVersion(good, 4),
		"flags":            func() []byte { b := bytes.Clone(good); b[6] = 1; return b }(),
		"trailing byte":    append(bytes.Clone(good), 0),
		"truncated seal":   good[:len(good)-1],
		"namespace length": func() []byte { b := bytes.Clone(good); binary.LittleEndian.PutUint32(b[8:], 1<<30); return b }(),
		"zero ranges":      edit(func(m *Manifest) { m.Ranges = nil }),
		"range count larger than the bytes": func() []byte {
			b := bytes.Clone(good)
			nsLen := int(binary.LittleEndian.Uint32(b[8:]))
			off := 12 + nsLen + 2 + len(p.Object.Key) + 32 + 8
			binary.LittleEndian.PutUint32(b[off:], 4000)
			return b
		}(),
		"range count above the limit": func() []byte {
			b := bytes.Clone(good)
			nsLen := int(binary.LittleEndian.Uint32(b[8:]))
			off := 12 + nsLen + 2 + len(p.Object.Key) + 32 + 8
			binary.LittleEndian.PutUint32(b[off:], MaxRanges+1)
			return b
		}(),
		"overlapping ranges":   edit(func(m *Manifest) { m.Ranges[1].Offset--; m.Ranges[1].Length++ }),
		"gap between ranges":   edit(func(m *Manifest) { m.Ranges[1].Offset++; m.Ranges[1].Length-- }),
		"range past the end":   edit(func(m *Manifest) { m.Ranges[2].Length++ }),
		"ranges short of end":  edit(func(m *Manifest) { m.PackSize++ }),
		"range before payload": edit(func(m *Manifest) { m.Ranges[0].Offset = 0; m.Ranges[0].Length += HeaderLen }),
		"empty range":          edit(func(m *Manifest) { m.Ranges[2].Length = 0; m.PackSize -= 42 }),
		"offset overflow": edit(func(m *Manifest) {
			m.Ranges[2].Offset, m.Ranges[2].Length = m.Ranges[1].Offset+m.Ranges[1].Length, ^uint64(0)
		}),
		"pack size too small":   edit(func(m *Manifest) { m.PackSize = HeaderLen }),
		"pack size above limit": edit(func(m *Manifest) { m.PackSize = MaxPackSize + 1 }),
		"key is not KeyFor":     edit(func(m *Manifest) { m.Ranges[1].Key[0] ^= 1 }),
		"duplicate range": edit(func(m *Manifest) {
			m.Ranges[1] = m.Ranges[0]
			m.Ranges[1].Offset = m.Ranges[0].Offset + m.Ranges[0].Length
		}),
		"identity does not parse": edit(func(m *Manifest) { m.Ranges[0].Canonical = []byte("GCID\x01\x13garbage") }),
		"identity not canonical": edit(func(m *Manifest) {
			m.Ranges[0].Canonical = append(bytes.Clone(m.Ranges[0].Canonical), 0)
		}),
		"identity invalid": edit(func(m *Manifest) {
			c := bytes.Clone(m.Ranges[1].Canonical)
			// valid_length is the u32 before the tokens field (16 bytes).
			binary.LittleEndian.PutUint32(c[len(c)-16-5-4:], 0)
			m.Ranges[1].Canonical = c
		}),
		"identity of another namespace": edit(func(m *Manifest) {
			e := chain(t, testNamespace("evil"), 1, 7)[0]
			m.Ranges[0].Identity, m.Ranges[0].Canonical = e, nil
			m.Ranges[0].Key, _ = e.Key()
		}),
		"identity length over limit": func() []byte {
			b := bytes.Clone(good)
			i := bytes.Index(b, []byte("GCID"))
			binary.LittleEndian.PutUint32(b[i-4:], maxIdentityLen+1)
			return b
		}(),
		"pack key malformed":       edit(func(m *Manifest) { m.PackKey = "packs/x.pack" }),
		"pack key other ns":        edit(func(m *Manifest) { m.PackKey = PackKey(otherNS, m.PackDigest) }),
		"pack key digest":          edit(func(m *Manifest) { m.PackDigest[0] ^= 1 }),
		"seal kind unknown":        edit(func(m *Manifest) { m.Seal = Seal{Kind: 2, KeyID: []byte("k1"), MAC: make([]byte, 32)} }),
		"seal kind unknown empty":  edit(func(m *Manifest) { m.Seal = Seal{Kind: 0xff} }),
		"seal key id without kind": edit(func(m *Manifest) { m.Seal.KeyID = []byte("k1") }),
		"seal MAC without kind":    edit(func(m *Manifest) { m.Seal.MAC = make([]byte, 32) }),
		"seal hmac without key id": edit(func(m *Manifest) { m.Seal = Seal{Kind: SealHMACSHA256, MAC: make([]byte, 32)} }),
		"seal hmac key id too long": edit(func(m *Manifest) {
			m.Seal = Seal{Kind: SealHMACSHA256, KeyID: bytes.Repeat([]byte("k"), 33), MAC: make([]byte, 32)}
		}),
		"seal hmac without MAC": edit(func(m *Manifest) { m.Seal = Seal{Kind: SealHMACSHA256, KeyID: []byte("k1")} }),
		"seal hmac MAC short": edit(func(m *Manifest) {
			m.Seal = Seal{Kind: SealHMACSHA256, KeyID: []byte("k1"), MAC: make([]byte, 31)}
		}),
		"seal hmac MAC long": edit(func(m *Manifest) {
			m.Seal = Seal{Kind: SealHMACSHA256, KeyID: []byte("k1"), MAC: make([]byte, 33)}
		}),
		"namespace malformed": func() []byte {
			b := bytes.Clone(good)
			i := bytes.Index(b, []byte("acme"))
			copy(b[i-4:], []byte{0, 0, 0, 0}) // tenant length 0: the next tag is misread
			return b
		}(),
	}
	// A v1/v2 body relabelled v3 is malformed v3, not a migration.
	out["legacy body labelled v3"] = setVersion(legacyManifest(2, []byte("old manifest body")), 3)
	return out
}

func TestDecodeManifestRejectsMalformedV3(t *testing.T) {
	cases := malformedManifests(t)
	for _, name := range slices.Sorted(maps.Keys(cases)) {
		t.Run(name, func(t *testing.T) {
			m, err := DecodeManifest(cases[name])
			if !errors.Is(err, cold.ErrCorrupt) || errors.Is(err, ErrLegacyManifest) || m != nil {
				t.Fatalf("DecodeManifest = %v, %v; want ErrCorrupt and no manifest", m, err)
			}
		})
	}
	for _, v := range []uint16{0, 5, 0xffff} {
		_, err := DecodeManifest(setVersion(malformedManifests(t)["trailing byte"], v))
		if !errors.Is(err, ErrManifestVersion) {
			t.Fatalf("version %d: %v, want ErrManifestVersion", v, err)
		}
	}
}

// Every proper prefix of a valid manifest fails closed, never panics and is
// never taken for legacy.
func TestDecodeManifestTruncatedEverywhere(t *testing.T) {
	p, _ := goodManifest(t)
	b := p.Manifest.Body
	for n := range len(b) {
		if _, err := DecodeManifest(b[:n]); !errors.Is(err, cold.ErrCorrupt) {
			t.Fatalf("prefix %d/%d: %v", n, len(b), err)
		}
	}
}

func TestLegacyManifestHeaders(t *testing.T) {
	p, _ := goodManifest(t)
	for _, v := range []uint16{1, 2} {
		for name, b := range map[string][]byte{
			"header only":       legacyManifest(v, nil),
			"opaque body":       legacyManifest(v, []byte("any bytes the old format had")),
			"v3 body relabeled": setVersion(p.Manifest.Body, v),
		} {
			m, err := DecodeManifest(b)
			if !errors.Is(err, ErrLegacyManifest) || errors.Is(err, cold.ErrCorrupt) || m != nil {
				t.Fatalf("v%d %s: %v, want ErrLegacyManifest only", v, name, err)
			}
			// OpenManifest answers legacy before looking at the key.
			if _, err := OpenManifest("anything", b); !errors.Is(err, ErrLegacyManifest) {
				t.Fatalf("v%d %s: OpenManifest %v", v, name, err)
			}
			if !IsLegacyManifest(b) {
				t.Fatalf("v%d %s: IsLegacyManifest false", v, name)
			}
		}
	}
	for _, b := range [][]byte{nil, []byte("GCMF\x01"), setVersion(p.Manifest.Body, 3), []byte("GCMX\x01\x00")} {
		if IsLegacyManifest(b) {
			t.Fatalf("IsLegacyManifest(%x) true", b)
		}
	}
}

func TestOpenManifestChecksKey(t *testing.T) {
	p, _ := goodManifest(t)
	evil := mustBuild(t, testNamespace("evil"), blocksOf(chain(t, testNamespace("evil"), 1, 1), 8))
	evilNS, _ := testNamespace("evil").Digest()
	cases := map[string]struct {
		key  string
		body []byte
	}{
		"not a manifest key":         {p.Object.Key, p.Manifest.Body},
		"digest is of other bytes":   {evil.Manifest.Key, p.Manifest.Body},
		"content moved to other key": {p.Manifest.Key, evil.Manifest.Body},
		"namespace of the key":       {ManifestKey(evilNS, Sum(p.Manifest.Body)), p.Manifest.Body},
		"upper-case hex":             {strings.ToUpper(p.Manifest.Key), p.Manifest.Body},
	}
	for _, name := range slices.Sorted(maps.Keys(cases)) {
		c := cases[name]
		if _, err := OpenManifest(c.key, c.body); !errors.Is(err, cold.ErrCorrupt) {
			t.Errorf("%s: %v, want ErrCorrupt", name, err)
		}
	}
	if _, err := OpenManifest(p.Manifest.Key, p.Manifest.Body); err != nil {
		t.Fatal(err)
	}
}

func TestManifestEncodeLimits(t *testing.T) {
	_, m := goodManifest(t)
	bad := []func(m *Manifest){
		func(m *Manifest) { m.Namespace.Tenant = "" },
		func(m *Manifest) { m.PackKey = strings.Repeat("k", 0x10000) },
		func(m *Manifest) { m.Ranges = make([]Range, MaxRanges+1) },
		func(m *Manifest) { m.Seal.MAC = make([]byte, MaxSealMAC+1) },
		func(m *Manifest) { m.Ranges[0].Canonical = nil; m.Ranges[0].Identity.ValidLength = 0 },
	}
	for i, f := range bad {
		c := *m
		c.Ranges = slices.Clone(m.Ranges)
		f(&c)
		if _, err := c.Encode(); !errors.Is(err, ErrInvalid) {
			t.Errorf("case %d: %v, want ErrInvalid", i, err)
		}
	}
}

func TestPointerCodec(t *testing.T) {
	p, _ := goodManifest(t)
	good := p.Pointers[0].Body
	if len(good) != PointerLen || PointerLen != 256 || manifestKeyLen != 142 {
		t.Fatalf("PointerLen %d, manifest key %d: update doc.go", PointerLen, manifestKeyLen)
	}
	ptr, err := DecodePointer(good)
	if err != nil {
		t.Fatal(err)
	}
	mut := func(f func(b []byte)) []byte { b := bytes.Clone(good); f(b); return b }
	cases := map[string][]byte{
		"empty":           nil,
		"short":           good[:len(good)-1],
		"long":            append(bytes.Clone(good), 0),
		"magic":           mut(func(b []byte) { b[0] = 'X' }),
		"version":         mut(func(b []byte) { b[4] = 2 }),
		"flags":           mut(func(b []byte) { b[7] = 1 }),
		"key length":      mut(func(b []byte) { b[72]-- }),
		"namespace":       mut(func(b []byte) { b[8] ^= 1 }),
		"digest":          mut(func(b []byte) { b[len(b)-9] ^= 1 }),
		"size zero":       mut(func(b []byte) { clear(b[len(b)-8:]) }),
		"size too big":    mut(func(b []byte) { b[len(b)-1] = 1 }),
		"manifest key":    mut(func(b []byte) { b[74] = 'M' }),
		"key upper hex":   mut(func(b []byte) { copy(b[74+10:], strings.ToUpper(string(b[74+10:74+74]))) }),
		"key digest char": mut(func(b []byte) { b[74+10+65] = 'g' }),
	}
	for _, name := range slices.Sorted(maps.Keys(cases)) {
		if _, err := DecodePointer(cases[name]); !errors.Is(err, cold.ErrCorrupt) {
			t.Errorf("%s: %v, want ErrCorrupt", name, err)
		}
	}
	bad := ptr
	bad.Manifest[0] ^= 1
	if _, err := bad.Encode(); !errors.Is(err, cold.ErrCorrupt) {
		t.Fatalf("Encode of an inconsistent pointer: %v", err)
	}
}

func TestHeaderCodec(t *testing.T) {
	h := Header{Namespace: identity.NamespaceDigest{1, 2}, Blocks: 3, PayloadLen: 99}
	b := h.Encode()
	if len(b) != HeaderLen || HeaderLen != 52 {
		t.Fatalf("header is %d bytes", len(b))
	}
	got, err := DecodeHeader(b)
	if err != nil || got != h {
		t.Fatalf("%+v %v", got, err)
	}
	raw := func(f func(b []byte)) []byte { b := h.Encode(); f(b); return b }
	with := func(f func(h *Header)) []byte { c := h; f(&c); return c.Encode() }
	cases := map[string][]byte{
		"short":         b[:HeaderLen-1],
		"magic":         raw(func(b []byte) { b[0] = 'Z' }),
		"version":       raw(func(b []byte) { b[4] = 9 }),
		"flags":         raw(func(b []byte) { b[6] = 1 }),
		"zero blocks":   with(func(h *Header) { h.Blocks = 0 }),
		"many blocks":   with(func(h *Header) { h.Blocks = MaxRanges + 1 }),
		"short payload": with(func(h *Header) { h.PayloadLen = 2 }),
		"huge payload":  with(func(h *Header) { h.PayloadLen = MaxPackSize }),
	}
	for _, name := range slices.Sorted(maps.Keys(cases)) {
		if _, err := DecodeHeader(cases[name]); !errors.Is(err, cold.ErrCorrupt) {
			t.Errorf("%s: %v, want ErrCorrupt", name, err)
		}
	}
}

func TestKeyParsers(t *testing.T) {
	ns, _ := testNamespace("acme").Digest()
	sum := Sum([]byte("x"))
	k := identity.BlockKey(sum)
	if gns, gsum, err := ParsePackKey(PackKey(ns, sum)); err != nil || gns != ns || gsum != sum {
		t.Fatal("pack key round trip", err)
	}
	if gns, gsum, err := ParseManifestKey(ManifestKey(ns, sum)); err != nil || gns != ns || gsum != sum {
		t.Fatal("manifest key round trip", err)
	}
	if gns, gk, err := ParsePointerKey(PointerKey(ns, k)); err != nil || gns != ns || gk != k {
		t.Fatal("pointer key round trip", err)
	}
	for _, bad := range []string{
		"", "packs/", PackKey(ns, sum) + "x", "x" + PackKey(ns, sum), ManifestKey(ns, sum),
		strings.ToUpper(PackKey(ns, sum)), strings.Replace(PackKey(ns, sum), "/", "_", 2),
		"packs/" + ns.String() + "/" + sum.String()[:63] + "g.pack",
	} {
		if _, _, err := ParsePackKey(bad); !errors.Is(err, cold.ErrCorrupt) {
			t.Errorf("ParsePackKey(%q) = %v", bad, err)
		}
	}
	for _, pfx := range NamespacePrefixes(ns) {
		ok := strings.HasPrefix(PackKey(ns, sum), pfx) || strings.HasPrefix(ManifestKey(ns, sum), pfx) || strings.HasPrefix(PointerKey(ns, k), pfx)
		if !ok {
			t.Errorf("prefix %q matches no key", pfx)
		}
	}
}

func TestDecodeIdentity(t *testing.T) {
	ns := testNamespace("acme")
	ns.Adapter = "lora/sql-v2"
	ns.Layout.TPSize, ns.Layout.TPRank = 4, 3
	ids := chain(t, ns, 3, 9)
	partial := ids[2]
	partial.Tokens = partial.Tokens[:3]
	partial.ValidLength = 2
	for i, id := range append(ids, partial) {
		c, err := id.Canonical()
		if err != nil {
			t.Fatal(err)
		}
		got, err := decodeIdentity(c)
		if err != nil {
			t.Fatalf("%d: %v", i, err)
		}
		if again, _ := got.Canonical(); !bytes.Equal(again, c) {
			t.Fatalf("%d: round trip differs", i)
		}
		// Every proper prefix and every single-byte change is rejected
		// or decodes to an identity whose encoding is exactly the input.
		for n := range len(c) {
			if _, err := decodeIdentity(c[:n]); !errors.Is(err, cold.ErrCorrupt) {
				t.Fatalf("%d: prefix %d: %v", i, n, err)
			}
		}
		for j := range c {
			b := bytes.Clone(c)
			b[j] ^= 0x80
			got, err := decodeIdentity(b)
			if err == nil {
				if again, _ := got.Canonical(); !bytes.Equal(again, b) {
					t.Fatalf("%d: byte %d: accepted a non-canonical encoding", i, j)
				}
			} else if !errors.Is(err, cold.ErrCorrupt) {
				t.Fatalf("%d: byte %d: %v", i, j, err)
			}
		}
	}
}
