package pack

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/gpucache/gpucache/api/identity"
	"github.com/gpucache/gpucache/internal/cold"
)

// ErrRejected: Verify found a pack inconsistent. Every Verify error wraps it
// and cold.ErrCorrupt; the sink treats it as a terminal failure and writes
// nothing.
var ErrRejected = errors.New("gpucache/cold/pack: pack rejected before write")

// Pack object layout constants (doc.go, "Pack object").
const (
	packMagic = "GCPK"
	// PackVersion is the pack object format version.
	PackVersion = 1
	// HeaderLen is the size of the pack header; the first payload starts
	// here.
	HeaderLen = 4 + 2 + 2 + 32 + 4 + 8
)

// Header is the fixed header at the start of every pack object.
type Header struct {
	Namespace  identity.NamespaceDigest // namespace of every block in the pack
	Blocks     uint32                   // number of blocks, 1..MaxRanges
	PayloadLen uint64                   // payload bytes after the header
}

// Encode returns the header's HeaderLen bytes.
func (h Header) Encode() []byte {
	b := make([]byte, 0, HeaderLen)
	b = append(b, packMagic...)
	b = binary.LittleEndian.AppendUint16(b, PackVersion)
	b = binary.LittleEndian.AppendUint16(b, 0) // flags
	b = append(b, h.Namespace[:]...)
	b = binary.LittleEndian.AppendUint32(b, h.Blocks)
	return binary.LittleEndian.AppendUint64(b, h.PayloadLen)
}

// DecodeHeader parses the header at the start of b (a whole pack object or
// only its first HeaderLen bytes). Errors wrap cold.ErrCorrupt.
func DecodeHeader(b []byte) (Header, error) {
	var h Header
	if len(b) < HeaderLen {
		return h, fmt.Errorf("%w: pack header is %d bytes, want %d", cold.ErrCorrupt, len(b), HeaderLen)
	}
	if string(b[:4]) != packMagic {
		return h, fmt.Errorf("%w: pack: bad magic", cold.ErrCorrupt)
	}
	if v := binary.LittleEndian.Uint16(b[4:]); v != PackVersion {
		return h, fmt.Errorf("%w: pack: version %d, want %d", cold.ErrCorrupt, v, PackVersion)
	}
	if f := binary.LittleEndian.Uint16(b[6:]); f != 0 {
		return h, fmt.Errorf("%w: pack: reserved flags %#x", cold.ErrCorrupt, f)
	}
	copy(h.Namespace[:], b[8:40])
	h.Blocks = binary.LittleEndian.Uint32(b[40:])
	h.PayloadLen = binary.LittleEndian.Uint64(b[44:])
	if h.Blocks == 0 || h.Blocks > MaxRanges {
		return h, fmt.Errorf("%w: pack: block count %d not in 1..%d", cold.ErrCorrupt, h.Blocks, MaxRanges)
	}
	if h.PayloadLen < uint64(h.Blocks) || h.PayloadLen > MaxPackSize-HeaderLen {
		return h, fmt.Errorf("%w: pack: payload length %d not in %d..%d", cold.ErrCorrupt, h.PayloadLen, h.Blocks, MaxPackSize-HeaderLen)
	}
	return h, nil
}

// Block is one block handed to Build: its full identity and its payload.
type Block struct {
	Identity identity.CacheIdentity
	Payload  []byte
}

// Object is one store object to write: a key and its whole body.
type Object struct {
	Key  string
	Body []byte
	// Sum is the SHA-256 of Body when it is known (Build sets it), so a
	// caller need not hash Body again to name its digest. Verify ignores it
	// unless Pack.SumsChecked says it was checked against Body. Zero:
	// unknown.
	Sum Digest
}

// Pack is everything one publication writes: the pack object, its manifest
// and one pointer per block. Build fills every field; a sink writes them in
// the order Object, Manifest, Pointers, after Verify. Pack owns its byte
// slices; nobody may modify them after Build.
type Pack struct {
	// Namespace is the namespace (and so the tenant) the pack was built
	// for. Verify requires every identity to belong to it.
	Namespace identity.Namespace
	// Object is the pack object: key packs/<ns>/<sha256(body)>.pack.
	Object Object
	// Manifest is the v3 manifest: key manifests/<ns>/<sha256(body)>.m3.
	Manifest Object
	// Pointers holds one index object per block, in block order: key
	// index/<ns>/<block key>, body naming the manifest.
	Pointers []Object
	// SumsChecked says the caller has checked each object's Sum against its
	// Body (the sink checks every job's object digests before it runs its
	// verifier), so Verify uses a set Sum instead of hashing the body again.
	// Build leaves it false: Verify then checks Build's work from scratch.
	SumsChecked bool
}

