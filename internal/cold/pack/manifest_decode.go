package pack

// Decoding a manifest (the layout is in doc.go): one pass over the bytes
// with a sticky-error reader, checking each field as it is read.

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"fmt"

	"github.com/gpucache/gpucache/api/identity"
	"github.com/gpucache/gpucache/internal/cold"
	"github.com/gpucache/gpucache/internal/security/seal"
)

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
	d := &manifestDecoder{r: reader{b: b}}
	count, err := d.header()
	if err != nil {
		return nil, err
	}
	if err := d.ranges(count); err != nil {
		return nil, err
	}
	sealOff := d.r.off
	if err := d.seal(); err != nil {
		return nil, err
	}
	// One private copy of the sealed span; the namespace and every
	// identity alias it (capacity-capped, so an append by a caller copies).
	m := d.m
	m.sealed = bytes.Clone(b[:sealOff])
	m.nsCanon = m.sealed[d.nsOff : d.nsOff+d.nsLen : d.nsOff+d.nsLen]
	for i := range m.Ranges {
		o, n := d.idOffs[i], len(m.Ranges[i].Canonical)
		m.Ranges[i].Canonical = m.sealed[o : o+n : o+n]
	}
	return m, nil
}

// manifestDecoder is one DecodeManifest: the reader, the manifest so far
// and where the canonical namespace and identities lie in the input.
type manifestDecoder struct {
	r      reader
	m      *Manifest
	v4     bool  // ManifestVersionEncoded: cipher and per-range codec fields
	nsOff  int   // offset of the canonical namespace
	nsLen  int   // its length
	idOffs []int // offset of each range's canonical identity
}

// header decodes the fixed header up to the range count and checks the
// pack fields against each other; it returns the range count.
func (d *manifestDecoder) header() (uint32, error) {
	r := &d.r
	if string(r.take(4, "magic")) != manifestMagic {
		r.fail("bad magic")
		return 0, r.err
	}
	version := r.u16("version")
	if r.err == nil && version != ManifestVersion && version != ManifestVersionEncoded {
		return 0, fmt.Errorf("%w: version %d", ErrManifestVersion, version)
	}
	d.v4 = version == ManifestVersionEncoded
	if f := r.u16("flags"); f != 0 {
		r.fail("reserved flags %#x", f)
	}
	nsLen := r.u32("namespace length")
	if r.err == nil && nsLen > identity.MaxCanonicalLen {
		r.fail("namespace length %d, limit %d", nsLen, identity.MaxCanonicalLen)
	}
	d.nsOff = r.off
	nsb := r.take(int(nsLen), "namespace")
	if r.err != nil {
		return 0, r.err
	}
	ns, err := identity.DecodeNamespace(nsb)
	if err != nil {
		return 0, fmt.Errorf("%w: manifest namespace: %w", cold.ErrCorrupt, err)
	}
	d.nsLen = len(nsb)
	d.m = &Manifest{Namespace: ns, nsDigest: sha256.Sum256(nsb)}
	d.packFields()
	count := r.u32("range count")
	if r.err != nil {
		return 0, r.err
	}
	return count, d.checkPack(count)
}

