package pack

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"github.com/gpucache/gpucache/api/identity"
	"github.com/gpucache/gpucache/internal/cold"
	"github.com/gpucache/gpucache/internal/cold/crypt"
)

// cryptRing returns a cipher keyring at testEpoch holding key id, whose
// secret is derived from secretOf.
func cryptRing(t testing.TB, id, secretOf string) *crypt.Keyring {
	t.Helper()
	r := crypt.New(func() time.Time { return testEpoch })
	if err := r.Add(id, bytes.Repeat([]byte(secretOf+"/master"), 8)[:32], testEpoch); err != nil {
		t.Fatal(err)
	}
	return r
}

func testZstd(t testing.TB) *crypt.Zstd {
	t.Helper()
	z, err := crypt.NewZstd()
	if err != nil {
		t.Fatal(err)
	}
	return z
}

// countingRand is a reproducible nonce stream for seed corpora.
type countingRand struct{ n byte }

func (c *countingRand) Read(p []byte) (int, error) {
	for i := range p {
		c.n++
		p[i] = c.n
	}
	return len(p), nil
}

// kvLike returns compressible bytes shaped like fp16 data: a repeating
// sign/exponent byte and a varying mantissa byte.
func kvLike(id identity.CacheIdentity, size int) []byte {
	b := make([]byte, size)
	for j := range b {
		if j%2 == 1 {
			b[j] = 0x3c
		} else {
			b[j] = byte(int(id.Tokens[0]) + j/64)
		}
	}
	return b
}

// openAll decodes every range of p's manifest and compares it with blocks.
func openAll(t *testing.T, p *Pack, blocks []Block, dec Decrypter, cz Compressor) *Manifest {
	t.Helper()
	m := mustDecode(t, p.Manifest.Body)
	a, err := m.Decrypter(dec)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range m.Ranges {
		stored := bytes.Clone(p.Object.Body[r.Offset : r.Offset+r.Length])
		out := make([]byte, r.Size)
		if err := m.OpenRange(r, stored, out, a, cz); err != nil {
			t.Fatalf("range %d: %v", i, err)
		}
		if !bytes.Equal(out, blocks[i].Payload) {
			t.Fatalf("range %d: plaintext differs", i)
		}
	}
	return m
}

// Without options BuildWith is Build, byte for byte: a v3 manifest.
func TestBuildWithNoOptionsIsV3(t *testing.T) {
	ns := testNamespace("acme")
	blocks := blocksOf(chain(t, ns, 3, 7), 40)
	a := mustBuild(t, ns, blocks)
	b, err := BuildWith(ns, blocks, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Manifest.Body, b.Manifest.Body) || !bytes.Equal(a.Object.Body, b.Object.Body) {
		t.Fatal("BuildWith(no options) differs from Build")
	}
	if v := binary.LittleEndian.Uint16(b.Manifest.Body[4:]); v != ManifestVersion {
		t.Fatalf("version %d", v)
	}
}

func TestEncryptedRoundTrip(t *testing.T) {
	ns := testNamespace("acme")
	blocks := blocksOf(chain(t, ns, 3, 7), 4000)
	kr := cryptRing(t, "c1", "c1")
	p, err := BuildWith(ns, blocks, Options{Encrypter: kr, Sealer: testKeyring(t, "s1")})
	if err != nil {
		t.Fatal(err)
	}
	if err := VerifyWith(p, testKeyring(t, "s1"), kr, nil); err != nil {
		t.Fatalf("VerifyWith: %v", err)
	}
	if err := VerifyWith(p, testKeyring(t, "s1"), nil, nil); !errors.Is(err, ErrRejected) || !errors.Is(err, ErrKeyUnavailable) {
		t.Fatalf("VerifyWith without a decrypter: %v", err)
	}
	m := openAll(t, p, blocks, kr, nil)
	if !m.Encrypted() || m.CipherKey() != "c1" || binary.LittleEndian.Uint16(p.Manifest.Body[4:]) != ManifestVersionEncoded {
		t.Fatalf("manifest: encrypted %v key %q", m.Encrypted(), m.CipherKey())
	}
	// The plaintext appears nowhere in the pack object.
	for i, b := range blocks {
		if bytes.Contains(p.Object.Body, b.Payload[:64]) {
			t.Fatalf("block %d plaintext visible in the pack", i)
		}
	}
}

