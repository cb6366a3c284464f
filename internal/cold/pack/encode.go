package pack

import (
	"crypto/cipher"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/gpucache/gpucache/api/identity"
	"github.com/gpucache/gpucache/internal/cold"
	"github.com/gpucache/gpucache/internal/cold/crypt"
)

// Encoding errors.
var (
	// ErrKeyUnavailable: the manifest names a cipher key the reader cannot
	// use (no keyring, an unknown key id, a key expired after its
	// rotation grace, a key not yet valid). Nothing was decrypted. It
	// does not wrap cold.ErrCorrupt: the bytes may be fine, the reader
	// cannot open them; refill reports it as a miss and an integrity event.
	ErrKeyUnavailable = errors.New("gpucache/cold/pack: cipher key unavailable")
	// ErrDecrypt: AES-GCM authentication failed: the ciphertext, its
	// nonce or tag, or the record it is bound to was altered, or it was
	// made under another key. Wraps cold.ErrCorrupt.
	ErrDecrypt = fmt.Errorf("%w: block does not decrypt", cold.ErrCorrupt)
	// ErrDecode: a stored block that does not decompress to its size, or
	// whose plaintext fails its checksum. Wraps cold.ErrCorrupt.
	ErrDecode = fmt.Errorf("%w: block does not decode", cold.ErrCorrupt)
)

// Cipher says how a v4 pack's blocks are encrypted.
type Cipher uint8

const (
	// CipherNone: stored bytes are the (possibly compressed) plaintext.
	CipherNone Cipher = 0
	// CipherAES256GCM: each stored block is nonce || AES-256-GCM
	// ciphertext || tag under the tenant's key for the manifest's key id,
	// with the block's record as additional data (doc.go, "Encoded
	// blocks").
	CipherAES256GCM Cipher = 1
)

// Codec says how a v4 range's plaintext was compressed before encryption.
type Codec uint8

const (
	// CodecRaw: not compressed.
	CodecRaw Codec = 0
	// CodecZstd: one zstd frame (RFC 8878) that decodes to exactly Size
	// bytes.
	CodecZstd Codec = 1
	// CodecZstdPlanes: one zstd frame of the block's byte planes
	// (crypt.Shuffle2: even-indexed bytes, then odd-indexed bytes), which
	// decodes to exactly Size bytes and is then interleaved back. For
	// 16-bit floats it separates the low-entropy high bytes (sign and
	// exponent) from the noisy low bytes.
	CodecZstdPlanes Codec = 2
)

const (
	// NonceLen and TagLen are AES-GCM's standard nonce and tag sizes.
	NonceLen = 12
	TagLen   = 16
	// CipherOverhead is what encryption adds to a stored block.
	CipherOverhead = NonceLen + TagLen
	// MaxCipherKeyID bounds a cipher key id, in bytes.
	MaxCipherKeyID = 32
	// MaxBlockSize bounds one block's plaintext in a v4 manifest (a
	// reader allocates it for a decode): 1 GiB, far above hot_max_class.
	MaxBlockSize = 1 << 30

	aadDomain = "gpucache/cold/block/v1\x00"
)

// Encrypter gives the current cipher key id and AEAD for a tenant.
// *crypt.Keyring implements it.
type Encrypter interface {
	Encrypter(tenant string) (keyID string, aead cipher.AEAD, err error)
}

// Decrypter gives the AEAD of a tenant under a key id, or an error when
// that key may not be used now (unknown, expired, not yet valid).
// *crypt.Keyring implements it.
type Decrypter interface {
	Decrypter(tenant, keyID string) (cipher.AEAD, error)
}

// Compressor compresses whole blocks. *crypt.Zstd implements it.
// Decompress must fill dst exactly, never writing past it.
type Compressor interface {
	Compress(dst, src []byte) []byte
	Decompress(dst, src []byte) error
}

