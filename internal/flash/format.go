package flash

// The on-disk format: a segment header, then records. doc.go has the
// byte layouts; this file is their one encoder and decoder.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"

	"github.com/gpucache/gpucache/api/identity"
)

const (
	// align is the unit every record start, payload start and record
	// length is a multiple of, so payload reads and writes can be O_DIRECT.
	align = 4096
	// segHeaderSize is the segment header's block; records start after it.
	segHeaderSize = align
	// recHeaderSize is a record header's block on disk; the payload
	// starts after it.
	recHeaderSize = align
	// recHeaderUsed is the part of a record header the format defines
	// (and its checksum covers); the rest of the block is zero.
	recHeaderUsed = 512
	// segHeaderUsed is the part of the segment header the format defines.
	segHeaderUsed = 40
	// MaxTenantLen bounds the tenant name a record carries.
	MaxTenantLen = 255
	// formatVersion is the version of segments and records written now.
	formatVersion = 1
)

var (
	segMagic = [8]byte{'G', 'P', 'C', 'F', 'L', 'S', 'E', 'G'}
	recMagic = [4]byte{'G', 'C', 'F', 'R'}
	// castagnoli is CRC-32C, which the CPU computes (SSE4.2, ARMv8 CRC).
	castagnoli = crc32.MakeTable(crc32.Castagnoli)
)

// Sentinel errors.
var (
	// ErrCorrupt is the kind of every checksum or structure failure of a
	// segment or a record (a *CorruptError says where).
	ErrCorrupt = errors.New("gpucache/flash: corrupt")
	// ErrVersion is a segment or record of a format version this build
	// does not know (written by a newer gpucache): it is left alone.
	ErrVersion = errors.New("gpucache/flash: unsupported format version")
	// ErrClosed is the answer of a closed tier.
	ErrClosed = errors.New("gpucache/flash: tier closed")
	// ErrDegraded is the answer while the tier cannot write (a full disk,
	// repeated write errors): blocks go to the next tier until a retry
	// succeeds.
	ErrDegraded = errors.New("gpucache/flash: tier degraded, not writing")
	// ErrConfig is an invalid Config.
	ErrConfig = errors.New("gpucache/flash: invalid config")
	// ErrDir is a Dir the tier cannot use (not a directory, not writable).
	ErrDir = errors.New("gpucache/flash: unusable directory")
	// ErrWrite reports that a write or sync failed while Flush waited.
	ErrWrite = errors.New("gpucache/flash: write failed")
)

// CorruptError locates a corruption: the file, the offset, and what was
// wrong. errors.Is(err, ErrCorrupt) is true.
type CorruptError struct {
	Path   string
	Off    int64
	Reason string
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("gpucache/flash: corrupt %s at offset %d: %s", e.Path, e.Off, e.Reason)
}

// Is makes errors.Is(err, ErrCorrupt) true.
func (e *CorruptError) Is(target error) bool { return target == ErrCorrupt }

// kind is a record's kind.
type kind uint8

const (
	kindBlock     kind = 1 // a block: header, then the payload
	kindTombstone kind = 2 // a tombstone: header only, kills the key's earlier records
)

// recHeader is a record header, decoded.
type recHeader struct {
	kind   kind
	digest identity.NamespaceDigest
	key    identity.BlockKey
	parent identity.BlockKey
	tokens uint32
	length int64  // payload bytes (0 for a tombstone)
	target uint64 // tombstone: the segment that held the record it kills (0: none on flash)
	sum    uint32 // block: CRC-32C of the identity fields and the payload (payloadSum)
	tenant string
}

// Record header layout (little endian), offsets within its 4 KiB block.
const (
	rhMagic     = 0   // [4]  "GCFR"
	rhVersion   = 4   // u16
	rhKind      = 6   // u8
	rhTenantLen = 7   // u8
	rhDigest    = 8   // [32]
	rhKey       = 40  // [32]
	rhParent    = 72  // [32]
	rhTokens    = 104 // u32
	rhReserved1 = 108 // u32, zero
	rhLength    = 112 // u64
	rhTarget    = 120 // u64
	rhSum       = 128 // u32
	rhReserved2 = 132 // u32, zero
	rhTenant    = 136 // [255], zero padded
	rhCRC       = 508 // u32: CRC-32C of bytes [0, 508)
)

