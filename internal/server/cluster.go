package server

import (
	"sync/atomic"

	"github.com/gpucache/gpucache/internal/control"
	"github.com/gpucache/gpucache/internal/directory"
	"github.com/gpucache/gpucache/internal/identity"
)

// ControlMode is how much a cluster node trusts its view of the cluster.
type ControlMode uint8

const (
	// ControlLive: the control plane (etcd) is reachable; the view is
	// current. The node serves reads and writes for the keys it owns.
	ControlLive ControlMode = iota
	// ControlReadOnly: the control plane is unreachable and the view may be
	// stale. The node keeps serving reads of the keys it owned under the
	// last known epoch, but stores nothing new: PUT answers NO_SPACE and
	// ACQUIRE answers DENIED (the engine recomputes, and no block lands on
	// a node that may no longer own it).
	ControlReadOnly
	// ControlUnknown: the control plane has been unreachable past the
	// grace period; the owner of every key is unknown. Every read is a
	// miss, PUT answers NO_SPACE and ACQUIRE answers DENIED.
	ControlUnknown
)

func (m ControlMode) String() string {
	switch m {
	case ControlLive:
		return "live"
	case ControlReadOnly:
		return "read-only"
	case ControlUnknown:
		return "unknown"
	}
	return "invalid"
}

// Cluster is a node's cluster state: its member ID, the current view and
// the control mode. The daemon feeds it from the membership watch
// (SetView) and from its control-plane health probe (SetMode); the server
// reads it on every request without locking.
//
// With a Cluster, the server answers a version-2 session's request for a
// key it does not own under the current view with WRONG_EPOCH (carrying
// the view's epoch), and answers MEMBERS with the view. Version-1 sessions
// (clients that cannot route) are served from the local hot tier without
// ownership checks; the control mode applies to every session.
type Cluster struct {
	self  control.MemberID
	state atomic.Pointer[clusterState]
}

type clusterState struct {
	view control.View
	mode ControlMode
}

// NewCluster returns the cluster state of member self under view v, in
// ControlLive mode.
func NewCluster(self control.MemberID, v control.View) *Cluster {
	c := &Cluster{self: self}
	c.state.Store(&clusterState{view: v, mode: ControlLive})
	return c
}

// Self is this node's member ID.
func (c *Cluster) Self() control.MemberID { return c.self }

// View is the current view.
func (c *Cluster) View() control.View { return c.state.Load().view }

// Mode is the current control mode.
func (c *Cluster) Mode() ControlMode { return c.state.Load().mode }

// SetView installs v if its epoch is newer than the current view's and
// reports whether it did. An older or equal epoch is ignored (watchers may
// race; epochs only grow).
func (c *Cluster) SetView(v control.View) bool {
	for {
		old := c.state.Load()
		if v.Epoch() <= old.view.Epoch() {
			return false
		}
		if c.state.CompareAndSwap(old, &clusterState{view: v, mode: old.mode}) {
			return true
		}
	}
}

// SetMode sets the control mode.
func (c *Cluster) SetMode(m ControlMode) {
	for {
		old := c.state.Load()
		if old.mode == m || c.state.CompareAndSwap(old, &clusterState{view: old.view, mode: m}) {
			return
		}
	}
}

// Draining reports whether this node is draining in the current view (or
// absent from it): it owns no key and takes no new fill.
func (c *Cluster) Draining() bool {
	m, ok := c.View().Member(c.self)
	return !ok || m.Draining
}

// owns reports whether this node owns key under the current view.
func (st *clusterState) owns(self control.MemberID, key identity.BlockKey) bool {
	m, ok := control.Owner(st.view, key)
	return ok && m.ID == self
}

// FenceOnViewChange reports whether a new view v should fence this node's
// in-flight fills (directory.AdvanceEpoch): yes unless this node is
// draining in v, because a draining node finishes the fills it granted so
// that their blocks reach the cold tier before it leaves.
func (c *Cluster) FenceOnViewChange(v control.View) bool {
	m, ok := v.Member(c.self)
	return ok && !m.Draining
}

// AdvanceView installs v (SetView) and, when it is newer and this node is
// not draining in it, advances the server's directory to v's epoch so that
// fills granted under an older epoch are fenced. It returns how many fills
// were fenced. The daemon calls it for every view the membership watch
// delivers.
func (s *Server) AdvanceView(v control.View) (fenced int, err error) {
	c := s.cfg.Cluster
	if c == nil || !c.SetView(v) {
		return 0, nil
	}
	if !c.FenceOnViewChange(v) {
		return 0, nil
	}
	to := directory.Epoch(v.Epoch())
	if to <= s.dir.Epoch() {
		return 0, nil
	}
	return s.dir.AdvanceEpoch(to)
}

// InFlightFills is the number of fills this node's directory is tracking;
// a draining node waits for it to reach zero before it leaves.
func (s *Server) InFlightFills() int { return s.dir.Stats().Fills }
