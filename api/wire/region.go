package wire

import (
	"encoding/binary"
	"math"
)

// Registered regions (version 5, ADR 0026): on a Unix-domain connection a
// client passes the server a descriptor of shareable memory (a sealed
// memfd, or a file under /dev/shm) with REGISTER; GET_INTO and PUT_FROM
// then name (region, offset, length) in place of payload bytes, and the
// server copies once between its slab and the region.

// MaxRegions bounds the regions one connection holds at once.
const MaxRegions = 64

// RegisterRequest is the body of REGISTER. The descriptor of the region
// travels beside the frame, as SCM_RIGHTS ancillary data sent with the
// frame's bytes.
//
//	u32  region           the id the client names it by on this connection; > 0
//	u64  length           bytes to map from offset 0; > 0
type RegisterRequest struct {
	Region uint32
	Length uint64
}

// RegisterRequestSize is the encoded size of a RegisterRequest.
const RegisterRequestSize = 12

// AppendTo encodes m.
func (m *RegisterRequest) AppendTo(b []byte) []byte {
	b = binary.LittleEndian.AppendUint32(b, m.Region)
	return binary.LittleEndian.AppendUint64(b, m.Length)
}

// Decode parses m from b. A zero region id or length is MALFORMED, as is
// a length past math.MaxInt64.
func (m *RegisterRequest) Decode(b []byte) error {
	r := reader{b: b}
	m.Region, m.Length = r.u32(), r.u64()
	if r.err == nil && (m.Region == 0 || m.Length == 0 || m.Length > math.MaxInt64) {
		r.fail("region %d of %d bytes: the id and the length must be > 0", m.Region, m.Length)
	}
	return r.done()
}

// RegionMode says how the server copies to and from a region.
type RegionMode uint8

// Region modes.
const (
	// RegionSealed: a memfd sealed against shrinking; copies are plain.
	RegionSealed RegionMode = 0
	// RegionGuarded: a file that cannot be sealed (a /dev/shm file); each
	// copy is fault-guarded, and a fault (the client truncated the file)
	// is answered FAULT and drops the region.
	RegionGuarded RegionMode = 1
	regionModeMax            = RegionGuarded
)

// RegisterResponse answers REGISTER:
//
//	u8   mode             0 SEALED, 1 GUARDED
type RegisterResponse struct {
	Mode RegionMode
}

// AppendTo encodes m.
func (m *RegisterResponse) AppendTo(b []byte) []byte { return append(b, byte(m.Mode)) }

// Decode parses m from b.
func (m *RegisterResponse) Decode(b []byte) error {
	r := reader{b: b}
	m.Mode = RegionMode(r.u8())
	if r.err == nil && m.Mode > regionModeMax {
		r.fail("unknown region mode %d", m.Mode)
	}
	return r.done()
}

// UnregisterRequest is the body of UNREGISTER: u32 region. The answer has
// an empty body.
type UnregisterRequest struct {
	Region uint32
}

// AppendTo encodes m.
func (m *UnregisterRequest) AppendTo(b []byte) []byte {
	return binary.LittleEndian.AppendUint32(b, m.Region)
}

// Decode parses m from b. A zero region id is MALFORMED.
func (m *UnregisterRequest) Decode(b []byte) error {
	r := reader{b: b}
	m.Region = r.u32()
	if r.err == nil && m.Region == 0 {
		r.fail("region id 0")
	}
	return r.done()
}

// Slot is where one block lands in, or comes from, a region.
type Slot struct {
	Offset uint64
	Len    uint32 // GET_INTO: the capacity at Offset; PUT_FROM: unused (the table's Len)
}

// GetIntoRequest reads blocks into a registered region:
//
//	blob namespace
//	u64  lease_id         0: none
//	u32  region
//	u32  count            <= max_batch
//	count × {             44 bytes
//	  key  key
//	  u64  offset         where the block's bytes go in the region
//	  u32  capacity       bytes available there
//	}
//
// The server checks every (offset, capacity) lies inside the region, and
// that no two overlap, before it reads a block.
type GetIntoRequest struct {
	Namespace []byte
	LeaseID   uint64
	Region    uint32
	Keys      []Key
	Slots     []Slot
}

// GetIntoEntrySize is the encoded size of one GET_INTO entry.
const GetIntoEntrySize = KeySize + 12

// AppendTo encodes m; Keys and Slots have the same length.
func (m *GetIntoRequest) AppendTo(b []byte) []byte {
	b = appendBytes32(b, m.Namespace)
	b = binary.LittleEndian.AppendUint64(b, m.LeaseID)
	b = binary.LittleEndian.AppendUint32(b, m.Region)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(m.Keys)))
	for i := range m.Keys {
		b = append(b, m.Keys[i][:]...)
		b = binary.LittleEndian.AppendUint64(b, m.Slots[i].Offset)
		b = binary.LittleEndian.AppendUint32(b, m.Slots[i].Len)
	}
	return b
}

// Decode parses m from b, allowing at most maxBatch keys. m.Namespace
// aliases b; Keys and Slots reuse m's backing arrays.
func (m *GetIntoRequest) Decode(b []byte, maxBatch uint32) error {
	r := reader{b: b}
	m.Namespace = r.blob(MaxNamespaceLen)
	m.LeaseID = r.u64()
	m.Region = r.u32()
	n := r.count(maxBatch, GetIntoEntrySize)
	m.Keys, m.Slots = grow(m.Keys, n), grow(m.Slots, n)
	for i := 0; i < n && r.err == nil; i++ {
		copy(m.Keys[i][:], r.take(KeySize))
		m.Slots[i] = Slot{Offset: r.u64(), Len: r.u32()}
	}
	if r.err == nil && m.Region == 0 {
		r.fail("region id 0")
	}
	return r.done()
}