// extent is the bytes a record takes on disk: its header block and its
// payload rounded up to align.
func (h *recHeader) extent() int64 { return recHeaderSize + roundUp(h.length) }

func roundUp(n int64) int64 { return (n + align - 1) &^ (align - 1) }

// encode writes the header into b[:recHeaderUsed] (b must be at least that
// long), zeroing the bytes it does not set.
func (h *recHeader) encode(b []byte) {
	b = b[:recHeaderUsed]
	clear(b)
	copy(b[rhMagic:], recMagic[:])
	binary.LittleEndian.PutUint16(b[rhVersion:], formatVersion)
	b[rhKind] = byte(h.kind)
	b[rhTenantLen] = byte(len(h.tenant))
	copy(b[rhDigest:], h.digest[:])
	copy(b[rhKey:], h.key[:])
	copy(b[rhParent:], h.parent[:])
	binary.LittleEndian.PutUint32(b[rhTokens:], h.tokens)
	binary.LittleEndian.PutUint64(b[rhLength:], uint64(h.length))
	binary.LittleEndian.PutUint64(b[rhTarget:], h.target)
	binary.LittleEndian.PutUint32(b[rhSum:], h.sum)
	copy(b[rhTenant:rhTenant+MaxTenantLen], h.tenant)
	binary.LittleEndian.PutUint32(b[rhCRC:], crc32.Checksum(b[:rhCRC], castagnoli))
}

// maxRecordLength bounds a decoded payload length before any file size
// does (1 TiB: far above any segment).
const maxRecordLength = 1 << 40

// decodeRecHeader decodes and verifies a record header from
// b[:recHeaderUsed]. It returns ErrVersion for a header of another
// version (whose checksum verifies), and an error wrapping ErrCorrupt for
// anything else that is wrong. It never allocates for a bad header.
func decodeRecHeader(b []byte) (recHeader, error) {
	var h recHeader
	if len(b) < recHeaderUsed {
		return h, errShort
	}
	b = b[:recHeaderUsed]
	if [4]byte(b[rhMagic:rhMagic+4]) != recMagic {
		return h, errMagic
	}
	if crc32.Checksum(b[:rhCRC], castagnoli) != binary.LittleEndian.Uint32(b[rhCRC:]) {
		return h, errHeaderSum
	}
	if v := binary.LittleEndian.Uint16(b[rhVersion:]); v != formatVersion {
		return h, ErrVersion
	}
	h.kind = kind(b[rhKind])
	tl := int(b[rhTenantLen])
	copy(h.digest[:], b[rhDigest:])
	copy(h.key[:], b[rhKey:])
	copy(h.parent[:], b[rhParent:])
	h.tokens = binary.LittleEndian.Uint32(b[rhTokens:])
	length := binary.LittleEndian.Uint64(b[rhLength:])
	h.target = binary.LittleEndian.Uint64(b[rhTarget:])
	h.sum = binary.LittleEndian.Uint32(b[rhSum:])
	switch {
	case binary.LittleEndian.Uint32(b[rhReserved1:]) != 0 || binary.LittleEndian.Uint32(b[rhReserved2:]) != 0:
		return recHeader{}, errReserved
	case !allZero(b[rhTenant+tl : rhCRC]):
		return recHeader{}, errReserved
	case length > maxRecordLength:
		return recHeader{}, errLength
	}
	h.length = int64(length)
	switch h.kind {
	case kindBlock:
		if h.target != 0 || tl == 0 {
			return recHeader{}, errFields
		}
	case kindTombstone:
		if h.length != 0 || h.sum != 0 || h.tokens != 0 || h.parent != (identity.BlockKey{}) {
			return recHeader{}, errFields
		}
	default:
		return recHeader{}, errKind
	}
	h.tenant = string(b[rhTenant : rhTenant+tl])
	return h, nil
}