// Size returns the bytes a sink will write for p.
func (p *Pack) Size() int {
	n := len(p.Object.Body) + len(p.Manifest.Body)
	for _, o := range p.Pointers {
		n += len(o.Body)
	}
	return n
}

// Build packs blocks of one namespace. Every identity must be valid and of
// namespace ns, keys must be distinct, payloads non-empty. Blocks keep their
// order. Build copies the payloads; the caller keeps ownership of blocks.
// The same input always gives the same bytes and keys. The manifest's seal
// slot is empty; BuildWith with Options.Sealer seals it.
func Build(ns identity.Namespace, blocks []Block) (*Pack, error) {
	return build(ns, blocks, Options{})
}

// build is Build with the stages opts names (BuildWith).
func build(ns identity.Namespace, blocks []Block, opts Options) (*Pack, error) {
	nsd, err := ns.Digest()
	if err != nil {
		return nil, fmt.Errorf("%w: namespace: %w", ErrInvalid, err)
	}
	enc, err := newEncoder(ns, nsd, opts)
	if err != nil {
		return nil, err
	}
	total, err := packBound(blocks, enc)
	if err != nil {
		return nil, err
	}
	m := &Manifest{Namespace: ns, Ranges: make([]Range, len(blocks))}
	if enc.aead != nil {
		m.Cipher, m.CipherKeyID = CipherAES256GCM, enc.keyID
	}
	seen := make(map[identity.BlockKey]int, len(blocks))
	obj := make([]byte, 0, total)
	obj = append(obj, Header{Namespace: nsd, Blocks: uint32(len(blocks)), PayloadLen: total - HeaderLen}.Encode()...)
	for i, b := range blocks {
		r, err := blockRange(ns, nsd, i, b, seen)
		if err != nil {
			return nil, err
		}
		r.Offset = uint64(len(obj))
		if enc.active() {
			if obj, r.Codec, err = enc.encode(obj, r, b.Payload); err != nil {
				return nil, err
			}
		} else {
			obj = append(obj, b.Payload...)
		}
		r.Length = uint64(len(obj)) - r.Offset
		m.Ranges[i] = r
	}
	// Compression may have shrunk blocks: the header's payload length is
	// what was stored.
	m.PackSize = uint64(len(obj))
	binary.LittleEndian.PutUint64(obj[44:], m.PackSize-HeaderLen)
	m.PackDigest = Sum(obj)
	m.PackKey = PackKey(nsd, m.PackDigest)
	mb, err := sealManifest(m, opts.Sealer)
	if err != nil {
		return nil, err
	}
	msum := Sum(mb)
	p := &Pack{
		Namespace: ns,
		Object:    Object{Key: m.PackKey, Body: obj, Sum: m.PackDigest},
		Manifest:  Object{Key: ManifestKey(nsd, msum), Body: mb, Sum: msum},
		Pointers:  make([]Object, len(blocks)),
	}
	for i, r := range m.Ranges {
		ptr := Pointer{Namespace: nsd, Block: r.Key, ManifestKey: p.Manifest.Key, Manifest: msum, ManifestSize: uint64(len(mb))}
		body, err := ptr.Encode()
		if err != nil {
			return nil, err
		}
		p.Pointers[i] = Object{Key: ptr.Key(), Body: body}
	}
	return p, nil
}

