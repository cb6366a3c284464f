package control

import (
	"github.com/gpucache/gpucache/api/identity"
	"github.com/gpucache/gpucache/api/placement"
)

// The view and the placement contract live in the public package
// api/placement, which the client module shares with the nodes (ADR 0028):
// one implementation, so a client and a node cannot compute different
// owners. These names keep the control plane's vocabulary.

// MemberID names a node (placement.MemberID).
type MemberID = placement.MemberID

// Member is one node of the cluster, as it registers itself
// (placement.Member).
type Member = placement.Member

// View is an immutable snapshot of the member set under one epoch
// (placement.View).
type View = placement.View

// NewView validates members and returns a view of a sorted copy of them
// (placement.NewView).
func NewView(epoch uint64, members []Member) (View, error) {
	return placement.NewView(epoch, members)
}

// MemberSeed is the per-member placement seed (placement.MemberSeed).
func MemberSeed(id MemberID) uint64 { return placement.MemberSeed(id) }

// Score is the weighted rendezvous score (placement.Score).
func Score(seed uint64, weight float64, k uint64) float64 { return placement.Score(seed, weight, k) }

// Owner is the member that owns key under v (placement.Owner).
func Owner(v View, key identity.BlockKey) (Member, bool) { return placement.Owner(v, key) }

// Route splits a batch by owner (placement.Route).
func Route(v View, keys []identity.BlockKey) map[MemberID][]int { return placement.Route(v, keys) }
