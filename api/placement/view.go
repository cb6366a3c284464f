package placement

import (
	"errors"
	"fmt"
	"sort"
)

// Sentinel errors of NewView. Callers test them with errors.Is; the
// wrapped message says which member was at fault.
var (
	// ErrInvalidMember: a member has an empty ID, address or fault domain,
	// or no capacity.
	ErrInvalidMember = errors.New("gpucache/placement: invalid member")
	// ErrDuplicateMember: two members share an ID (the control plane also
	// returns it when a join names an ID that is already a member).
	ErrDuplicateMember = errors.New("gpucache/placement: duplicate member id")
)

// MemberID names a node. It is stable across restarts of the node and is
// the input of the node's placement seed, so renaming a node moves its keys.
type MemberID string

// Member is one node of the cluster, as it registers itself.
type Member struct {
	ID            MemberID
	Addr          string // advertised address clients dial
	FaultDomain   string // rack, host or zone; isolation acts on a whole domain
	ProtoVersion  uint8  // wire protocol version the node speaks
	CapacityBytes uint64 // hot-tier capacity; > 0; the placement weight derives from it
	// Draining: the node takes no new fills. A draining member stays in the
	// view (it finishes in-flight fills) but owns no keys.
	Draining bool
}

// Weight is the member's placement weight: its capacity in GiB, as a
// float64. Only ratios matter; scaling by a power of two is exact, so the
// GiB unit changes no placement decision.
func (m Member) Weight() float64 { return float64(m.CapacityBytes) / (1 << 30) }

func (m Member) validate() error {
	switch {
	case m.ID == "":
		return fmt.Errorf("%w: empty id", ErrInvalidMember)
	case m.Addr == "":
		return fmt.Errorf("%w: member %q: empty address", ErrInvalidMember, m.ID)
	case m.FaultDomain == "":
		return fmt.Errorf("%w: member %q: empty fault domain", ErrInvalidMember, m.ID)
	case m.CapacityBytes == 0:
		return fmt.Errorf("%w: member %q: zero capacity", ErrInvalidMember, m.ID)
	}
	return nil
}

// slot is the per-member placement state of an active (non-draining) member.
type slot struct {
	seed   uint64
	weight float64
	idx    int // index into View.members
}

// View is an immutable snapshot of the member set under one epoch. Members
// are sorted by ID (byte order). The zero View has epoch 0 and no members;
// it owns no key.
type View struct {
	epoch   uint64
	members []Member
	slots   []slot // active members, in ID order
}

// NewView validates members and returns a view of a sorted copy of them.
// IDs must be unique; every member needs an ID, an address, a fault domain
// and a non-zero capacity.
func NewView(epoch uint64, members []Member) (View, error) {
	ms := make([]Member, len(members))
	copy(ms, members)
	for _, m := range ms {
		if err := m.validate(); err != nil {
			return View{}, err
		}
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].ID < ms[j].ID })
	for i := 1; i < len(ms); i++ {
		if ms[i].ID == ms[i-1].ID {
			return View{}, fmt.Errorf("%w: %q", ErrDuplicateMember, ms[i].ID)
		}
	}
	v := View{epoch: epoch, members: ms}
	for i, m := range ms {
		if !m.Draining {
			v.slots = append(v.slots, slot{seed: MemberSeed(m.ID), weight: m.Weight(), idx: i})
		}
	}
	return v, nil
}

// Epoch is the view's epoch.
func (v View) Epoch() uint64 { return v.epoch }

// Len is the number of members, draining ones included.
func (v View) Len() int { return len(v.members) }

// Members returns a copy of the members, sorted by ID.
func (v View) Members() []Member {
	out := make([]Member, len(v.members))
	copy(out, v.members)
	return out
}

// Member returns the member with the given ID.
func (v View) Member(id MemberID) (Member, bool) {
	i := sort.Search(len(v.members), func(i int) bool { return v.members[i].ID >= id })
	if i < len(v.members) && v.members[i].ID == id {
		return v.members[i], true
	}
	return Member{}, false
}

// Domains returns the distinct fault domains, sorted.
func (v View) Domains() []string {
	seen := map[string]bool{}
	var out []string
	for _, m := range v.members {
		if !seen[m.FaultDomain] {
			seen[m.FaultDomain] = true
			out = append(out, m.FaultDomain)
		}
	}
	sort.Strings(out)
	return out
}

// MinProtoVersion is the lowest protocol version among the members (0 for
// an empty view): the version a mixed-version cluster must speak.
func (v View) MinProtoVersion() uint8 {
	if len(v.members) == 0 {
		return 0
	}
	lo := v.members[0].ProtoVersion
	for _, m := range v.members[1:] {
		if m.ProtoVersion < lo {
			lo = m.ProtoVersion
		}
	}
	return lo
}