// grow returns s resized to n, reusing its backing array when it can.
func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// GetIntoResponse answers GET_INTO; no payload follows:
//
//	u32  count            = the request's key count
//	count × {
//	  u8  status          HIT, MISS, TOO_LARGE or FAULT
//	  u32 length          HIT: bytes written at the entry's offset;
//	                      TOO_LARGE: the block's length; else 0
//	}
type GetIntoResponse struct {
	Blocks []BlockMeta
}

// AppendTo encodes m.
func (m *GetIntoResponse) AppendTo(b []byte) []byte {
	return (&GetResponse{Blocks: m.Blocks}).AppendTo(b)
}

// Decode parses m from b.
func (m *GetIntoResponse) Decode(b []byte, maxBatch uint32) error {
	r := reader{b: b}
	n := r.count(maxBatch, 5)
	m.Blocks = grow(m.Blocks, n)
	for i := 0; i < n && r.err == nil; i++ {
		bm := BlockMeta{Status: Status(r.u8()), Len: r.u32()}
		m.Blocks[i] = bm
		switch bm.Status {
		case StatusHit, StatusTooLarge:
		case StatusMiss, StatusFault:
			if bm.Len != 0 {
				r.fail("block %d: status %s carries length %d", i, bm.Status, bm.Len)
			}
		default:
			r.fail("block %d: status %s in a GET_INTO answer", i, bm.Status)
		}
	}
	return r.done()
}

// PutFromRequest stores blocks whose bytes lie in a registered region:
//
//	u32  region
//	u32  count            = the table's entry count
//	count × u64 offset    where entry i's length bytes start in the region
//	     table            a PUT table (PutRequest): namespace and entries
//
// No payload follows: the server copies each entry's bytes from the
// region into its slab, then checksums its own copy.
type PutFromRequest struct {
	Region  uint32
	Offsets []uint64
	Put     PutRequest
}

// AppendTo encodes m; len(Offsets) == len(Put.Blocks).
func (m *PutFromRequest) AppendTo(b []byte) []byte {
	b = AppendPutFromHead(b, m.Region, m.Offsets)
	return m.Put.AppendTo(b)
}

// AppendPutFromHead encodes the part of a PUT_FROM body before its PUT
// table.
func AppendPutFromHead(b []byte, region uint32, offsets []uint64) []byte {
	b = binary.LittleEndian.AppendUint32(b, region)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(offsets)))
	for _, o := range offsets {
		b = binary.LittleEndian.AppendUint64(b, o)
	}
	return b
}

// Decode parses m from b, allowing at most maxBatch entries. The PUT
// table's aliasing rules hold for m.Put.
func (m *PutFromRequest) Decode(b []byte, maxBatch uint32) error {
	return decodeFrom(b, maxBatch, &m.Region, &m.Offsets, func(t []byte) (int, error) {
		_, err := m.Put.Decode(t, maxBatch)
		return len(m.Put.Blocks), err
	})
}

// PutOpaqueFromRequest stores opaque-key blocks whose bytes lie in a
// registered region (version 5), as PutFromRequest does for token-chain
// blocks:
//
//	u32  region
//	u32  count            = the table's entry count
//	count × u64 offset    where entry i's length bytes start in the region
//	     table            a PUT_OPAQUE table (PutOpaqueRequest)
//
// No payload follows.
type PutOpaqueFromRequest struct {
	Region  uint32
	Offsets []uint64
	Put     PutOpaqueRequest
}

// AppendTo encodes m; len(Offsets) == len(Put.Blocks).
func (m *PutOpaqueFromRequest) AppendTo(b []byte) []byte {
	b = AppendPutFromHead(b, m.Region, m.Offsets)
	return m.Put.AppendTo(b)
}

// Decode parses m from b, allowing at most maxBatch entries. The
// PUT_OPAQUE table's aliasing rules hold for m.Put.
func (m *PutOpaqueFromRequest) Decode(b []byte, maxBatch uint32) error {
	return decodeFrom(b, maxBatch, &m.Region, &m.Offsets, func(t []byte) (int, error) {
		_, err := m.Put.Decode(t, maxBatch)
		return len(m.Put.Blocks), err
	})
}

// decodeFrom decodes a PUT_FROM or PUT_OPAQUE_FROM body: the region and
// the offsets, then the table after them with table, which returns its
// entry count; there must be one offset per entry.
func decodeFrom(b []byte, maxBatch uint32, region *uint32, offsets *[]uint64, table func([]byte) (int, error)) error {
	r := reader{b: b}
	*region = r.u32()
	n := r.count(maxBatch, 8)
	*offsets = grow(*offsets, n)
	for i := 0; i < n && r.err == nil; i++ {
		(*offsets)[i] = r.u64()
	}
	if r.err == nil && *region == 0 {
		r.fail("region id 0")
	}
	if r.err != nil {
		return r.err
	}
	entries, err := table(r.b)
	if err != nil {
		return err
	}
	if entries != n {
		return Errorf(CodeMalformed, "%d offsets for %d entries", n, entries)
	}
	return nil
}
