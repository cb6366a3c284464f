package pack

import (
	"bytes"
	"encoding/binary"
	"fmt"

	"github.com/gpucache/gpucache/api/identity"
	"github.com/gpucache/gpucache/internal/cold"
)

// The identity package decodes namespaces but not full identities, so the
// manifest decoder parses the "GCID" encoding here, reusing
// identity.DecodeNamespace for the namespace fields, and then accepts the
// bytes only if re-encoding the result reproduces them exactly. That last
// check makes this decoder exactly as strict as identity's encoder: if the
// identity encoding ever changes, every old record fails closed.

const (
	// idHeader is "GCID" | version 1 | 19 fields (identity/doc.go).
	idHeader = "GCID\x01\x13"
	// opaqueHeader is "GCID" | version 1 | 16 fields: the namespace and
	// the name of an opaque-key block (tag 20).
	opaqueHeader = "GCID\x01\x10"
	tagOpaque    = 20
	// nsHeader is "GCNS" | version 1 | 15 fields.
	nsHeader = "GCNS\x01\x0f"
	// nsFields is the number of namespace fields inside an identity.
	nsFields = 15
	// maxIdentityLen bounds one canonical identity: a whole namespace
	// encoding plus parent, position, valid length and MaxBlockTokens tokens,
	// each field with its 5-byte tag and length.
	maxIdentityLen = identity.MaxCanonicalLen + 4*5 + 32 + 8 + 4 + 4*identity.MaxBlockTokens
)

// identityHeader reports whether b starts with a canonical identity header
// (ok), and whether it is the opaque-key form.
func identityHeader(b []byte) (opaque, ok bool) {
	switch {
	case len(b) >= len(idHeader) && string(b[:len(idHeader)]) == idHeader:
		return false, true
	case len(b) >= len(opaqueHeader) && string(b[:len(opaqueHeader)]) == opaqueHeader:
		return true, true
	}
	return false, false
}

// decodeIdentity parses a canonical CacheIdentity encoding. Errors wrap
// cold.ErrCorrupt.
func decodeIdentity(b []byte) (identity.CacheIdentity, error) {
	var id identity.CacheIdentity
	if len(b) > maxIdentityLen {
		return id, fmt.Errorf("%w: identity is %d bytes, limit %d", cold.ErrCorrupt, len(b), maxIdentityLen)
	}
	opaque, ok := identityHeader(b)
	if !ok {
		return id, fmt.Errorf("%w: identity: bad header", cold.ErrCorrupt)
	}
	ns, end, err := decodeIdentityNamespace(b)
	if err != nil {
		return id, err
	}
	id.Namespace = ns
	if opaque {
		return decodeOpaque(id, b, end)
	}

	id, err = decodeChainFields(id, b, end)
	if err != nil {
		return id, err
	}
	again, err := id.Canonical()
	if err != nil {
		return id, fmt.Errorf("%w: identity: %w", cold.ErrCorrupt, err)
	}
	if !bytes.Equal(again, b) {
		return id, fmt.Errorf("%w: identity: not a canonical encoding", cold.ErrCorrupt)
	}
	return id, nil
}

// decodeIdentityNamespace decodes the namespace fields of canonical
// identity b and returns the namespace and where its fields end.
func decodeIdentityNamespace(b []byte) (identity.Namespace, int, error) {
	// Walk the 15 namespace fields to find where they end.
	end := len(idHeader)
	for tag := 1; tag <= nsFields; tag++ {
		_, next, err := tlv(b, end, byte(tag))
		if err != nil {
			return identity.Namespace{}, 0, err
		}
		end = next
	}
	nsb := make([]byte, 0, len(nsHeader)+end-len(idHeader))
	nsb = append(nsb, nsHeader...)
	nsb = append(nsb, b[len(idHeader):end]...)
	ns, err := identity.DecodeNamespace(nsb)
	if err != nil {
		return identity.Namespace{}, 0, fmt.Errorf("%w: identity namespace: %w", cold.ErrCorrupt, err)
	}
	return ns, end, nil
}

// decodeChainFields reads the parent, position, valid length and tokens
// of a chain identity whose namespace fields end at end; they must end b.
func decodeChainFields(id identity.CacheIdentity, b []byte, end int) (identity.CacheIdentity, error) {
	v, end, err := tlv(b, end, 16)
	if err != nil {
		return id, err
	}
	if len(v) != 32 {
		return id, fmt.Errorf("%w: identity: parent is %d bytes", cold.ErrCorrupt, len(v))
	}
	copy(id.Parent[:], v)
	if v, end, err = tlv(b, end, 17); err != nil {
		return id, err
	}
	if len(v) != 8 {
		return id, fmt.Errorf("%w: identity: position is %d bytes", cold.ErrCorrupt, len(v))
	}
	id.Position = binary.LittleEndian.Uint64(v)
	if v, end, err = tlv(b, end, 18); err != nil {
		return id, err
	}
	if len(v) != 4 {
		return id, fmt.Errorf("%w: identity: valid_length is %d bytes", cold.ErrCorrupt, len(v))
	}
	id.ValidLength = binary.LittleEndian.Uint32(v)
	if v, end, err = tlv(b, end, 19); err != nil {
		return id, err
	}
	if len(v)%4 != 0 || len(v)/4 > identity.MaxBlockTokens {
		return id, fmt.Errorf("%w: identity: tokens field is %d bytes", cold.ErrCorrupt, len(v))
	}
	if end != len(b) {
		return id, fmt.Errorf("%w: identity: %d trailing bytes", cold.ErrCorrupt, len(b)-end)
	}
	id.Tokens = make([]uint32, len(v)/4)
	for i := range id.Tokens {
		id.Tokens[i] = binary.LittleEndian.Uint32(v[4*i:])
	}
	return id, nil
}

// decodeOpaque reads the name field of an opaque-key identity whose
// namespace fields end at off.
func decodeOpaque(id identity.CacheIdentity, b []byte, off int) (identity.CacheIdentity, error) {
	v, end, err := tlv(b, off, tagOpaque)
	if err != nil {
		return id, err
	}
	if end != len(b) {
		return id, fmt.Errorf("%w: identity: %d trailing bytes", cold.ErrCorrupt, len(b)-end)
	}
	if len(v) == 0 || len(v) > identity.MaxOpaqueLen {
		return id, fmt.Errorf("%w: identity: opaque name is %d bytes", cold.ErrCorrupt, len(v))
	}
	id.Opaque = append([]byte(nil), v...)
	again, err := id.Canonical()
	if err != nil {
		return id, fmt.Errorf("%w: identity: %w", cold.ErrCorrupt, err)
	}
	if !bytes.Equal(again, b) {
		return id, fmt.Errorf("%w: identity: not a canonical encoding", cold.ErrCorrupt)
	}
	return id, nil
}

// tlv reads the field at b[off:]: tag (u8) | length (u32 LE) | value.
func tlv(b []byte, off int, tag byte) (val []byte, next int, err error) {
	if len(b)-off < 5 {
		return nil, 0, fmt.Errorf("%w: identity: truncated at field %d", cold.ErrCorrupt, tag)
	}
	if b[off] != tag {
		return nil, 0, fmt.Errorf("%w: identity: tag %d, want %d", cold.ErrCorrupt, b[off], tag)
	}
	n := binary.LittleEndian.Uint32(b[off+1:])
	if uint64(n) > uint64(len(b)-off-5) {
		return nil, 0, fmt.Errorf("%w: identity: field %d length %d past end", cold.ErrCorrupt, tag, n)
	}
	start := off + 5
	return b[start : start+int(n)], start + int(n), nil
}
