package pack

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"unsafe"

	"github.com/gpucache/gpucache/internal/cold"
	"github.com/gpucache/gpucache/internal/identity"
	"github.com/gpucache/gpucache/internal/security/seal"
)

// Sentinel errors. Everything else a decoder rejects wraps cold.ErrCorrupt.
var (
	// ErrLegacyManifest: the object has a valid v1 or v2 manifest header.
	// Legacy entries are clean misses: the caller reads no payload, and
	// neither rewrites nor deletes the entry; the block is recomputed and
	// repacked under v3. It does not wrap cold.ErrCorrupt.
	ErrLegacyManifest = errors.New("gpucache/cold/pack: legacy manifest (v1/v2), recompute and repack")
	// ErrManifestVersion: a "GCMF" object with a version this code does not
	// know (0, or above 4). It wraps cold.ErrCorrupt: it fails closed.
	ErrManifestVersion = fmt.Errorf("%w: manifest version unsupported", cold.ErrCorrupt)
	// ErrInvalid: Build or Encode was given input they cannot turn into a
	// valid pack (an invalid identity, a block of another namespace, a
	// duplicate block, an empty payload, a limit exceeded).
	ErrInvalid = errors.New("gpucache/cold/pack: invalid pack input")
)

// Format limits. Decoders check them before allocating.
const (
	// MaxRanges bounds the blocks of one pack and the ranges of one manifest.
	MaxRanges = 4096
	// MaxManifestLen bounds a manifest object, in bytes.
	MaxManifestLen = 64 << 20
	// MaxPackSize bounds a pack object, in bytes.
	MaxPackSize = 1 << 36
	// MaxSealKeyID and MaxSealMAC bound the seal slot's fields (the
	// format's widths; a kind-1 seal is tighter, see SealHMACSHA256).
	MaxSealKeyID = 64
	MaxSealMAC   = 64
)

// Manifest layout constants (doc.go, "Manifest v3").
const (
	manifestMagic   = "GCMF"
	ManifestVersion = 3
	// ManifestVersionEncoded is manifest v4: v3 plus a cipher slot and,
	// per range, the plaintext length and codec (encode.go). Build writes
	// it only for a pack with an encrypted or compressed block; every
	// other pack is v3, byte for byte as before.
	ManifestVersionEncoded = 4
	manifestHdrLen         = 4 + 2 + 2
	// minRecordLen is a lower bound on one range record: u32 length, a
	// minimal identity (header and 19 empty fields), key, offset, length and
	// checksum. Counts are checked against it before allocating.
	minRecordLen = 4 + len(idHeader) + 19*5 + 32 + 8 + 8 + 32
	sealEmptyLen = 3
)

// SealKind says how a manifest is sealed.
type SealKind uint8

const (
	// SealNone: no seal. Key id and MAC are empty (the slot is three zero
	// bytes).
	SealNone SealKind = 0
	// SealHMACSHA256: an HMAC-SHA256 seal made by a seal.Keyring over every
	// manifest byte before the seal slot, domain-bound to the manifest's
	// canonical namespace encoding (Keyring.Seal(namespace, sealed span)).
	// The key id is 1..seal.MaxKeyIDLen bytes, the MAC exactly
	// seal.MACSize bytes. See Manifest.VerifySeal.
	SealHMACSHA256 SealKind = 1
)

// Seal is the manifest's seal slot: empty (Kind SealNone, no KeyID, no MAC)
// or an HMAC-SHA256 seal (Kind SealHMACSHA256). DecodeManifest rejects any
// other content as corrupt.
type Seal struct {
	Kind  SealKind
	KeyID []byte // at most MaxSealKeyID bytes; 1..seal.MaxKeyIDLen for kind 1
	MAC   []byte // at most MaxSealMAC bytes; seal.MACSize for kind 1
}

// Range binds one block's full identity to its bytes in the pack.
type Range struct {
	// Identity is the block's full identity.
	Identity identity.CacheIdentity
	// Canonical is Identity.Canonical(): the exact bytes a reader compares
	// with the identity it expects. Encode writes these bytes when set and
	// the encoding of Identity otherwise.
	Canonical []byte
	// Key is the block key, KeyFor of the identity.
	Key identity.BlockKey
	// Offset and Length locate the payload in the pack object.
	Offset, Length uint64
	// Sum is SHA-256 of the payload: of the plaintext, whatever the pack
	// stores (encode.go).
	Sum Digest
	// Size is the payload's plaintext length. In a v3 manifest it is
	// Length; in v4 Length is the stored (compressed and/or encrypted)
	// length and Size the length of the block a reader gets.
	Size uint64
	// Codec says how the stored bytes were compressed (v4 only; v3 is
	// CodecRaw).
	Codec Codec
}

