package pack

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash"
	"strings"

	"github.com/gpucache/gpucache/api/identity"
	"github.com/gpucache/gpucache/internal/cold"
)

// Digest is a SHA-256 content digest.
type Digest [32]byte

// String returns the digest in lower-case hex.
func (d Digest) String() string { return hex.EncodeToString(d[:]) }

// Sum returns the SHA-256 of b.
func Sum(b []byte) Digest { return Digest(sha256.Sum256(b)) }

// Summer computes Sum over bytes written to it in pieces: a refill hashes
// a payload as it streams in. The zero value is not usable; see NewSum.
type Summer struct{ h hash.Hash }

// NewSum returns a Summer over no bytes.
func NewSum() Summer { return Summer{h: sha256.New()} }

// Write adds p; it never fails.
func (s Summer) Write(p []byte) (int, error) { return s.h.Write(p) }

// Digest returns Sum of every byte written so far.
func (s Summer) Digest() Digest {
	var d Digest
	s.h.Sum(d[:0])
	return d
}

// Key prefixes and suffixes. See doc.go, "Object keys".
const (
	packPrefix     = "packs/"
	packSuffix     = ".pack"
	manifestPrefix = "manifests/"
	manifestSuffix = ".m3"
	pointerPrefix  = "index/"
	hexLen         = 64
)

// PackKey returns "packs/<ns-digest-hex>/<pack-sha256-hex>.pack".
func PackKey(ns identity.NamespaceDigest, sum Digest) string {
	return packPrefix + ns.String() + "/" + sum.String() + packSuffix
}

// ManifestKey returns "manifests/<ns-digest-hex>/<manifest-sha256-hex>.m3".
func ManifestKey(ns identity.NamespaceDigest, sum Digest) string {
	return manifestPrefix + ns.String() + "/" + sum.String() + manifestSuffix
}

// PointerKey returns "index/<ns-digest-hex>/<block-key-hex>".
func PointerKey(ns identity.NamespaceDigest, key identity.BlockKey) string {
	return pointerPrefix + ns.String() + "/" + key.String()
}

// NamespacePrefixes returns the three key prefixes under which every object of
// one namespace lives, for listing and tenant lifecycle.
func NamespacePrefixes(ns identity.NamespaceDigest) [3]string {
	h := ns.String() + "/"
	return [3]string{packPrefix + h, manifestPrefix + h, pointerPrefix + h}
}

// ParsePackKey splits a pack key into its namespace digest and content
// digest. Only the exact form PackKey produces (lower-case hex) is accepted.
func ParsePackKey(key string) (identity.NamespaceDigest, Digest, error) {
	return parseKey(key, packPrefix, packSuffix)
}

// ParseManifestKey splits a manifest key into its namespace digest and
// content digest. Only the exact form ManifestKey produces is accepted.
func ParseManifestKey(key string) (identity.NamespaceDigest, Digest, error) {
	return parseKey(key, manifestPrefix, manifestSuffix)
}

// ParsePointerKey splits a pointer key into its namespace digest and block
// key. Only the exact form PointerKey produces is accepted.
func ParsePointerKey(key string) (identity.NamespaceDigest, identity.BlockKey, error) {
	ns, k, err := parseKey(key, pointerPrefix, "")
	return ns, identity.BlockKey(k), err
}

// parseKey parses prefix | hex64 | "/" | hex64 | suffix.
func parseKey(key, prefix, suffix string) (identity.NamespaceDigest, Digest, error) {
	var ns identity.NamespaceDigest
	var sum Digest
	rest, ok := strings.CutPrefix(key, prefix)
	if ok {
		rest, ok = strings.CutSuffix(rest, suffix)
	}
	if !ok || len(rest) != 2*hexLen+1 || rest[hexLen] != '/' {
		return ns, sum, fmt.Errorf("%w: key %.80q is not %s<hex>/<hex>%s", cold.ErrCorrupt, key, prefix, suffix)
	}
	if !decodeLowerHex(ns[:], rest[:hexLen]) || !decodeLowerHex(sum[:], rest[hexLen+1:]) {
		return ns, sum, fmt.Errorf("%w: key %.80q is not lower-case hex", cold.ErrCorrupt, key)
	}
	return ns, sum, nil
}

// decodeLowerHex decodes exactly len(dst)*2 lower-case hex digits.
func decodeLowerHex(dst []byte, s string) bool {
	if len(s) != 2*len(dst) {
		return false
	}
	for i := range dst {
		hi, ok1 := unhex(s[2*i])
		lo, ok2 := unhex(s[2*i+1])
		if !ok1 || !ok2 {
			return false
		}
		dst[i] = hi<<4 | lo
	}
	return true
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}