// packBound checks the block count and payload sizes and returns the
// pack's size before compression (header, payloads, cipher overhead).
func packBound(blocks []Block, enc *encoder) (uint64, error) {
	if len(blocks) == 0 || len(blocks) > MaxRanges {
		return 0, fmt.Errorf("%w: %d blocks, want 1..%d", ErrInvalid, len(blocks), MaxRanges)
	}
	total := uint64(HeaderLen)
	for i, b := range blocks {
		if len(b.Payload) == 0 {
			return 0, fmt.Errorf("%w: block %d has an empty payload", ErrInvalid, i)
		}
		total += uint64(len(b.Payload))
		if enc.active() && len(b.Payload) > MaxBlockSize {
			return 0, fmt.Errorf("%w: block %d is %d bytes, an encoded block is at most %d", ErrInvalid, i, len(b.Payload), MaxBlockSize)
		}
		if enc.aead != nil {
			total += CipherOverhead
		}
		if total > MaxPackSize {
			return 0, fmt.Errorf("%w: pack exceeds %d bytes", ErrInvalid, uint64(MaxPackSize))
		}
	}
	return total, nil
}

// blockRange checks block i (namespace ns, a canonical identity, a key
// not in seen, which it records) and returns its range with a private
// copy of the identity; the offset, length and codec are left to build.
func blockRange(ns identity.Namespace, nsd identity.NamespaceDigest, i int, b Block, seen map[identity.BlockKey]int) (Range, error) {
	if b.Identity.Namespace != ns {
		return Range{}, fmt.Errorf("%w: block %d belongs to another namespace", ErrInvalid, i)
	}
	c, err := b.Identity.Canonical()
	if err != nil {
		return Range{}, fmt.Errorf("%w: block %d: %w", ErrInvalid, i, err)
	}
	k := b.Identity.KeyIn(nsd)
	if j, dup := seen[k]; dup {
		return Range{}, fmt.Errorf("%w: blocks %d and %d have the same key %s", ErrInvalid, j, i, k)
	}
	seen[k] = i
	id := b.Identity
	id.Tokens = append([]uint32(nil), id.Tokens...)
	id.Opaque = append([]byte(nil), id.Opaque...)
	return Range{
		Identity:  id,
		Canonical: c,
		Key:       k,
		Sum:       Sum(b.Payload),
		Size:      uint64(len(b.Payload)),
	}, nil
}

// sumOf returns the SHA-256 of o.Body: o.Sum when the caller has checked
// the sums (SumsChecked) and o.Sum is set, else computed.
func (p *Pack) sumOf(o Object) Digest {
	if p.SumsChecked && o.Sum != (Digest{}) {
		return o.Sum
	}
	return Sum(o.Body)
}

// rejectf returns an error wrapping ErrRejected and cold.ErrCorrupt.
func rejectf(format string, args ...any) error {
	err := fmt.Errorf(format, args...)
	if !errors.Is(err, cold.ErrCorrupt) {
		err = fmt.Errorf("%w: %w", cold.ErrCorrupt, err)
	}
	return fmt.Errorf("%w: %w", ErrRejected, err)
}

// Verify is the admission check a sink runs before its first store write. It
// trusts nothing in p but its bytes and p.Namespace, and checks that:
//
//   - p.Namespace is valid;
//   - the manifest decodes as v3 (DecodeManifest: complete records, valid
//     identities of the manifest's namespace, keys equal to KeyFor, ranges
//     that tile the pack without overlap or gap, no duplicate keys);
//   - the manifest's namespace is p.Namespace (so every identity belongs
//     to the pack's tenant);
//   - the manifest key is manifests/<ns>/<sha256(manifest)>.m3;
//   - the object key is packs/<ns>/<sha256(object)>.pack and equals the
//     manifest's pack key, and the manifest's pack digest and size match
//     the object;
//   - the pack header names the namespace, the block count and the payload
//     length;
//   - every payload's SHA-256 matches its range's checksum;
//   - there is exactly one pointer per range, in range order, under the
//     block's pointer key, naming this manifest, its digest and its size.
//
// A seal slot is only checked for form (DecodeManifest); VerifyWith also
// verifies the seal. An encrypted or compressed pack (manifest v4) is
// rejected: Verify cannot decode it to check its checksums; VerifyWith
// can. Errors wrap ErrRejected and cold.ErrCorrupt.
func Verify(p *Pack) error {
	return verify(p, nil, nil)
}

// verify is Verify, decoding encoded ranges with dec and cz.
func verify(p *Pack, dec Decrypter, cz Compressor) error {
	if p == nil {
		return rejectf("nil pack")
	}
	nsd, err := p.Namespace.Digest()
	if err != nil {
		return rejectf("namespace: %w", err)
	}
	m, msum, err := verifyObjects(p, nsd)
	if err != nil {
		return err
	}
	if err := verifyPayloads(p, m, dec, cz); err != nil {
		return err
	}
	return verifyPointers(p, m, nsd, msum)
}

