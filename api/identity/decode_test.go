package identity

import (
	"bytes"
	"encoding/binary"
	"errors"
	"strings"
	"testing"
)

// ---- DecodeNamespace ----

// tlv builds encodings field by field without validation, for malformed
// inputs.
type tlv struct{ b []byte }

func newTLV(magic string, version, count byte) *tlv {
	return &tlv{b: append([]byte(magic), version, count)}
}

func (e *tlv) field(tag byte, val []byte) *tlv {
	e.b = appendField(e.b, tag, val)
	return e
}

func (e *tlv) u32s(tag byte, v ...uint32) *tlv {
	e.b = appendU32s(e.b, tag, v...)
	return e
}

// rawNamespace encodes n without validating it, with an optional override of
// one field's value.
func rawNamespace(n Namespace, override map[byte][]byte) []byte {
	e := newTLV("GCNS", 1, 15)
	for i, p := range n.strFields() {
		tag := strFieldInfo[i].tag
		v := []byte(*p)
		if o, ok := override[tag]; ok {
			v = o
		}
		e.field(tag, v)
	}
	l := n.Layout
	for _, p := range []struct {
		tag  byte
		a, b uint32
	}{{tagTP, l.TPRank, l.TPSize}, {tagPP, l.PPRank, l.PPSize}, {tagLayers, l.LayerStart, l.LayerCount}, {tagHeads, l.KVHeads, l.HeadDim}} {
		if o, ok := override[p.tag]; ok {
			e.field(p.tag, o)
		} else {
			e.u32s(p.tag, p.a, p.b)
		}
	}
	if o, ok := override[tagBlockTokens]; ok {
		e.field(tagBlockTokens, o)
	} else {
		e.u32s(tagBlockTokens, l.BlockTokens)
	}
	return e.b
}

func TestRawNamespaceMatchesCanonical(t *testing.T) {
	n := testNamespace()
	if !bytes.Equal(rawNamespace(n, nil), mustCanonical(t, n)) {
		t.Fatal("test encoder disagrees with AppendCanonical")
	}
}

func TestDecodeNamespaceRoundTrip(t *testing.T) {
	long := testNamespace()
	for _, p := range long.strFields() {
		*p = strings.Repeat("é", MaxStringLen/2) // 256 bytes of valid UTF-8
	}
	long.Layout.TPRank, long.Layout.TPSize = 0xfffffffe, 0xffffffff
	long.Layout.BlockTokens = MaxBlockTokens
	noAdapter := testNamespace()
	noAdapter.Adapter = ""
	cases := []Namespace{testNamespace(), long, noAdapter}
	for _, in := range goldenInputs() {
		cases = append(cases, in.ns)
	}
	for i, n := range cases {
		b := mustCanonical(t, n)
		got, err := DecodeNamespace(b)
		if err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		if got != n {
			t.Errorf("case %d: decode(encode(x)) = %+v, want %+v", i, got, n)
		}
		if again := mustCanonical(t, got); !bytes.Equal(again, b) {
			t.Errorf("case %d: encode(decode(b)) != b", i)
		}
		// AppendCanonical appends after existing bytes.
		pre := []byte("prefix")
		ab, err := n.AppendCanonical(pre)
		if err != nil || !bytes.Equal(ab[:6], pre) || !bytes.Equal(ab[6:], b) {
			t.Errorf("case %d: AppendCanonical = %x, %v", i, ab, err)
		}
	}
}