// Options are Build's optional stages. The zero value is Build: no seal,
// no encryption, no compression, a v3 manifest.
type Options struct {
	// Sealer, when set, seals the manifest (a *seal.Keyring; a nil
	// *seal.Keyring counts as none).
	Sealer Sealer
	// Encrypter, when set, encrypts every block with AES-256-GCM under
	// the tenant's current key; the manifest is v4 and names the key id.
	Encrypter Encrypter
	// Compressor, when set, compresses each block before encryption and
	// keeps the compressed form only if it saves at least MinSavingPct
	// percent of the block; a block that does not pay is stored raw.
	Compressor Compressor
	// BytePlanes compresses each block's byte planes (CodecZstdPlanes)
	// instead of its bytes (CodecZstd): what pays on bf16 KV
	// (docs/BENCHMARKS.md). Needs Compressor.
	BytePlanes bool
	// MinSavingPct is the smallest saving, in percent of the block, for
	// which a compressed form is kept. Default 0 means DefaultMinSavingPct.
	MinSavingPct int
	// Rand supplies the nonces. Default crypto/rand; tests set a fixed
	// stream to make encrypted packs reproducible. Never set it in
	// production: a repeated nonce under one key breaks AES-GCM.
	Rand io.Reader
}

// DefaultMinSavingPct: a compressed block is kept only if it is at least
// 10% smaller. Below that, a refill's decompression pass costs more time
// than the bytes it saves (docs/BENCHMARKS.md, "Cold-tier compression").
const DefaultMinSavingPct = 10

// BuildWith is Build with the stages opts names (sealing, encryption,
// compression). The plaintext's SHA-256 is what each range's checksum
// holds, whatever is stored. Encryption uses a fresh random nonce per
// block, so an encrypted pack's bytes (and keys) differ from one Build to
// the next; a sink retries the bytes it was given, so that changes nothing.
func BuildWith(ns identity.Namespace, blocks []Block, opts Options) (*Pack, error) {
	if nilSealer(opts.Sealer) {
		opts.Sealer = nil
	}
	return build(ns, blocks, opts)
}

// encoded reports whether m needs manifest v4.
func (m *Manifest) encoded() bool {
	if m.Cipher != CipherNone || len(m.CipherKeyID) != 0 {
		return true
	}
	for _, r := range m.Ranges {
		if r.Codec != CodecRaw {
			return true
		}
	}
	return false
}

// Encrypted reports whether the pack's blocks are encrypted.
func (m *Manifest) Encrypted() bool { return m.Cipher == CipherAES256GCM }

// CipherKey returns the cipher key id ("" if not encrypted). Key ids are
// not secret.
func (m *Manifest) CipherKey() string { return string(m.CipherKeyID) }

// Plain reports whether r's stored bytes are its plaintext (a v3 range, or
// a raw range of an unencrypted v4 pack): a reader may read them straight
// into the destination.
func (m *Manifest) Plain(r Range) bool { return m.Cipher == CipherNone && r.Codec == CodecRaw }

// checkEncoding checks one decoded range's encoding fields against the
// manifest's cipher.
func (m *Manifest) checkEncoding(r Range) error {
	inner, enc := r.Length, m.Cipher != CipherNone || r.Codec != CodecRaw
	if m.Cipher == CipherAES256GCM {
		if r.Length <= CipherOverhead {
			return fmt.Errorf("encrypted length %d, want more than %d", r.Length, CipherOverhead)
		}
		inner = r.Length - CipherOverhead
	}
	switch {
	case r.Size == 0 || enc && r.Size > MaxBlockSize:
		return fmt.Errorf("plaintext length %d not in 1..%d", r.Size, MaxBlockSize)
	case r.Codec == CodecRaw && inner != r.Size:
		return fmt.Errorf("raw block stores %d bytes for %d", inner, r.Size)
	case (r.Codec == CodecZstd || r.Codec == CodecZstdPlanes) && inner >= r.Size:
		return fmt.Errorf("compressed block of %d bytes is not smaller than its %d", inner, r.Size)
	case r.Codec > CodecZstdPlanes:
		return fmt.Errorf("codec %d unknown", r.Codec)
	}
	return nil
}