// The reasons a record header does not decode (all ErrCorrupt).
var (
	errShort     = fmt.Errorf("%w: short header", ErrCorrupt)
	errMagic     = fmt.Errorf("%w: bad magic", ErrCorrupt)
	errHeaderSum = fmt.Errorf("%w: header checksum mismatch", ErrCorrupt)
	errReserved  = fmt.Errorf("%w: reserved bytes set", ErrCorrupt)
	errLength    = fmt.Errorf("%w: payload length out of range", ErrCorrupt)
	errFields    = fmt.Errorf("%w: fields do not fit the record kind", ErrCorrupt)
	errKind      = fmt.Errorf("%w: unknown record kind", ErrCorrupt)
)

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// identitySum is the CRC-32C of a block record's identity fields, in this
// order: digest, key, parent, tokens (u32 LE), payload length (u64 LE),
// tenant length (u8), tenant. payloadSum continues it over the payload, so
// a payload never verifies under an identity other than its own.
func identitySum(h *recHeader) uint32 {
	var b [32 + 32 + 32 + 4 + 8 + 1 + MaxTenantLen]byte
	n := copy(b[:], h.digest[:])
	n += copy(b[n:], h.key[:])
	n += copy(b[n:], h.parent[:])
	binary.LittleEndian.PutUint32(b[n:], h.tokens)
	n += 4
	binary.LittleEndian.PutUint64(b[n:], uint64(h.length))
	n += 8
	b[n] = byte(len(h.tenant))
	n++
	n += copy(b[n:], h.tenant)
	return crc32.Checksum(b[:n], castagnoli)
}

// payloadSum is the checksum a block record carries: identitySum
// continued over the payload.
func payloadSum(h *recHeader, payload []byte) uint32 {
	return crc32.Update(identitySum(h), castagnoli, payload)
}

// Segment header layout (little endian), offsets within its 4 KiB block.
const (
	shMagic   = 0  // [8] "GPCFLSEG"
	shVersion = 8  // u32
	shAlign   = 12 // u32: the record alignment, 4096
	shSeq     = 16 // u64: the segment's sequence number (also in its name)
	shBytes   = 24 // u64: SegmentBytes when it was created (informational)
	shCRC     = 32 // u32: CRC-32C of bytes [0, 32)
)

// encodeSegHeader writes a segment header into b[:segHeaderSize].
func encodeSegHeader(b []byte, seq uint64, segBytes int64) {
	b = b[:segHeaderSize]
	clear(b)
	copy(b[shMagic:], segMagic[:])
	binary.LittleEndian.PutUint32(b[shVersion:], formatVersion)
	binary.LittleEndian.PutUint32(b[shAlign:], align)
	binary.LittleEndian.PutUint64(b[shSeq:], seq)
	binary.LittleEndian.PutUint64(b[shBytes:], uint64(segBytes))
	binary.LittleEndian.PutUint32(b[shCRC:], crc32.Checksum(b[:shCRC], castagnoli))
}

// decodeSegHeader verifies a segment header and returns its sequence
// number: ErrVersion for another version (its checksum verifying), an
// ErrCorrupt error for anything else wrong.
func decodeSegHeader(b []byte) (uint64, error) {
	if len(b) < segHeaderUsed {
		return 0, errShort
	}
	if [8]byte(b[shMagic:shMagic+8]) != segMagic {
		return 0, errMagic
	}
	if crc32.Checksum(b[:shCRC], castagnoli) != binary.LittleEndian.Uint32(b[shCRC:]) {
		return 0, errHeaderSum
	}
	if v := binary.LittleEndian.Uint32(b[shVersion:]); v != formatVersion {
		return 0, ErrVersion
	}
	if binary.LittleEndian.Uint32(b[shAlign:]) != align {
		return 0, errFields
	}
	return binary.LittleEndian.Uint64(b[shSeq:]), nil
}
