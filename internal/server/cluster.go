package server

import (
	"fmt"
	"sync/atomic"

	"github.com/gpucache/gpucache/api/identity"
	"github.com/gpucache/gpucache/api/wire"
	"github.com/gpucache/gpucache/internal/control"
	"github.com/gpucache/gpucache/internal/directory"
)

// ControlMode is how much a cluster node trusts its view of the cluster.
type ControlMode uint8

const (
	// ControlLive: the control plane (etcd) is reachable; the view is
	// current. The node serves reads and writes for the keys it owns.
	ControlLive ControlMode = iota
	// ControlReadOnly: the control plane is unreachable and the view may be
	// stale. The node keeps serving reads of the keys it owned under the
	// last known epoch, but stores nothing new: PUT answers READ_ONLY
	// (NO_SPACE to sessions before version 4) and
	// ACQUIRE answers DENIED (the engine recomputes, and no block lands on
	// a node that may no longer own it).
	ControlReadOnly
	// ControlUnknown: the control plane has been unreachable past the
	// grace period; the owner of every key is unknown. Every read is a
	// miss, PUT answers READ_ONLY (NO_SPACE before version 4) and ACQUIRE
	// answers DENIED.
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
//
// LOOKUP, GET, DELETE, ACQUIRE and PUT are checked, all keys against one
// view (one atomic load per request); one foreign key refuses the whole
// request. FILL_COMMIT, FILL_ABORT and WAIT are not: their tokens were
// granted by this node, and the directory's epoch fencing (AdvanceView)
// decides whether they still count, which lets a draining node finish its
// fills.
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
func (c *Cluster) Draining() bool { return c.state.Load().takesNoFill(c.self) }

// owns reports whether this node owns key under the current view.
func (st *clusterState) owns(self control.MemberID, key identity.BlockKey) bool {
	m, ok := control.Owner(st.view, key)
	return ok && m.ID == self
}

// FenceOnViewChange reports whether a new view v should fence this node's
// in-flight fills (directory.AdvanceEpoch): yes unless this node is
// draining in v, because a draining node finishes the fills it granted so
// that their blocks reach the cold tier before it leaves. A node absent
// from v (isolated with its fault domain, or its lease expired) fences: its
// keys have new owners, which coordinate their fills from now on.
func (c *Cluster) FenceOnViewChange(v control.View) bool {
	m, ok := v.Member(c.self)
	return !ok || !m.Draining
}

// takesNoFill reports whether this node starts no new fill under st's
// view: it is draining or absent. Version-2 sessions never reach it for
// such a node (it owns no key, so they get WRONG_EPOCH); version-1
// sessions, which are not routed, get DENIED for every block not cached.
func (st *clusterState) takesNoFill(self control.MemberID) bool {
	if st == nil {
		return false
	}
	m, ok := st.view.Member(self)
	return !ok || m.Draining
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

// clusterState is the cluster state one request sees: a single atomic
// load, so every key of the request is checked against one view under one
// mode even while the membership watch installs a new view. Nil without a
// cluster.
func (c *conn) clusterState() *clusterState {
	if cl := c.s.cfg.Cluster; cl != nil {
		return cl.state.Load()
	}
	return nil
}

// unknown reports whether no owner is known (ControlUnknown): every read
// is a miss and nothing is stored. A nil state (single node) knows.
func (st *clusterState) unknown() bool { return st != nil && st.mode == ControlUnknown }

// storesNothing reports whether the control mode forbids storing new
// blocks (read-only or unknown): PUT answers READ_ONLY (NO_SPACE before
// version 4) and ACQUIRE starts no
// fill, so no block lands on a node that may no longer own it.
func (st *clusterState) storesNothing() bool { return st != nil && st.mode != ControlLive }

// routes reports whether requests of this session are checked for
// ownership: only version-2 sessions can route (a version-1 client knows
// no placement and is served from the local hot tier), and in unknown mode
// there is no view to check against.
func (c *conn) routes(st *clusterState) bool {
	return st != nil && c.version >= wire.Version2 && st.mode != ControlUnknown
}

// resolve is the prologue of every handler whose request names a namespace
// and a batch of keys (LOOKUP, GET, DELETE, ACQUIRE, PUT, PUT_OPAQUE), run
// once the request is decoded: it resolves and authorises the namespace
// (namespace), loads the cluster state once, and checks that this node owns
// each of the n keys, key(i) the i-th, under that state (checkOwnedKeys).
// The handler decides its mode against the state it returns, the one the
// keys were checked against. The first failure is returned as is.
func (c *conn) resolve(op wire.Opcode, nsBlob []byte, n int, key func(i int) wire.Key) (identity.NamespaceDigest, *clusterState, error) {
	ns, err := c.namespace(op, nsBlob)
	if err != nil {
		return identity.NamespaceDigest{}, nil, err
	}
	st := c.clusterState()
	if err := c.checkOwnedKeys(st, n, key); err != nil {
		return identity.NamespaceDigest{}, nil, err
	}
	return ns, st, nil
}

// resolveKeys is resolve over a request's key list.
func (c *conn) resolveKeys(op wire.Opcode, nsBlob []byte, keys []wire.Key) (identity.NamespaceDigest, *clusterState, error) {
	return c.resolve(op, nsBlob, len(keys), func(i int) wire.Key { return keys[i] })
}

// checkOwnedKeys answers WRONG_EPOCH, with the view's epoch, when the
// session routes and some key of the n keys, key(i) the i-th, is not this
// node's under st's view. One foreign key refuses the whole request: the
// client's view is stale, so it refreshes and re-routes the whole batch
// rather than trusting any of its routing.
func (c *conn) checkOwnedKeys(st *clusterState, n int, key func(i int) wire.Key) error {
	if !c.routes(st) {
		return nil
	}
	for i := range n {
		if k := key(i); !st.owns(c.s.cfg.Cluster.self, k) {
			return c.wrongEpoch(st, k)
		}
	}
	return nil
}

func (c *conn) wrongEpoch(st *clusterState, key wire.Key) error {
	c.s.stats.wrongEpoch.Add(1)
	owner := "no member"
	if m, ok := control.Owner(st.view, key); ok {
		owner = fmt.Sprintf("member %s at %s", m.ID, m.Addr)
	}
	return &wire.Error{Code: wire.CodeWrongEpoch, Epoch: st.view.Epoch(),
		Message: fmt.Sprintf("key %x.. is owned by %s under epoch %d, not by %s", key[:4], owner, st.view.Epoch(), c.s.cfg.Cluster.self)}
}

// refusePut answers a PUT or PUT_OPAQUE of n blocks in read-only or
// unknown mode: READ_ONLY for every block (NO_SPACE to a session of a
// version before 4, which does not know READ_ONLY), storing none and
// discarding the rest payload bytes so the stream stays in sync.
func (c *conn) refusePut(h wire.Header, rest int64, n int) error {
	c.shrink() // the table is not needed while the payloads are skipped
	if err := c.skip(rest); err != nil {
		c.release()
		return err
	}
	c.s.stats.modeRefused.Add(uint64(n))
	status := wire.StatusReadOnly
	if c.version < status.Since() {
		status = wire.StatusNoSpace
	}
	resp := wire.StatusResponse{Statuses: c.statuses[:0]}
	for range n {
		resp.Statuses = append(resp.Statuses, status)
	}
	c.statuses = resp.Statuses
	c.reply(h, &resp)
	return nil
}

// refuseAcquire answers an ACQUIRE in read-only or unknown mode, or on a
// node that is draining or out of the view: no fill starts, because its
// block could land on a node that no longer owns it (or is leaving). A
// block already cached is still a hit unless the mode is unknown (reads are
// served); every other entry is DENIED, so the engine computes the block
// itself.
func (c *conn) refuseAcquire(st *clusterState, ns identity.NamespaceDigest, keys []wire.Key, entries []wire.AcquireEntry) {
	one := make([]identity.BlockKey, 1)
	var refused uint64
	for i := range keys {
		entries[i] = wire.AcquireEntry{Outcome: wire.AcquireDenied}
		if st.mode != ControlUnknown {
			one[0] = keys[i]
			if hits, _, _ := c.s.store.Lookup(ns, one, 0, false); hits == 1 {
				entries[i].Outcome = wire.AcquireHit
				continue
			}
		}
		refused++
	}
	c.s.stats.modeRefused.Add(refused)
}

// handleMembers answers MEMBERS with the current view: its epoch and its
// members sorted by ID. A server without a cluster answers epoch 0 and no
// member, which tells a client "single node, not a cluster".
func (c *conn) handleMembers(h wire.Header, body []byte) error {
	if len(body) != 0 {
		return wire.Errorf(wire.CodeMalformed, "MEMBERS takes no body")
	}
	var resp wire.MembersResponse
	if st := c.clusterState(); st != nil && st.view.Epoch() > 0 {
		// Members under epoch 0 cannot be encoded: epoch 0 means no cluster.
		ms := st.view.Members()
		if len(ms) > wire.MaxMembers {
			return wire.Errorf(wire.CodeInternal, "view of %d members exceeds %d", len(ms), wire.MaxMembers)
		}
		resp.Epoch = st.view.Epoch()
		resp.Members = make([]wire.MemberInfo, len(ms))
		for i, m := range ms {
			x := wire.MemberInfo{ID: string(m.ID), Addr: m.Addr, FaultDomain: m.FaultDomain,
				ProtoVersion: m.ProtoVersion, CapacityBytes: m.CapacityBytes}
			if x.ProtoVersion == 0 {
				// A member that recorded no version speaks at least the
				// first one; 0 is not a version on the wire.
				x.ProtoVersion = wire.Version1
			}
			if m.Draining {
				x.Flags |= wire.MemberDraining
			}
			resp.Members[i] = x
		}
	}
	c.reply(h, &resp)
	return nil
}
