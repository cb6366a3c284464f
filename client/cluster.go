package client

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpucache/gpucache/api/placement"
)

// DefaultRefreshInterval is ClusterConfig.RefreshInterval's default.
const DefaultRefreshInterval = 2 * time.Second

// nodeBackoff is how long after a node could not be reached (its dial
// failed, or its connection was lost) the batches routed to it degrade at
// once instead of dialing again: a node that does not answer would
// otherwise cost every batch a dial timeout.
const nodeBackoff = 500 * time.Millisecond

// errNoOwner is the reason of keys that no member owns: every member of
// the view is draining.
var errNoOwner = fmt.Errorf("%w: no active member owns the key", ErrUnavailable)

// ClusterConfig configures a Cluster.
type ClusterConfig struct {
	// Seeds are the addresses of any nodes of the cluster (at least one).
	// The view is fetched from them (MEMBERS); after that the members of
	// the view are asked first.
	Seeds []string
	// Node is the template of the Client of each member: Addr is replaced
	// by the member's address, every other field (tenant, credentials,
	// TLS, Conns, timeouts) applies to every node. Defaults as for Dial.
	Node Config
	// RefreshInterval is how often the view is fetched again in the
	// background. Default DefaultRefreshInterval (2s); negative disables
	// it (a WRONG_EPOCH answer still triggers a refresh).
	RefreshInterval time.Duration
}

// ClusterStats are a Cluster's counters.
type ClusterStats struct {
	// WrongEpoch counts per-node batches refused with WRONG_EPOCH (the
	// node's view is newer than, or disagrees with, the client's).
	WrongEpoch uint64
	// Retries counts refused batches sent again, once, after a refresh.
	Retries uint64
	// Refreshes counts fetches of the view (the first, by DialCluster,
	// included).
	Refreshes uint64
	// RoutedBatches counts per-node batches sent.
	RoutedBatches uint64
	// Unreachable counts per-node batches whose owner could not be reached
	// (its dial failed or its connection was lost); their keys degraded.
	Unreachable uint64
}

// Cluster is a client of a gpucache cluster: it fetches the cluster's view
// (MEMBERS), splits every batch by the owner of each key and sends the
// parts to their owners in parallel, over one Client per member, dialed
// lazily. Placement is the cluster's own (api/placement: weighted
// rendezvous hashing over the view's active members), so a client and the
// nodes agree on the owner of every key under the same epoch.
//
// A node that does not own a key under its own, newer view refuses the
// request with WRONG_EPOCH. The Cluster then fetches the view again (from
// that node first: its epoch is at least the one it refused with),
// re-routes the refused keys and sends them once more. A second refusal,
// an unreachable owner or any other failure degrades instead of failing:
// Get answers misses, Put answers StatusNoSpace, Lookup's run stops, and
// GetOrFill computes the blocks itself. Nothing degrades into a wrong
// payload: a node serves a key only if it owns it, and blocks are verified
// against their identities as with a Client.
//
// A view of epoch 0 (the seeds are single nodes, not a cluster) or seeds
// that speak only protocol version 1 make the Cluster route everything to
// one seed: it then behaves as a Client of that node. A member of version 1
// in a mixed-version cluster is still routed to by placement; its session
// is of version 1 and never answers WRONG_EPOCH.
//
// A Cluster is safe for concurrent use. Every call honours its context: a
// context without a deadline gets Node.RequestTimeout (GetOrFill excepted,
// as for a Client), and dialing a member is bounded by the context and
// Node.DialTimeout.
type Cluster struct {
	cfg ClusterConfig

	route atomic.Pointer[routing] // current routing; nil until the first fetch
	mu    sync.Mutex
	nodes map[string]*node // guarded by mu; by address

	// refreshing (capacity 1) serialises view fetches: a burst of
	// WRONG_EPOCH answers costs one fetch, the others find the view new
	// enough once they get their turn.
	refreshing chan struct{}
	closed     atomic.Bool
	stop       context.CancelFunc
	loopDone   chan struct{}

	stats struct {
		wrongEpoch, retries, refreshes, routed, unreachable atomic.Uint64
	}
	leases clusterLeases // the leases Lookup handed out (cache.go)
}

