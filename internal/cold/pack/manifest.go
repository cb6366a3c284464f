package pack

import (
	"encoding/binary"
	"errors"
	"fmt"
	"unsafe"

	"github.com/gpucache/gpucache/api/identity"
	"github.com/gpucache/gpucache/internal/cold"
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