// Pointer is the small index object that leads from a block key to the
// manifest that holds the block. See doc.go, "Pointer".
type Pointer struct {
	Namespace   identity.NamespaceDigest // namespace of the block
	Block       identity.BlockKey        // the block's key
	ManifestKey string                   // key of the manifest holding the block
	Manifest    Digest                   // SHA-256 of that manifest's bytes
	// ManifestSize is the manifest's size in bytes, 1..MaxManifestLen, so a
	// reader can bound the download before it starts, without a Head.
	ManifestSize uint64
}

// Pointer layout constants.
const (
	pointerMagic   = "GCPT"
	pointerVersion = 1
	// pointerFixedLen is every pointer byte except the manifest key.
	pointerFixedLen = 4 + 2 + 2 + 32 + 32 + 2 + 32 + 8
	// manifestKeyLen is the length of every manifest key.
	manifestKeyLen = len(manifestPrefix) + 2*hexLen + 1 + len(manifestSuffix)
	// PointerLen is the exact size of every pointer object.
	PointerLen = pointerFixedLen + manifestKeyLen
)

// Key returns the object key the pointer is stored under.
func (p Pointer) Key() string { return PointerKey(p.Namespace, p.Block) }

// Encode returns the pointer's bytes. It fails if the manifest key does not
// name a manifest of the pointer's namespace with the pointer's digest.
func (p Pointer) Encode() ([]byte, error) {
	if err := p.check(); err != nil {
		return nil, err
	}
	b := make([]byte, 0, PointerLen)
	b = append(b, pointerMagic...)
	b = binary.LittleEndian.AppendUint16(b, pointerVersion)
	b = binary.LittleEndian.AppendUint16(b, 0) // flags
	b = append(b, p.Namespace[:]...)
	b = append(b, p.Block[:]...)
	b = binary.LittleEndian.AppendUint16(b, uint16(len(p.ManifestKey)))
	b = append(b, p.ManifestKey...)
	b = append(b, p.Manifest[:]...)
	b = binary.LittleEndian.AppendUint64(b, p.ManifestSize)
	return b, nil
}

func (p Pointer) check() error {
	ns, sum, err := ParseManifestKey(p.ManifestKey)
	if err != nil {
		return fmt.Errorf("gpucache/cold/pack: pointer: %w", err)
	}
	if ns != p.Namespace {
		return fmt.Errorf("%w: pointer: manifest key namespace %s, pointer namespace %s", cold.ErrCorrupt, ns, p.Namespace)
	}
	if sum != p.Manifest {
		return fmt.Errorf("%w: pointer: manifest key digest %s, pointer digest %s", cold.ErrCorrupt, sum, p.Manifest)
	}
	if p.ManifestSize == 0 || p.ManifestSize > MaxManifestLen {
		return fmt.Errorf("%w: pointer: manifest size %d not in 1..%d", cold.ErrCorrupt, p.ManifestSize, MaxManifestLen)
	}
	return nil
}

// DecodePointer parses a pointer object. It accepts only the exact bytes
// Encode produces; any other input is an error wrapping cold.ErrCorrupt.
func DecodePointer(b []byte) (Pointer, error) {
	var p Pointer
	if len(b) != PointerLen {
		return p, fmt.Errorf("%w: pointer is %d bytes, want %d", cold.ErrCorrupt, len(b), PointerLen)
	}
	if string(b[:4]) != pointerMagic {
		return p, fmt.Errorf("%w: pointer: bad magic", cold.ErrCorrupt)
	}
	if v := binary.LittleEndian.Uint16(b[4:]); v != pointerVersion {
		return p, fmt.Errorf("%w: pointer: version %d, want %d", cold.ErrCorrupt, v, pointerVersion)
	}
	if f := binary.LittleEndian.Uint16(b[6:]); f != 0 {
		return p, fmt.Errorf("%w: pointer: reserved flags %#x", cold.ErrCorrupt, f)
	}
	copy(p.Namespace[:], b[8:40])
	copy(p.Block[:], b[40:72])
	if n := binary.LittleEndian.Uint16(b[72:]); int(n) != manifestKeyLen {
		return p, fmt.Errorf("%w: pointer: manifest key length %d, want %d", cold.ErrCorrupt, n, manifestKeyLen)
	}
	off := 74 + manifestKeyLen
	p.ManifestKey = string(b[74:off])
	copy(p.Manifest[:], b[off:off+32])
	p.ManifestSize = binary.LittleEndian.Uint64(b[off+32:])
	if err := p.check(); err != nil {
		return Pointer{}, err
	}
	return p, nil
}