// blockAAD is the additional data an encrypted block is bound to: the
// namespace digest, the block key (and through it the full identity), the
// plaintext checksum and length, the codec and the key id. A ciphertext
// moved to another range, pack, namespace or key id fails to open.
func blockAAD(nsd identity.NamespaceDigest, key identity.BlockKey, sum Digest, size uint64, codec Codec, keyID []byte) []byte {
	b := make([]byte, 0, len(aadDomain)+32+32+32+8+1+1+len(keyID))
	b = append(b, aadDomain...)
	b = append(b, nsd[:]...)
	b = append(b, key[:]...)
	b = append(b, sum[:]...)
	b = binary.BigEndian.AppendUint64(b, size)
	b = append(b, byte(codec), byte(len(keyID)))
	return append(b, keyID...)
}

// encoder turns one block's plaintext into its stored form.
type encoder struct {
	nsd       identity.NamespaceDigest
	aead      cipher.AEAD // nil: not encrypted
	keyID     []byte
	cz        Compressor // nil: not compressed
	planes    bool       // compress byte planes (CodecZstdPlanes)
	minSaving int
	rand      io.Reader // nonces
}

// newEncoder prepares the stages opts asks for, for namespace ns.
func newEncoder(ns identity.Namespace, nsd identity.NamespaceDigest, opts Options) (*encoder, error) {
	e := &encoder{nsd: nsd, cz: opts.Compressor, planes: opts.BytePlanes, minSaving: opts.MinSavingPct, rand: opts.Rand}
	if e.rand == nil {
		e.rand = rand.Reader
	}
	if e.minSaving <= 0 {
		e.minSaving = DefaultMinSavingPct
	}
	if e.minSaving > 99 {
		return nil, fmt.Errorf("%w: minimum saving %d%%, want 1..99", ErrInvalid, e.minSaving)
	}
	if opts.Encrypter != nil {
		id, a, err := opts.Encrypter.Encrypter(ns.Tenant)
		if err != nil {
			return nil, fmt.Errorf("gpucache/cold/pack: encryption key: %w", err)
		}
		if len(id) == 0 || len(id) > MaxCipherKeyID || a.NonceSize() != NonceLen || a.Overhead() != TagLen {
			return nil, fmt.Errorf("%w: cipher key id %d bytes or not AES-GCM", ErrInvalid, len(id))
		}
		e.aead, e.keyID = a, []byte(id)
	}
	return e, nil
}

// active reports whether any stage changes bytes.
func (e *encoder) active() bool { return e.aead != nil || e.cz != nil }

// encode appends the stored form of payload (range r: Key, Sum and Size
// set) to obj and returns obj and the codec used.
func (e *encoder) encode(obj []byte, r Range, payload []byte) ([]byte, Codec, error) {
	inner, codec := payload, CodecRaw
	if e.cz != nil {
		src, kind := payload, CodecZstd
		if e.planes {
			src, kind = crypt.Shuffle2(nil, payload), CodecZstdPlanes
		}
		c := e.cz.Compress(nil, src)
		if len(c) > 0 && int64(len(c))*100 <= int64(len(payload))*int64(100-e.minSaving) {
			inner, codec = c, kind
		}
	}
	if e.aead == nil {
		return append(obj, inner...), codec, nil
	}
	start := len(obj)
	obj = append(obj, make([]byte, NonceLen)...)
	nonce := obj[start : start+NonceLen]
	if _, err := io.ReadFull(e.rand, nonce); err != nil {
		return nil, 0, fmt.Errorf("gpucache/cold/pack: nonce: %w", err)
	}
	aad := blockAAD(e.nsd, r.Key, r.Sum, r.Size, codec, e.keyID)
	return e.aead.Seal(obj, nonce, inner, aad), codec, nil
}