// Manifest describes one pack: its namespace, the pack object and, for each
// block, its identity, key, range and checksum.
type Manifest struct {
	Namespace  identity.Namespace
	PackKey    string // packs/<ns>/<PackDigest>.pack
	PackDigest Digest // SHA-256 of the pack object
	PackSize   uint64 // size of the pack object in bytes
	Ranges     []Range
	// Cipher and CipherKeyID say how every range of the pack is encrypted
	// (v4 only; v3 is CipherNone with no key id). Key ids are not secret.
	Cipher      Cipher
	CipherKeyID []byte
	Seal        Seal

	// Set by DecodeManifest.
	nsDigest identity.NamespaceDigest
	index    map[identity.BlockKey]int
	// sealed is a private copy of every manifest byte before the seal
	// slot (what a kind-1 seal covers); nsCanon and every range's
	// Canonical alias it, capacity-capped. Nil unless decoded.
	sealed  []byte
	nsCanon []byte
}

// MemCost estimates the heap bytes a decoded manifest keeps alive: the
// private copy of its sealed bytes, the identities decoded from them (token
// ids, strings; about as many bytes again), and per range the Range, the
// index entry and the namespace fields. It overestimates, so that a cache
// bounded by it stays under its bound.
func (m *Manifest) MemCost() int64 {
	return 3*int64(len(m.sealed)) + int64(len(m.Ranges))*(int64(unsafe.Sizeof(Range{}))+128) + 1024
}

// NamespaceDigest returns the digest of the manifest's namespace.
func (m *Manifest) NamespaceDigest() (identity.NamespaceDigest, error) {
	if m.index != nil {
		return m.nsDigest, nil
	}
	return m.Namespace.Digest()
}

// Find returns the range of the block with key k.
func (m *Manifest) Find(k identity.BlockKey) (Range, bool) {
	if m.index != nil {
		i, ok := m.index[k]
		if !ok {
			return Range{}, false
		}
		return m.Ranges[i], true
	}
	for _, r := range m.Ranges {
		if r.Key == k {
			return r, true
		}
	}
	return Range{}, false
}

// Encode serialises m as given. It checks only that each field fits its
// width; Build makes consistent manifests, and DecodeManifest and Verify are
// the consistency checks. (Tests use Encode to write malformed manifests.)
func (m *Manifest) Encode() ([]byte, error) {
	b, _, err := m.encodeSealed()
	if err != nil {
		return nil, err
	}
	return m.appendSealSlot(b)
}

// encodeSealed returns the manifest bytes before the seal slot (the span a
// kind-1 seal covers) and the canonical namespace encoding.
func (m *Manifest) encodeSealed() (b, nsb []byte, err error) {
	nsb, err = m.Namespace.Canonical()
	if err != nil {
		return nil, nil, fmt.Errorf("%w: manifest namespace: %w", ErrInvalid, err)
	}
	if len(m.PackKey) > 0xffff {
		return nil, nil, fmt.Errorf("%w: pack key is %d bytes", ErrInvalid, len(m.PackKey))
	}
	if len(m.Ranges) > MaxRanges {
		return nil, nil, fmt.Errorf("%w: %d ranges, limit %d", ErrInvalid, len(m.Ranges), MaxRanges)
	}
	v4 := m.encoded()
	if len(m.CipherKeyID) > MaxCipherKeyID {
		return nil, nil, fmt.Errorf("%w: cipher key id is %d bytes", ErrInvalid, len(m.CipherKeyID))
	}
	b = make([]byte, 0, 256+len(nsb)+len(m.PackKey)+len(m.Ranges)*512)
	b = append(b, manifestMagic...)
	if v4 {
		b = binary.LittleEndian.AppendUint16(b, ManifestVersionEncoded)
	} else {
		b = binary.LittleEndian.AppendUint16(b, ManifestVersion)
	}
	b = binary.LittleEndian.AppendUint16(b, 0) // flags
	b = binary.LittleEndian.AppendUint32(b, uint32(len(nsb)))
	b = append(b, nsb...)
	b = binary.LittleEndian.AppendUint16(b, uint16(len(m.PackKey)))
	b = append(b, m.PackKey...)
	b = append(b, m.PackDigest[:]...)
	b = binary.LittleEndian.AppendUint64(b, m.PackSize)
	if v4 {
		b = append(b, byte(m.Cipher), byte(len(m.CipherKeyID)))
		b = append(b, m.CipherKeyID...)
	}
	b = binary.LittleEndian.AppendUint32(b, uint32(len(m.Ranges)))
	for i, r := range m.Ranges {
		c := r.Canonical
		if c == nil {
			if c, err = r.Identity.Canonical(); err != nil {
				return nil, nil, fmt.Errorf("%w: range %d: %w", ErrInvalid, i, err)
			}
		}
		b = binary.LittleEndian.AppendUint32(b, uint32(len(c)))
		b = append(b, c...)
		b = append(b, r.Key[:]...)
		b = binary.LittleEndian.AppendUint64(b, r.Offset)
		b = binary.LittleEndian.AppendUint64(b, r.Length)
		b = append(b, r.Sum[:]...)
		if v4 {
			b = binary.LittleEndian.AppendUint64(b, r.Size)
			b = append(b, byte(r.Codec))
		}
	}
	return b, nsb, nil
}