func TestCompressedOnlyWherePays(t *testing.T) {
	ns := testNamespace("acme")
	ids := chain(t, ns, 3, 7)
	blocks := []Block{
		{Identity: ids[0], Payload: kvLike(ids[0], 8192)},
		{Identity: ids[1], Payload: payload(ids[1], 8192)}, // a mod-256 ramp: compresses
		{Identity: ids[2], Payload: randomBytes(8192)},     // does not
	}
	z := testZstd(t)
	p, err := BuildWith(ns, blocks, Options{Compressor: z})
	if err != nil {
		t.Fatal(err)
	}
	if err := VerifyWith(p, nil, nil, z); err != nil {
		t.Fatal(err)
	}
	if err := Verify(p); !errors.Is(err, ErrRejected) {
		t.Fatalf("Verify without a decompressor: %v", err)
	}
	m := openAll(t, p, blocks, nil, z)
	if m.Ranges[0].Codec != CodecZstd || m.Ranges[2].Codec != CodecRaw {
		t.Fatalf("codecs %d %d %d", m.Ranges[0].Codec, m.Ranges[1].Codec, m.Ranges[2].Codec)
	}
	if m.PackSize >= uint64(HeaderLen+3*8192) {
		t.Fatalf("pack of %d bytes did not shrink", m.PackSize)
	}
	// Byte planes: the fp16-shaped block compresses as planes.
	pp, err := BuildWith(ns, blocks, Options{Compressor: z, BytePlanes: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := VerifyWith(pp, nil, nil, z); err != nil {
		t.Fatal(err)
	}
	if pm := openAll(t, pp, blocks, nil, z); pm.Ranges[0].Codec != CodecZstdPlanes || pm.Ranges[2].Codec != CodecRaw {
		t.Fatalf("planes codecs %d %d", pm.Ranges[0].Codec, pm.Ranges[2].Codec)
	}
	// Nothing pays: the pack stays v3.
	q, err := BuildWith(ns, blocks[2:], Options{Compressor: z})
	if err != nil {
		t.Fatal(err)
	}
	if binary.LittleEndian.Uint16(q.Manifest.Body[4:]) != ManifestVersion {
		t.Fatal("a pack where compression did not pay is not v3")
	}
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	x := uint64(0x9e3779b97f4a7c15)
	for i := range b {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		b[i] = byte(x)
	}
	return b
}

// Tampering with any byte of an encrypted block (nonce, ciphertext, tag),
// moving a block to another range, or opening it under another tenant or
// secret fails authentication: ErrDecrypt, and dst is zeroed.
func TestTamperedCiphertextFails(t *testing.T) {
	ns := testNamespace("acme")
	ids := chain(t, ns, 2, 7)
	blocks := []Block{{Identity: ids[0], Payload: kvLike(ids[0], 512)}, {Identity: ids[1], Payload: kvLike(ids[1], 512)}}
	kr := cryptRing(t, "c1", "c1")
	z := testZstd(t)
	p, err := BuildWith(ns, blocks, Options{Encrypter: kr, Compressor: z})
	if err != nil {
		t.Fatal(err)
	}
	m := mustDecode(t, p.Manifest.Body)
	a, _ := m.Decrypter(kr)
	r := m.Ranges[0]
	for i := range int(r.Length) {
		stored := bytes.Clone(p.Object.Body[r.Offset : r.Offset+r.Length])
		stored[i] ^= 0x80
		out := bytes.Repeat([]byte{0xee}, int(r.Size))
		if err := m.OpenRange(r, stored, out, a, z); !errors.Is(err, ErrDecrypt) || !errors.Is(err, cold.ErrCorrupt) {
			t.Fatalf("byte %d flipped: %v", i, err)
		}
		if !bytes.Equal(out, make([]byte, r.Size)) {
			t.Fatalf("byte %d flipped: dst not zeroed", i)
		}
	}
	// Range 1's bytes under range 0's record.
	r1 := m.Ranges[1]
	moved := bytes.Clone(p.Object.Body[r1.Offset : r1.Offset+r1.Length])
	if r1.Length == r.Length {
		if err := m.OpenRange(r, moved, make([]byte, r.Size), a, z); !errors.Is(err, ErrDecrypt) {
			t.Fatalf("moved block: %v", err)
		}
	}
	stored := func() []byte { return bytes.Clone(p.Object.Body[r.Offset : r.Offset+r.Length]) }
	other, _ := cryptRing(t, "c1", "c1").Decrypter("globex", "c1")
	if err := m.OpenRange(r, stored(), make([]byte, r.Size), other, z); !errors.Is(err, ErrDecrypt) {
		t.Fatalf("another tenant's key: %v", err)
	}
	wrong, _ := m.Decrypter(cryptRing(t, "c1", "not-c1"))
	if err := m.OpenRange(r, stored(), make([]byte, r.Size), wrong, z); !errors.Is(err, ErrDecrypt) {
		t.Fatalf("wrong secret: %v", err)
	}
	if _, err := m.Decrypter(cryptRing(t, "c2", "c1")); !errors.Is(err, ErrKeyUnavailable) || !errors.Is(err, crypt.ErrUnknownKey) {
		t.Fatalf("unknown key id: %v", err)
	}
	if _, err := m.Decrypter(nil); !errors.Is(err, ErrKeyUnavailable) {
		t.Fatalf("no keyring: %v", err)
	}
	var nilRing *crypt.Keyring
	if _, err := m.Decrypter(nilRing); !errors.Is(err, ErrKeyUnavailable) {
		t.Fatalf("nil keyring: %v", err)
	}
	// Admission: a tampered pack object is rejected before any write.
	q := clonePack(p)
	q.Object.Body[r.Offset+NonceLen] ^= 1
	reseal(t, q, m, q.Object.Body)
	if err := VerifyWith(q, nil, kr, z); !errors.Is(err, ErrRejected) || !errors.Is(err, ErrDecrypt) {
		t.Fatalf("VerifyWith of a tampered pack: %v", err)
	}
}

// malformedV4 returns v4 manifests that must fail closed.
func malformedV4(t testing.TB) map[string][]byte {
	t.Helper()
	ns := testNamespace("acme")
	ids := chain(t, ns, 2, 7)
	blocks := []Block{{Identity: ids[0], Payload: kvLike(ids[0], 512)}, {Identity: ids[1], Payload: kvLike(ids[1], 512)}}
	p, err := BuildWith(ns, blocks, Options{Encrypter: cryptRing(t, "c1", "c1"), Compressor: testZstd(t), Rand: &countingRand{}})
	if err != nil {
		t.Fatal(err)
	}
	edit := func(f func(m *Manifest)) []byte {
		m := mustDecode(t, p.Manifest.Body)
		f(m)
		b, err := m.Encode()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	return map[string][]byte{
		"cipher unknown":        edit(func(m *Manifest) { m.Cipher = 2 }),
		"cipher without key id": edit(func(m *Manifest) { m.CipherKeyID = nil }),
		"key id without cipher": edit(func(m *Manifest) { m.Cipher = CipherNone }),
		"codec unknown":         edit(func(m *Manifest) { m.Ranges[0].Codec = 7 }),
		"zstd not smaller":      edit(func(m *Manifest) { m.Ranges[0].Size = m.Ranges[0].Length - CipherOverhead }),
		"raw size mismatch":     edit(func(m *Manifest) { m.Ranges[0].Codec = CodecRaw }),
		"zero plaintext":        edit(func(m *Manifest) { m.Ranges[0].Size = 0 }),
		"huge plaintext":        edit(func(m *Manifest) { m.Ranges[0].Size = MaxBlockSize + 1 }),
		"too short for a tag": edit(func(m *Manifest) {
			m.Ranges[1].Offset -= m.Ranges[0].Length - CipherOverhead
			m.Ranges[0].Length = CipherOverhead
		}),
		"v4 with nothing encoded": func() []byte {
			b := mustBuild(t, ns, blocks).Manifest.Body
			m := mustDecode(t, b)
			nb, _ := m.Encode()
			// Re-label as v4 by hand: add an empty cipher slot and per-range
			// size and codec.
			out := setVersion(nb, ManifestVersionEncoded)
			_ = out
			m.Cipher = CipherNone
			m.Ranges[0].Codec = CodecZstd // makes Encode write v4 ...
			v4, _ := m.Encode()
			// ... then flip the codec byte of range 0 back to raw.
			rec := bytes.Index(v4, m.Ranges[0].Sum[:]) + 32 + 8
			v4[rec] = byte(CodecRaw)
			return v4
		}(),
	}
}

func TestMalformedV4FailsClosed(t *testing.T) {
	for name, b := range malformedV4(t) {
		t.Run(name, func(t *testing.T) {
			m, err := DecodeManifest(b)
			if !errors.Is(err, cold.ErrCorrupt) || m != nil {
				t.Fatalf("DecodeManifest = %v, %v; want ErrCorrupt", m, err)
			}
		})
	}
}

// fuzzAEAD is FuzzOpenRange's fixed key.
func fuzzAEAD() cipher.AEAD {
	b, _ := aes.NewCipher(bytes.Repeat([]byte{7}, 32))
	a, _ := cipher.NewGCM(b)
	return a
}

// openRangeInput builds FuzzOpenRange's input: flags (bit 0 encrypted,
// bit 1 zstd, bit 2 zstd over byte planes), u32 plaintext size, then the stored bytes.
func openRangeInput(flags byte, size uint32, stored []byte) []byte {
	b := []byte{flags}
	b = binary.LittleEndian.AppendUint32(b, size)
	return append(b, stored...)
}

// fuzzRange is the fixed record FuzzOpenRange opens its bytes under.
func fuzzRange(t testing.TB, flags byte, size uint32, storedLen int) (*Manifest, Range) {
	ns := testNamespace("fuzz")
	id := chain(t, ns, 1, 1)[0]
	nsd, _ := ns.Digest()
	m := &Manifest{Namespace: ns}
	if flags&1 != 0 {
		m.Cipher, m.CipherKeyID = CipherAES256GCM, []byte("f1")
	}
	r := Range{Identity: id, Key: id.KeyIn(nsd), Offset: HeaderLen, Length: uint64(storedLen), Size: uint64(size)}
	switch {
	case flags&4 != 0:
		r.Codec = CodecZstdPlanes
	case flags&2 != 0:
		r.Codec = CodecZstd
	}
	r.Sum = Sum(kvLike(id, int(size)))
	return m, r
}

// validOpenRangeInputs returns stored blocks that open.
func validOpenRangeInputs(t testing.TB) map[string][]byte {
	t.Helper()
	z := testZstd(t)
	ns := testNamespace("fuzz")
	id := chain(t, ns, 1, 1)[0]
	nsd, _ := ns.Digest()
	const size = 300
	plain := kvLike(id, size)
	comp := z.Compress(nil, plain)
	out := map[string][]byte{
		"valid-raw":  openRangeInput(0, size, plain),
		"valid-zstd": openRangeInput(2, size, comp),
	}
	a := fuzzAEAD()
	for _, c := range []struct {
		name  string
		flags byte
		inner []byte
		codec Codec
	}{{"valid-aes", 1, plain, CodecRaw}, {"valid-aes-zstd", 3, comp, CodecZstd}} {
		nonce := bytes.Repeat([]byte{c.flags}, NonceLen)
		aad := blockAAD(nsd, id.KeyIn(nsd), Sum(plain), size, c.codec, []byte("f1"))
		out[c.name] = openRangeInput(c.flags, size, a.Seal(bytes.Clone(nonce), nonce, c.inner, aad))
	}
	return out
}

// FuzzOpenRange: the decoder of stored blocks never panics, never writes
// past dst, fails only with ErrDecrypt or ErrDecode (both ErrCorrupt),
// zeroes dst on failure, and succeeds only with the plaintext the record
// names.
func FuzzOpenRange(f *testing.F) {
	z := testZstd(f)
	a := fuzzAEAD()
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) < 5 {
			return
		}
		flags, size, stored := in[0]&7, binary.LittleEndian.Uint32(in[1:]), in[5:]
		if size == 0 || size > 1<<20 {
			return
		}
		m, r := fuzzRange(t, flags, size, len(stored))
		buf := make([]byte, int(size)+16)
		for i := range buf {
			buf[i] = 0xa5
		}
		dst := buf[:size]
		err := m.OpenRange(r, bytes.Clone(stored), dst, a, z)
		for _, c := range buf[size:] {
			if c != 0xa5 {
				t.Fatal("wrote past dst")
			}
		}
		if err != nil {
			if !errors.Is(err, cold.ErrCorrupt) || !(errors.Is(err, ErrDecrypt) || errors.Is(err, ErrDecode)) {
				t.Fatalf("error %v is not ErrDecrypt or ErrDecode", err)
			}
			if !bytes.Equal(dst, make([]byte, size)) {
				t.Fatal("dst not zeroed on failure")
			}
			return
		}
		if Sum(dst) != r.Sum {
			t.Fatal("accepted bytes that are not the record's plaintext")
		}
	})
}

func TestOpenRangeSeedsOpen(t *testing.T) {
	z := testZstd(t)
	for name, in := range validOpenRangeInputs(t) {
		flags, size, stored := in[0], binary.LittleEndian.Uint32(in[1:]), in[5:]
		m, r := fuzzRange(t, flags, size, len(stored))
		if err := m.OpenRange(r, bytes.Clone(stored), make([]byte, size), fuzzAEAD(), z); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
}