// verifyObjects decodes the manifest and checks it, the object and their
// keys and digests against each other and the pack header; it returns the
// manifest and its digest.
func verifyObjects(p *Pack, nsd identity.NamespaceDigest) (*Manifest, Digest, error) {
	m, err := DecodeManifest(p.Manifest.Body)
	if err != nil {
		return nil, Digest{}, rejectf("%w", err)
	}
	if m.Namespace != p.Namespace || m.nsDigest != nsd {
		return nil, Digest{}, rejectf("manifest namespace is not the pack's namespace")
	}
	msum := p.sumOf(p.Manifest)
	if want := ManifestKey(nsd, msum); p.Manifest.Key != want {
		return nil, Digest{}, rejectf("manifest key %.100q, want %q", p.Manifest.Key, want)
	}
	osum := p.sumOf(p.Object)
	if want := PackKey(nsd, osum); p.Object.Key != want {
		return nil, Digest{}, rejectf("object key %.100q, want %q", p.Object.Key, want)
	}
	if m.PackKey != p.Object.Key || m.PackDigest != osum {
		return nil, Digest{}, rejectf("manifest names pack %.100q, object is %q", m.PackKey, p.Object.Key)
	}
	if m.PackSize != uint64(len(p.Object.Body)) {
		return nil, Digest{}, rejectf("manifest pack size %d, object is %d bytes", m.PackSize, len(p.Object.Body))
	}
	h, err := DecodeHeader(p.Object.Body)
	if err != nil {
		return nil, Digest{}, rejectf("%w", err)
	}
	if h.Namespace != nsd || int(h.Blocks) != len(m.Ranges) || h.PayloadLen != m.PackSize-HeaderLen {
		return nil, Digest{}, rejectf("object header (namespace %s, %d blocks, %d payload bytes) does not match the manifest", h.Namespace, h.Blocks, h.PayloadLen)
	}
	return m, msum, nil
}

// verifyPayloads checks every payload against its range's checksum,
// decoding encoded ranges with dec and cz.
func verifyPayloads(p *Pack, m *Manifest, dec Decrypter, cz Compressor) error {
	a, err := m.Decrypter(dec)
	if err != nil {
		return rejectf("%w", err)
	}
	var scratch []byte
	for i, r := range m.Ranges {
		// DecodeManifest checked Offset+Length <= PackSize == len(body).
		stored := p.Object.Body[r.Offset : r.Offset+r.Length]
		if m.Plain(r) {
			if Sum(stored) != r.Sum {
				return rejectf("range %d: payload checksum mismatch", i)
			}
			continue
		}
		// Decode a copy: OpenRange decrypts in place, and the body is
		// what the sink writes.
		scratch = append(scratch[:0], stored...)
		out := make([]byte, r.Size)
		if err := m.OpenRange(r, scratch, out, a, cz); err != nil {
			return rejectf("range %d: %w", i, err)
		}
	}
	return nil
}

// verifyPointers checks that there is one pointer per range, in range
// order, naming the manifest of digest msum.
func verifyPointers(p *Pack, m *Manifest, nsd identity.NamespaceDigest, msum Digest) error {
	if len(p.Pointers) != len(m.Ranges) {
		return rejectf("%d pointers for %d ranges", len(p.Pointers), len(m.Ranges))
	}
	for i, o := range p.Pointers {
		r := m.Ranges[i]
		if want := PointerKey(nsd, r.Key); o.Key != want {
			return rejectf("pointer %d key %.100q, want %q", i, o.Key, want)
		}
		ptr, err := DecodePointer(o.Body)
		if err != nil {
			return rejectf("pointer %d: %w", i, err)
		}
		if ptr.Namespace != nsd || ptr.Block != r.Key || ptr.ManifestKey != p.Manifest.Key || ptr.Manifest != msum || ptr.ManifestSize != uint64(len(p.Manifest.Body)) {
			return rejectf("pointer %d does not name block %s in manifest %q", i, r.Key, p.Manifest.Key)
		}
	}
	return nil
}