// malformedNamespaces returns named inputs DecodeNamespace must reject.
func malformedNamespaces(t testing.TB) map[string][]byte {
	n := testNamespace()
	good, err := n.Canonical()
	if err != nil {
		t.Fatal(err)
	}
	with := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(good)) }
	u32 := func(v ...uint32) []byte {
		var b []byte
		for _, x := range v {
			b = binary.LittleEndian.AppendUint32(b, x)
		}
		return b
	}
	// Swap the first two fields: tags 2 then 1.
	swapped := newTLV("GCNS", 1, 15).field(tagTrustDomain, []byte(n.TrustDomain)).field(tagTenant, []byte(n.Tenant)).b
	swapped = append(swapped, good[6+2*5+len(n.Tenant)+len(n.TrustDomain):]...)
	// Unknown tag in place of the tenant.
	unknown := with(func(b []byte) []byte { b[6] = 99; return b })
	overlong := rawNamespace(n, map[byte][]byte{tagModelID: bytes.Repeat([]byte("m"), MaxStringLen+1)})
	emptyTenant := rawNamespace(n, map[byte][]byte{tagTenant: nil})
	// The length of the first field claims more bytes than remain.
	pastEnd := with(func(b []byte) []byte { binary.LittleEndian.PutUint32(b[7:], 1<<31); return b })
	return map[string][]byte{
		"empty":                     nil,
		"magic only":                []byte("GCNS"),
		"header only":               good[:6],
		"truncated in a field":      good[:len(good)-1],
		"truncated mid length":      good[:8],
		"bad magic":                 with(func(b []byte) []byte { b[0] = 'X'; return b }),
		"identity magic":            with(func(b []byte) []byte { copy(b, "GCID"); return b }),
		"version 0":                 with(func(b []byte) []byte { b[4] = 0; return b }),
		"version 2":                 with(func(b []byte) []byte { b[4] = 2; return b }),
		"field count 14":            with(func(b []byte) []byte { b[5] = 14; return b }),
		"field count 19":            with(func(b []byte) []byte { b[5] = 19; return b }),
		"wrong tag order":           swapped,
		"unknown tag":               unknown,
		"trailing byte":             append(bytes.Clone(good), 0),
		"trailing field":            appendField(bytes.Clone(good), tagParent, make([]byte, 32)),
		"over-long string":          overlong,
		"over-long input":           append(bytes.Clone(good), make([]byte, MaxCanonicalLen)...),
		"length past end":           pastEnd,
		"empty required field":      emptyTenant,
		"invalid utf-8":             rawNamespace(n, map[byte][]byte{tagDType: []byte("fp\xff")}),
		"tp field 12 bytes":         rawNamespace(n, map[byte][]byte{tagTP: u32(0, 1, 0)}),
		"tp field 4 bytes":          rawNamespace(n, map[byte][]byte{tagTP: u32(0)}),
		"block_tokens as u64":       rawNamespace(n, map[byte][]byte{tagBlockTokens: u32(16, 0)}),
		"tp_rank >= tp_size":        rawNamespace(n, map[byte][]byte{tagTP: u32(4, 4)}),
		"block_tokens zero":         rawNamespace(n, map[byte][]byte{tagBlockTokens: u32(0)}),
		"block_tokens over maximum": rawNamespace(n, map[byte][]byte{tagBlockTokens: u32(MaxBlockTokens + 1)}),
	}
}

func TestDecodeNamespaceRejects(t *testing.T) {
	cases := malformedNamespaces(t)
	for name, b := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := DecodeNamespace(b)
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("err = %v, want ErrMalformed", err)
			}
		})
	}
	t.Run("every truncation", func(t *testing.T) {
		good := mustCanonical(t, testNamespace())
		for i := range len(good) {
			if _, err := DecodeNamespace(good[:i]); !errors.Is(err, ErrMalformed) {
				t.Fatalf("prefix of %d bytes: err = %v", i, err)
			}
		}
	})
	t.Run("invalid also wraps ErrInvalid", func(t *testing.T) {
		_, err := DecodeNamespace(cases["empty required field"])
		if !errors.Is(err, ErrMalformed) || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "tenant") {
			t.Fatalf("err = %v", err)
		}
	})
}

func FuzzDecodeNamespace(f *testing.F) {
	for _, in := range goldenInputs() {
		f.Add(mustCanonical(f, in.ns))
	}
	for _, b := range malformedNamespaces(f) {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		n, err := DecodeNamespace(b)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v is not ErrMalformed", err)
			}
			return
		}
		again, err := n.Canonical()
		if err != nil {
			t.Fatalf("decoded namespace does not encode: %v", err)
		}
		if !bytes.Equal(again, b) {
			t.Fatalf("not canonical:\n in  %x\n out %x", b, again)
		}
	})
}