// packFields decodes the pack key, digest and size and, in v4, the cipher.
func (d *manifestDecoder) packFields() {
	r, m := &d.r, d.m
	pk := r.take(int(r.u16("pack key length")), "pack key")
	m.PackKey = string(pk)
	m.PackDigest = r.digest("pack digest")
	m.PackSize = r.u64("pack size")
	if !d.v4 {
		return
	}
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

// checkPack checks the pack key against the namespace and pack digest,
// the pack size, and the range count against the bytes left.
func (d *manifestDecoder) checkPack(count uint32) error {
	r, m := &d.r, d.m
	kns, ksum, err := ParsePackKey(m.PackKey)
	switch {
	case err != nil:
		return fmt.Errorf("manifest pack key: %w", err)
	case kns != m.nsDigest:
		r.fail("pack key namespace %s, manifest namespace %s", kns, m.nsDigest)
	case ksum != m.PackDigest:
		r.fail("pack key digest %s, manifest pack digest %s", ksum, m.PackDigest)
	case m.PackSize <= HeaderLen || m.PackSize > MaxPackSize:
		r.fail("pack size %d not in %d..%d", m.PackSize, HeaderLen+1, uint64(MaxPackSize))
	case count == 0 || count > MaxRanges:
		r.fail("range count %d not in 1..%d", count, MaxRanges)
	case uint64(count)*uint64(minRecordLen) > uint64(len(r.b)-r.off):
		r.fail("range count %d needs more than the %d bytes left", count, len(r.b)-r.off)
	}
	return r.err
}

// ranges decodes and checks the count range records, which tile the
// payload area in order.
func (d *manifestDecoder) ranges(count uint32) error {
	r, m := &d.r, d.m
	m.Ranges = make([]Range, 0, count)
	m.index = make(map[identity.BlockKey]int, count)
	d.idOffs = make([]int, 0, count)
	next := uint64(HeaderLen) // ranges tile the payload area in order
	for i := range int(count) {
		rg, err := d.rangeRecord(i)
		if err != nil {
			return err
		}
		if err := d.checkRange(i, &rg, next); err != nil {
			return err
		}
		next = rg.Offset + rg.Length
		m.index[rg.Key] = i
		m.Ranges = append(m.Ranges, rg)
	}
	if next != m.PackSize {
		r.fail("ranges end at %d, pack is %d bytes", next, m.PackSize)
	}
	if d.v4 && !m.encoded() {
		r.fail("version 4 with no encrypted or compressed range (Build writes v3)")
	}
	return r.err
}

// rangeRecord decodes range record i and its identity. Its Canonical
// aliases the input until DecodeManifest copies the sealed span.
func (d *manifestDecoder) rangeRecord(i int) (Range, error) {
	r := &d.r
	idLen := r.u32("identity length")
	if r.err == nil && idLen > maxIdentityLen {
		r.fail("range %d: identity length %d, limit %d", i, idLen, maxIdentityLen)
	}
	d.idOffs = append(d.idOffs, r.off)
	idb := r.take(int(idLen), "identity")
	var rg Range
	rg.Key = identity.BlockKey(r.digest("block key"))
	rg.Offset = r.u64("offset")
	rg.Length = r.u64("length")
	rg.Sum = r.digest("payload checksum")
	rg.Size = rg.Length
	if d.v4 {
		rg.Size = r.u64("plaintext length")
		rg.Codec = Codec(r.u8("codec"))
	}
	if r.err != nil {
		return Range{}, r.err
	}
	if err := d.m.checkEncoding(rg); err != nil {
		r.fail("range %d: %v", i, err)
		return Range{}, r.err
	}
	id, err := decodeIdentity(idb)
	if err != nil {
		return Range{}, fmt.Errorf("manifest range %d: %w", i, err)
	}
	rg.Identity = id
	rg.Canonical = idb
	return rg, nil
}

// checkRange checks range i against the manifest's namespace, its key,
// the ranges before it (next: the first byte they leave free) and the
// pack size.
func (d *manifestDecoder) checkRange(i int, rg *Range, next uint64) error {
	r, m := &d.r, d.m
	ns, id := m.Namespace, rg.Identity
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
	return r.err
}

// seal decodes the seal slot, checks its form (not its MAC) and that no
// bytes trail it.
func (d *manifestDecoder) seal() error {
	r, s := &d.r, &d.m.Seal
	s.Kind = SealKind(r.u8("seal kind"))
	s.KeyID = bytes.Clone(r.take(int(r.u8("seal key id length")), "seal key id"))
	s.MAC = bytes.Clone(r.take(int(r.u8("seal mac length")), "seal mac"))
	if r.err != nil {
		return r.err
	}
	switch s.Kind {
	case SealNone:
		if len(s.KeyID) != 0 || len(s.MAC) != 0 {
			r.fail("seal kind 0 with a %d-byte key id and a %d-byte MAC", len(s.KeyID), len(s.MAC))
		}
	case SealHMACSHA256:
		if len(s.KeyID) == 0 || len(s.KeyID) > seal.MaxKeyIDLen || len(s.MAC) != seal.MACSize {
			r.fail("HMAC-SHA256 seal with a %d-byte key id (want 1..%d) and a %d-byte MAC (want %d)",
				len(s.KeyID), seal.MaxKeyIDLen, len(s.MAC), seal.MACSize)
		}
	default:
		r.fail("seal kind %d unknown", s.Kind)
	}
	if r.off != len(r.b) {
		r.fail("%d trailing bytes", len(r.b)-r.off)
	}
	return r.err
}