// appendSealSlot appends m.Seal as given and checks the total size.
func (m *Manifest) appendSealSlot(b []byte) ([]byte, error) {
	if len(m.Seal.KeyID) > MaxSealKeyID || len(m.Seal.MAC) > MaxSealMAC {
		return nil, fmt.Errorf("%w: seal fields too long", ErrInvalid)
	}
	b = append(b, byte(m.Seal.Kind), byte(len(m.Seal.KeyID)))
	b = append(b, m.Seal.KeyID...)
	b = append(b, byte(len(m.Seal.MAC)))
	b = append(b, m.Seal.MAC...)
	if len(b) > MaxManifestLen {
		return nil, fmt.Errorf("%w: manifest is %d bytes, limit %d", ErrInvalid, len(b), MaxManifestLen)
	}
	return b, nil
}

// IsLegacyManifest reports whether b starts with a v1 or v2 manifest header:
// "GCMF" followed by u16 LE version 1 or 2. Nothing after those six bytes is
// interpreted.
func IsLegacyManifest(b []byte) bool {
	if len(b) < 6 || string(b[:4]) != manifestMagic {
		return false
	}
	v := binary.LittleEndian.Uint16(b[4:])
	return v == 1 || v == 2
}

// reader walks a byte slice; the first failure sticks.
type reader struct {
	b   []byte
	off int
	err error
}

func (r *reader) fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: manifest: "+format, append([]any{cold.ErrCorrupt}, args...)...)
	}
}

func (r *reader) take(n int, what string) []byte {
	if r.err != nil {
		return nil
	}
	if n < 0 || n > len(r.b)-r.off {
		r.fail("truncated in %s at byte %d", what, r.off)
		return nil
	}
	v := r.b[r.off : r.off+n]
	r.off += n
	return v
}

func (r *reader) u8(what string) uint8 {
	if v := r.take(1, what); v != nil {
		return v[0]
	}
	return 0
}

func (r *reader) u16(what string) uint16 {
	if v := r.take(2, what); v != nil {
		return binary.LittleEndian.Uint16(v)
	}
	return 0
}

func (r *reader) u32(what string) uint32 {
	if v := r.take(4, what); v != nil {
		return binary.LittleEndian.Uint32(v)
	}
	return 0
}

func (r *reader) u64(what string) uint64 {
	if v := r.take(8, what); v != nil {
		return binary.LittleEndian.Uint64(v)
	}
	return 0
}

func (r *reader) digest(what string) (d Digest) {
	copy(d[:], r.take(32, what))
	return d
}