// OpenRange decodes the stored bytes of range r of m (exactly r.Length
// bytes, as read from the pack) into dst (exactly r.Size bytes) and checks
// the plaintext's SHA-256. a is m.Decrypter's AEAD for an encrypted pack
// (nil: an encrypted pack is ErrKeyUnavailable); cz decompresses zstd
// ranges (nil: a compressed range is ErrDecode). stored may be overwritten
// (it is decrypted in place). On any error dst is zeroed. Errors:
// ErrKeyUnavailable, ErrDecrypt, ErrDecode.
func (m *Manifest) OpenRange(r Range, stored, dst []byte, a cipher.AEAD, cz Compressor) (err error) {
	defer func() {
		if err != nil {
			clear(dst)
		}
	}()
	if uint64(len(stored)) != r.Length || uint64(len(dst)) != r.Size {
		return fmt.Errorf("%w: %d stored bytes into %d, range is %d into %d", ErrDecode, len(stored), len(dst), r.Length, r.Size)
	}
	if err := m.checkEncoding(r); err != nil {
		return fmt.Errorf("%w: %v", ErrDecode, err)
	}
	inner, err := m.openCipher(r, stored, a)
	if err != nil {
		return err
	}
	if err := decompress(r.Codec, dst, inner, cz); err != nil {
		return err
	}
	if Sum(dst) != r.Sum {
		return fmt.Errorf("%w: plaintext checksum mismatch", ErrDecode)
	}
	return nil
}

// openCipher returns the encoded bytes of stored range r: stored itself,
// or decrypted in place with a.
func (m *Manifest) openCipher(r Range, stored []byte, a cipher.AEAD) ([]byte, error) {
	switch m.Cipher {
	case CipherNone:
		return stored, nil
	case CipherAES256GCM:
		if a == nil {
			return nil, fmt.Errorf("%w: encrypted pack (key id %q) and no key", ErrKeyUnavailable, string(m.CipherKeyID))
		}
		nsd, err := m.NamespaceDigest()
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrDecode, err)
		}
		aad := blockAAD(nsd, r.Key, r.Sum, r.Size, r.Codec, m.CipherKeyID)
		inner, err := a.Open(stored[NonceLen:NonceLen], stored[:NonceLen], stored[NonceLen:], aad)
		if err != nil {
			return nil, ErrDecrypt
		}
		return inner, nil
	default:
		return nil, fmt.Errorf("%w: cipher %d", ErrDecode, m.Cipher)
	}
}

// decompress decodes inner, of codec c, into dst (len: the plaintext size).
func decompress(c Codec, dst, inner []byte, cz Compressor) error {
	switch c {
	case CodecRaw:
		copy(dst, inner)
	case CodecZstd:
		if cz == nil {
			return fmt.Errorf("%w: zstd block and no decompressor", ErrDecode)
		}
		if err := cz.Decompress(dst, inner); err != nil {
			return fmt.Errorf("%w: %v", ErrDecode, err)
		}
	case CodecZstdPlanes:
		if cz == nil {
			return fmt.Errorf("%w: zstd block and no decompressor", ErrDecode)
		}
		planes := make([]byte, len(dst))
		if err := cz.Decompress(planes, inner); err != nil {
			return fmt.Errorf("%w: %v", ErrDecode, err)
		}
		crypt.Unshuffle2(dst, planes)
	}
	return nil
}

// Decrypter returns the AEAD for m's tenant and cipher key id from dec, or
// an error wrapping ErrKeyUnavailable. Call it before reading a payload: a
// key that cannot be used is a miss with no payload I/O.
func (m *Manifest) Decrypter(dec Decrypter) (cipher.AEAD, error) {
	if m.Cipher == CipherNone {
		return nil, nil
	}
	if v, ok := dec.(*crypt.Keyring); dec == nil || ok && v == nil {
		return nil, fmt.Errorf("%w: encrypted pack (key id %q) and no cipher keyring", ErrKeyUnavailable, string(m.CipherKeyID))
	}
	a, err := dec.Decrypter(m.Namespace.Tenant, string(m.CipherKeyID))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrKeyUnavailable, err)
	}
	if a.NonceSize() != NonceLen || a.Overhead() != TagLen {
		return nil, fmt.Errorf("%w: key %q is not AES-GCM", ErrKeyUnavailable, string(m.CipherKeyID))
	}
	return a, nil
}

var (
	_ Encrypter  = (*crypt.Keyring)(nil)
	_ Decrypter  = (*crypt.Keyring)(nil)
	_ Compressor = (*crypt.Zstd)(nil)
)
