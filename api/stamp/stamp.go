package stamp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"
)

// ErrMalformed reports a stamp that does not parse.
var ErrMalformed = errors.New("gpucache/stamp: malformed stamp")

// Size is the wire size of a Stamp.
const Size = 24

// Stamp is the replay-protection header of one mutating request.
//
// Wire layout, 24 bytes; the timestamp is little-endian, like every integer
// of the wire protocol (api/wire/doc.go; ADR 0012):
//
//	u64 timestamp, unix nanoseconds, top bit clear (0 ≤ t ≤ 2^63-1)
//	16-byte nonce, random per request, copied as is
//
// internal/security/antireplay/testdata/stamp_golden.json pins the exact
// bytes (the server's window checks them there).
type Stamp struct {
	UnixNano int64
	Nonce    [16]byte
}

// New returns a stamp for t with the given nonce.
func New(t time.Time, nonce [16]byte) Stamp { return Stamp{UnixNano: t.UnixNano(), Nonce: nonce} }

// Append appends the 24-byte encoding of s to dst. It panics on a negative
// timestamp (before 1970), which has no encoding.
func (s Stamp) Append(dst []byte) []byte {
	if s.UnixNano < 0 {
		panic("gpucache/stamp: negative stamp timestamp")
	}
	dst = binary.LittleEndian.AppendUint64(dst, uint64(s.UnixNano))
	return append(dst, s.Nonce[:]...)
}

// Parse parses exactly Size bytes. The encoding is canonical:
// a parsed stamp re-encodes to b. The result does not alias b.
func Parse(b []byte) (Stamp, error) {
	if len(b) != Size {
		return Stamp{}, fmt.Errorf("%w: %d bytes, want %d", ErrMalformed, len(b), Size)
	}
	u := binary.LittleEndian.Uint64(b)
	if u > math.MaxInt64 {
		return Stamp{}, fmt.Errorf("%w: timestamp top bit (byte 7) set; the timestamp is little-endian", ErrMalformed)
	}
	s := Stamp{UnixNano: int64(u)}
	copy(s.Nonce[:], b[8:])
	return s, nil
}