// DecodeManifest parses and checks a manifest. A v1/v2 header returns
// ErrLegacyManifest. Every other rejection wraps cold.ErrCorrupt: bad magic,
// unknown version, truncation, bad counts or lengths, a namespace or identity
// that does not decode and validate, an identity of another namespace, a key
// that is not KeyFor of its identity, a duplicate key, ranges that overlap,
// leave gaps or fall outside the pack, a pack key that does not carry the
// pack digest, a seal slot that is neither empty nor a well-formed kind-1
// seal (key id 1..seal.MaxKeyIDLen bytes, MAC exactly seal.MACSize bytes),
// trailing bytes.
//
// Decoding does not verify a seal: it only checks its form. Callers that
// read payloads call VerifySeal, which uses SealedBytes.
//
// The result does not alias b.
func DecodeManifest(b []byte) (*Manifest, error) {
	if IsLegacyManifest(b) {
		return nil, fmt.Errorf("%w: version %d", ErrLegacyManifest, binary.LittleEndian.Uint16(b[4:]))
	}
	if len(b) > MaxManifestLen {
		return nil, fmt.Errorf("%w: manifest is %d bytes, limit %d", cold.ErrCorrupt, len(b), MaxManifestLen)
	}
	r := &reader{b: b}
	if string(r.take(4, "magic")) != manifestMagic {
		r.fail("bad magic")
		return nil, r.err
	}
	version := r.u16("version")
	if r.err == nil && version != ManifestVersion && version != ManifestVersionEncoded {
		return nil, fmt.Errorf("%w: version %d", ErrManifestVersion, version)
	}
	v4 := version == ManifestVersionEncoded
	if f := r.u16("flags"); f != 0 {
		r.fail("reserved flags %#x", f)
	}
	nsLen := r.u32("namespace length")
	if r.err == nil && nsLen > identity.MaxCanonicalLen {
		r.fail("namespace length %d, limit %d", nsLen, identity.MaxCanonicalLen)
	}
	nsOff := r.off
	nsb := r.take(int(nsLen), "namespace")
	if r.err != nil {
		return nil, r.err
	}
	ns, err := identity.DecodeNamespace(nsb)
	if err != nil {
		return nil, fmt.Errorf("%w: manifest namespace: %w", cold.ErrCorrupt, err)
	}
	m := &Manifest{Namespace: ns, nsDigest: sha256.Sum256(nsb)}

	pk := r.take(int(r.u16("pack key length")), "pack key")
	m.PackKey = string(pk)
	m.PackDigest = r.digest("pack digest")
	m.PackSize = r.u64("pack size")
	if v4 {
		m.Cipher = Cipher(r.u8("cipher"))
		m.CipherKeyID = bytes.Clone(r.take(int(r.u8("cipher key id length")), "cipher key id"))
		switch {
		case r.err != nil:
		case m.Cipher == CipherNone && len(m.CipherKeyID) != 0:
			r.fail("cipher 0 with a %d-byte key id", len(m.CipherKeyID))
		case m.Cipher == CipherAES256GCM && (len(m.CipherKeyID) == 0 || len(m.CipherKeyID) > MaxCipherKeyID):
			r.fail("AES-256-GCM with a %d-byte key id, want 1..%d", len(m.CipherKeyID), MaxCipherKeyID)
		case m.Cipher > CipherAES256GCM:
			r.fail("cipher %d unknown", m.Cipher)
		}
	}
	count := r.u32("range count")
	if r.err != nil {
		return nil, r.err
	}
	kns, ksum, err := ParsePackKey(m.PackKey)
	switch {
	case err != nil:
		return nil, fmt.Errorf("manifest pack key: %w", err)
	case kns != m.nsDigest:
		r.fail("pack key namespace %s, manifest namespace %s", kns, m.nsDigest)
	case ksum != m.PackDigest:
		r.fail("pack key digest %s, manifest pack digest %s", ksum, m.PackDigest)
	case m.PackSize <= HeaderLen || m.PackSize > MaxPackSize:
		r.fail("pack size %d not in %d..%d", m.PackSize, HeaderLen+1, uint64(MaxPackSize))
	case count == 0 || count > MaxRanges:
		r.fail("range count %d not in 1..%d", count, MaxRanges)
	case uint64(count)*uint64(minRecordLen) > uint64(len(b)-r.off):
		r.fail("range count %d needs more than the %d bytes left", count, len(b)-r.off)
	}
	if r.err != nil {
		return nil, r.err
	}

	m.Ranges = make([]Range, 0, count)
	m.index = make(map[identity.BlockKey]int, count)
	idOffs := make([]int, 0, count)
	next := uint64(HeaderLen) // ranges tile the payload area in order
	for i := range int(count) {
		idLen := r.u32("identity length")
		if r.err == nil && idLen > maxIdentityLen {
			r.fail("range %d: identity length %d, limit %d", i, idLen, maxIdentityLen)
		}
		idOffs = append(idOffs, r.off)
		idb := r.take(int(idLen), "identity")
		var rg Range
		rg.Key = identity.BlockKey(r.digest("block key"))
		rg.Offset = r.u64("offset")
		rg.Length = r.u64("length")
		rg.Sum = r.digest("payload checksum")
		rg.Size = rg.Length
		if v4 {
			rg.Size = r.u64("plaintext length")
			rg.Codec = Codec(r.u8("codec"))
		}
		if r.err != nil {
			return nil, r.err
		}
		if err := m.checkEncoding(rg); err != nil {
			r.fail("range %d: %v", i, err)
			return nil, r.err
		}
		id, err := decodeIdentity(idb)
		if err != nil {
			return nil, fmt.Errorf("manifest range %d: %w", i, err)
		}
		rg.Identity = id
		rg.Canonical = idb // aliases b until the end; see below
		switch {
		case id.Namespace != ns:
			r.fail("range %d: identity of namespace %q/%q, manifest namespace %q/%q", i, id.Tenant, id.ModelID, ns.Tenant, ns.ModelID)
		case rg.Key != id.KeyIn(m.nsDigest):
			r.fail("range %d: key %s is not the key of its identity", i, rg.Key)
		case rg.Length == 0:
			r.fail("range %d: empty payload", i)
		case rg.Offset < next:
			r.fail("range %d: offset %d overlaps the bytes before it (next free %d)", i, rg.Offset, next)
		case rg.Offset > next:
			r.fail("range %d: offset %d leaves a gap after %d", i, rg.Offset, next)
		case rg.Length > m.PackSize-rg.Offset:
			r.fail("range %d: %d+%d past the pack's %d bytes", i, rg.Offset, rg.Length, m.PackSize)
		}
		if _, dup := m.index[rg.Key]; dup && r.err == nil {
			r.fail("range %d: duplicate block key %s", i, rg.Key)
		}
		if r.err != nil {
			return nil, r.err
		}
		next = rg.Offset + rg.Length
		m.index[rg.Key] = i
		m.Ranges = append(m.Ranges, rg)
	}
	if next != m.PackSize {
		r.fail("ranges end at %d, pack is %d bytes", next, m.PackSize)
	}
	if v4 && !m.encoded() {
		r.fail("version 4 with no encrypted or compressed range (Build writes v3)")
	}
	sealOff := r.off
	m.Seal.Kind = SealKind(r.u8("seal kind"))
	m.Seal.KeyID = bytes.Clone(r.take(int(r.u8("seal key id length")), "seal key id"))
	m.Seal.MAC = bytes.Clone(r.take(int(r.u8("seal mac length")), "seal mac"))
	if r.err != nil {
		return nil, r.err
	}
	switch m.Seal.Kind {
	case SealNone:
		if len(m.Seal.KeyID) != 0 || len(m.Seal.MAC) != 0 {
			r.fail("seal kind 0 with a %d-byte key id and a %d-byte MAC", len(m.Seal.KeyID), len(m.Seal.MAC))
		}
	case SealHMACSHA256:
		if len(m.Seal.KeyID) == 0 || len(m.Seal.KeyID) > seal.MaxKeyIDLen || len(m.Seal.MAC) != seal.MACSize {
			r.fail("HMAC-SHA256 seal with a %d-byte key id (want 1..%d) and a %d-byte MAC (want %d)",
				len(m.Seal.KeyID), seal.MaxKeyIDLen, len(m.Seal.MAC), seal.MACSize)
		}
	default:
		r.fail("seal kind %d unknown", m.Seal.Kind)
	}
	if r.off != len(b) {
		r.fail("%d trailing bytes", len(b)-r.off)
	}
	if r.err != nil {
		return nil, r.err
	}
	// One private copy of the sealed span; the namespace and every
	// identity alias it (capacity-capped, so an append by a caller copies).
	m.sealed = bytes.Clone(b[:sealOff])
	m.nsCanon = m.sealed[nsOff : nsOff+len(nsb) : nsOff+len(nsb)]
	for i := range m.Ranges {
		o, n := idOffs[i], len(m.Ranges[i].Canonical)
		m.Ranges[i].Canonical = m.sealed[o : o+n : o+n]
	}
	return m, nil
}

// OpenManifest checks a manifest object against the key it was read from and
// decodes it: a legacy header returns ErrLegacyManifest; then the key must be
// a manifest key whose digest is SHA-256 of body and whose namespace is the
// manifest's; then DecodeManifest. Other errors wrap cold.ErrCorrupt.
func OpenManifest(key string, body []byte) (*Manifest, error) {
	if IsLegacyManifest(body) {
		return nil, fmt.Errorf("%w: version %d", ErrLegacyManifest, binary.LittleEndian.Uint16(body[4:]))
	}
	kns, ksum, err := ParseManifestKey(key)
	if err != nil {
		return nil, err
	}
	if got := Sum(body); got != ksum {
		return nil, fmt.Errorf("%w: manifest %s has digest %s", cold.ErrCorrupt, key, got)
	}
	m, err := DecodeManifest(body)
	if err != nil {
		return nil, err
	}
	if m.nsDigest != kns {
		return nil, fmt.Errorf("%w: manifest %s holds namespace %s", cold.ErrCorrupt, key, m.nsDigest)
	}
	return m, nil
}
