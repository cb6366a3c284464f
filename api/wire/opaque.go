package wire

import "encoding/binary"

// MaxOpaqueName bounds the name of an opaque-key block
// (identity.MaxOpaqueLen).
const MaxOpaqueName = 1024

// OpaqueBlock is one entry of a PUT_OPAQUE table: the block's key, the
// opaque name the server derives the key from (with the request's
// namespace: identity.OpaqueKey), and its payload length.
type OpaqueBlock struct {
	Key  Key
	Name []byte // 1..MaxOpaqueName bytes; aliases the decoded buffer
	Len  uint32 // payload bytes
}

// PutOpaqueRequest is the table of a PUT_OPAQUE request (version 3); the
// payloads follow it in order, exactly as for PUT:
//
//	blob namespace
//	u32  count            <= max_batch
//	count × {             38 + name_len bytes
//	  key  key            identity.OpaqueKey(namespace digest, name)
//	  u16  name_len       1..1024 (MaxOpaqueName)
//	       name           the block's opaque name (a RESP key)
//	  u32  length         payload bytes
//	}
type PutOpaqueRequest struct {
	Namespace []byte
	Blocks    []OpaqueBlock
}

// OpaqueBlockSize is the encoded size of one OpaqueBlock with a name of n
// bytes.
func OpaqueBlockSize(n int) int { return KeySize + 2 + n + 4 }

// minOpaqueBlock is the smallest valid entry: a one-byte name.
const minOpaqueBlock = KeySize + 2 + 1 + 4

// AppendTo encodes the table of a PUT_OPAQUE request.
func (m *PutOpaqueRequest) AppendTo(b []byte) []byte {
	b = appendBytes32(b, m.Namespace)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(m.Blocks)))
	for i := range m.Blocks {
		ob := &m.Blocks[i]
		b = append(b, ob.Key[:]...)
		b = binary.LittleEndian.AppendUint16(b, uint16(len(ob.Name)))
		b = append(b, ob.Name...)
		b = binary.LittleEndian.AppendUint32(b, ob.Len)
	}
	return b
}

// Decode parses the table of a PUT_OPAQUE request and returns the payload
// total, which must equal the bytes that follow the table (CheckPayload).
// A name of 0 or more than MaxOpaqueName bytes is MALFORMED; a count over
// maxBatch is BATCH_TOO_LARGE.
//
// Aliasing: m.Namespace and every block's Name alias b. Blocks reuses m's
// backing array when it is large enough.
func (m *PutOpaqueRequest) Decode(b []byte, maxBatch uint32) (payload uint64, err error) {
	r := reader{b: b}
	m.Namespace = r.blob(MaxNamespaceLen)
	n := r.count(maxBatch, minOpaqueBlock)
	if cap(m.Blocks) < n {
		m.Blocks = make([]OpaqueBlock, n)
	}
	m.Blocks = m.Blocks[:n]
	for i := range m.Blocks {
		ob := &m.Blocks[i]
		copy(ob.Key[:], r.take(KeySize))
		ln := int(r.u16())
		if r.err == nil && (ln == 0 || ln > MaxOpaqueName) {
			r.fail("entry %d: opaque name of %d bytes not in 1..%d", i, ln, MaxOpaqueName)
		}
		ob.Name = r.take(ln)
		ob.Len = r.u32()
		payload += uint64(ob.Len)
	}
	if r.err != nil {
		m.Blocks = m.Blocks[:0]
		return 0, r.err
	}
	return payload, r.done()
}
