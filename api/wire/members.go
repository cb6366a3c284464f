package wire

import "encoding/binary"

// MaxMembers bounds the members of a MEMBERS response.
const MaxMembers = 4096

// MemberFlags describe a member's state.
type MemberFlags uint8

// Member flags.
const (
	// MemberDraining: the member takes no new fills and owns no key.
	MemberDraining MemberFlags = 1 << 0
	memberKnown                = MemberDraining
)

// MemberInfo is one member of a MEMBERS response: what a client needs to
// compute placement (the contract in api/placement/placement.go: ID and
// capacity) and to dial the owner.
type MemberInfo struct {
	ID            string
	Addr          string
	FaultDomain   string
	ProtoVersion  uint8
	CapacityBytes uint64
	Flags         MemberFlags
}

// MembersResponse (version 2) is a node's current view: the epoch and its
// members sorted by ID. The request body is empty.
//
//	u64 epoch | u32 n | n × (str id, str addr, str domain, u8 proto,
//	                         u64 capacity, u8 flags)
type MembersResponse struct {
	Epoch   uint64
	Members []MemberInfo
}

// AppendTo encodes m.
func (m *MembersResponse) AppendTo(b []byte) []byte {
	b = binary.LittleEndian.AppendUint64(b, m.Epoch)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(m.Members)))
	for i := range m.Members {
		x := &m.Members[i]
		b = appendString(b, x.ID)
		b = appendString(b, x.Addr)
		b = appendString(b, x.FaultDomain)
		b = append(b, x.ProtoVersion)
		b = binary.LittleEndian.AppendUint64(b, x.CapacityBytes)
		b = append(b, byte(x.Flags))
	}
	return b
}

// memberMinSize is the encoding of a member with empty strings.
const memberMinSize = 3*2 + 1 + 8 + 1

// Decode parses m from b. Every member needs a non-empty ID, address and
// fault domain, and a non-zero capacity; IDs must be strictly increasing.
func (m *MembersResponse) Decode(b []byte) error {
	r := reader{b: b}
	m.Epoch = r.u64()
	n := r.count(MaxMembers, memberMinSize)
	m.Members = m.Members[:0]
	for i := 0; i < n && r.err == nil; i++ {
		x := MemberInfo{ID: r.str(MaxStringLen), Addr: r.str(MaxStringLen), FaultDomain: r.str(MaxStringLen)}
		x.ProtoVersion = r.u8()
		x.CapacityBytes = r.u64()
		x.Flags = MemberFlags(r.u8())
		switch {
		case r.err != nil:
		case x.ID == "" || x.Addr == "" || x.FaultDomain == "":
			r.fail("member %d: empty id, address or fault domain", i)
		case x.CapacityBytes == 0:
			r.fail("member %q: zero capacity", x.ID)
		case x.ProtoVersion == 0:
			r.fail("member %q: protocol version 0", x.ID)
		case x.Flags&^memberKnown != 0:
			r.fail("member %q: unknown flags %#x", x.ID, uint8(x.Flags&^memberKnown))
		case i > 0 && x.ID <= m.Members[i-1].ID:
			r.fail("member %q out of order", x.ID)
		}
		m.Members = append(m.Members, x)
	}
	if r.err == nil && n > 0 && m.Epoch == 0 {
		r.fail("members under epoch 0")
	}
	return r.done()
}