// routing is one immutable routing state: a cluster view, or the single
// node every key goes to.
type routing struct {
	view   placement.View
	pub    View
	single string // address of the single node; "" under a cluster view
}

// node is the Client of one member address, dialed on first use.
type node struct {
	addr string
	dial chan struct{} // capacity 1: held while dialing

	mu       sync.Mutex
	client   *Client   // guarded by mu; nil until dialed
	closed   bool      // guarded by mu
	failedAt time.Time // guarded by mu; when it was last found unreachable
	failErr  error     // guarded by mu; why
}

// DialCluster fetches the view from the seeds and returns a Cluster that
// routes by it. It fails with ErrInvalid without seeds or with an invalid
// Node config, and with ErrUnavailable when no seed answers.
func DialCluster(ctx context.Context, cfg ClusterConfig) (*Cluster, error) {
	if len(cfg.Seeds) == 0 {
		return nil, fmt.Errorf("%w: a cluster needs at least one seed", ErrInvalid)
	}
	cfg.Seeds = slices.Clone(cfg.Seeds)
	cfg.Node.applyDefaults()
	if err := cfg.Node.Validate(); err != nil {
		return nil, err
	}
	if cfg.RefreshInterval == 0 {
		cfg.RefreshInterval = DefaultRefreshInterval
	}
	c := &Cluster{cfg: cfg, nodes: make(map[string]*node), refreshing: make(chan struct{}, 1)}
	if err := c.refresh(ctx, "", 1); err != nil {
		c.Close()
		return nil, err
	}
	if cfg.RefreshInterval > 0 {
		lctx, stop := context.WithCancel(context.Background())
		c.stop, c.loopDone = stop, make(chan struct{})
		go c.refreshLoop(lctx)
	}
	return c, nil
}

// Close stops the background refresh and closes every node's Client.
// Calls in flight degrade; later calls fail with ErrClosed. Close is
// idempotent.
func (c *Cluster) Close() error {
	if c.closed.Swap(true) {
		return nil
	}
	if c.stop != nil {
		c.stop()
		<-c.loopDone
	}
	c.mu.Lock()
	nodes := c.nodes
	c.nodes = map[string]*node{}
	c.mu.Unlock()
	for _, n := range nodes {
		n.close()
	}
	return nil
}

// View returns the current view: epoch 0 and no members while the Cluster
// routes everything to a single node.
func (c *Cluster) View() View {
	rt := c.route.Load()
	if rt == nil {
		return View{}
	}
	return View{Epoch: rt.pub.Epoch, Members: slices.Clone(rt.pub.Members)}
}

// Owner returns the member that owns key under the current view, by the
// placement every node checks ownership with; false while the Cluster
// routes everything to a single node or no member is active.
func (c *Cluster) Owner(key BlockKey) (Member, bool) {
	rt := c.route.Load()
	if rt == nil || rt.single != "" {
		return Member{}, false
	}
	m, ok := placement.Owner(rt.view, key)
	if !ok {
		return Member{}, false
	}
	for _, pm := range rt.pub.Members {
		if pm.ID == string(m.ID) {
			return pm, true
		}
	}
	return Member{}, false
}

// Stats returns the Cluster's counters.
func (c *Cluster) Stats() ClusterStats {
	return ClusterStats{
		WrongEpoch:    c.stats.wrongEpoch.Load(),
		Retries:       c.stats.retries.Load(),
		Refreshes:     c.stats.refreshes.Load(),
		RoutedBatches: c.stats.routed.Load(),
		Unreachable:   c.stats.unreachable.Load(),
	}
}

func (c *Cluster) withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, c.cfg.Node.RequestTimeout)
}

// check refuses calls on a closed Cluster and invalid namespaces up front,
// so that they do not read as unreachable nodes.
func (c *Cluster) check(ns Namespace) error {
	if c.closed.Load() {
		return ErrClosed
	}
	if err := ns.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return nil
}
