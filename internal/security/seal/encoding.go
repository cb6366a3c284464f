package seal

import (
	"errors"
	"fmt"
)

// ErrMalformed reports a stored seal that does not decode: a corruption
// error, distinct from ErrBadSeal (which means the seal decoded but does
// not match).
var ErrMalformed = errors.New("gpucache/seal: malformed seal encoding")

// EncodingVersion is the first byte of an encoded seal.
const EncodingVersion = 1

// EncodedLen returns the encoded size of s.
func EncodedLen(s Seal) int { return 2 + len(s.KeyID) + MACSize }

// AppendSeal appends the encoding of s to dst and returns the extended slice:
//
//	u8 version (1) | u8 id length (1..32) | id | 32-byte MAC
//
// It panics if s.KeyID is not a valid id (a programming error: Keyring
// never produces one).
func AppendSeal(dst []byte, s Seal) []byte {
	if !s.KeyID.valid() {
		panic(fmt.Sprintf("gpucache/seal: AppendSeal with invalid key id length %d", len(s.KeyID)))
	}
	dst = append(dst, EncodingVersion, byte(len(s.KeyID)))
	dst = append(dst, s.KeyID...)
	return append(dst, s.MAC[:]...)
}

// DecodeSeal decodes one seal from the front of b and returns it with the
// number of bytes consumed. The encoding is canonical: a decoded seal
// re-encodes to exactly b[:n]. The returned Seal does not alias b.
func DecodeSeal(b []byte) (Seal, int, error) {
	if len(b) < 2 {
		return Seal{}, 0, fmt.Errorf("%w: %d bytes", ErrMalformed, len(b))
	}
	if b[0] != EncodingVersion {
		return Seal{}, 0, fmt.Errorf("%w: version %d", ErrMalformed, b[0])
	}
	idLen := int(b[1])
	if idLen == 0 || idLen > MaxKeyIDLen {
		return Seal{}, 0, fmt.Errorf("%w: key id length %d", ErrMalformed, idLen)
	}
	n := 2 + idLen + MACSize
	if len(b) < n {
		return Seal{}, 0, fmt.Errorf("%w: %d bytes, need %d", ErrMalformed, len(b), n)
	}
	s := Seal{KeyID: KeyID(b[2 : 2+idLen])} // string conversion copies
	copy(s.MAC[:], b[2+idLen:n])
	return s, n, nil
}
