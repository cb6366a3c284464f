package client

import (
	"context"
	"errors"
	"fmt"

	"github.com/gpucache/gpucache/api/placement"
	"github.com/gpucache/gpucache/api/wire"
)

// View is a node's view of the cluster, as MEMBERS returns it: the epoch
// and the members sorted by ID. Epoch 0 with no members is a single node
// that is not part of a cluster: it owns every key.
type View struct {
	Epoch   uint64
	Members []Member
}

// Member is one node of a cluster view: what a client needs to compute
// which node owns a key (ID and capacity, see Cluster) and to dial it.
type Member struct {
	ID           string
	Addr         string // address clients dial
	FaultDomain  string
	ProtoVersion uint8 // highest protocol version the node speaks
	// CapacityBytes is the node's hot-tier capacity; its share of the keys
	// is proportional to it.
	CapacityBytes uint64
	// Draining: the node is leaving. It owns no key, but finishes the
	// fills it granted.
	Draining bool
}

// Members asks the server for its view of the cluster (MEMBERS). A server
// that is not part of a cluster answers epoch 0 and no members. A server
// that speaks only protocol version 1 has no MEMBERS: Members then fails
// with ErrUnsupported without sending anything.
func (c *Client) Members(ctx context.Context) (View, error) {
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	cn, err := c.pick(ctx)
	if err != nil {
		return View{}, err
	}
	if cn.version < wire.Version2 {
		return View{}, fmt.Errorf("%w: MEMBERS needs protocol version 2; %s speaks %d", ErrUnsupported, c.cfg.Addr, cn.version)
	}
	r := &request{}
	r.op, r.enc = wire.OpMembers, func(b []byte) []byte { return b }
	c.exec(ctx, []*request{r}, cn)
	if r.err != nil {
		if errors.Is(r.err, &wire.Error{Code: wire.CodeUnknownOpcode}) {
			// The connection was redialed to a server of version 1.
			return View{}, fmt.Errorf("%w: %w", ErrUnsupported, r.err)
		}
		return View{}, r.err
	}
	var resp wire.MembersResponse
	if err := resp.Decode(r.cl.body); err != nil {
		return View{}, fmt.Errorf("%w: MEMBERS answer: %w", ErrProtocol, err)
	}
	v := View{Epoch: resp.Epoch, Members: make([]Member, len(resp.Members))}
	for i, m := range resp.Members {
		v.Members[i] = Member{ID: m.ID, Addr: m.Addr, FaultDomain: m.FaultDomain, ProtoVersion: m.ProtoVersion,
			CapacityBytes: m.CapacityBytes, Draining: m.Flags&wire.MemberDraining != 0}
	}
	return v, nil
}

// controlView converts v to api/placement's view, whose placement
// (placement.Route, placement.Owner) is the one every node checks ownership
// with.
func controlView(v View) (placement.View, error) {
	ms := make([]placement.Member, len(v.Members))
	for i, m := range v.Members {
		ms[i] = placement.Member{ID: placement.MemberID(m.ID), Addr: m.Addr, FaultDomain: m.FaultDomain,
			ProtoVersion: m.ProtoVersion, CapacityBytes: m.CapacityBytes, Draining: m.Draining}
	}
	cv, err := placement.NewView(v.Epoch, ms)
	if err != nil {
		return placement.View{}, fmt.Errorf("%w: view of epoch %d: %w", ErrProtocol, v.Epoch, err)
	}
	return cv, nil
}
