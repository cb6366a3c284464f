package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpucache/gpucache/internal/control"
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
// lazily. Placement is the cluster's own (internal/control: weighted
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
	view   control.View
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
	m, ok := control.Owner(rt.view, key)
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

// Refresh fetches the view again: it asks the members of the current view
// (then the seeds) in turn and installs the first view at least as new as
// the current one, or the newest it got. Views only move forward: an older
// epoch is ignored. It fails only when no node answered.
func (c *Cluster) Refresh(ctx context.Context) error {
	if c.closed.Load() {
		return ErrClosed
	}
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	want := uint64(1)
	if rt := c.route.Load(); rt != nil {
		want = max(want, rt.view.Epoch())
	}
	return c.refresh(ctx, "", want)
}

func (c *Cluster) refreshLoop(ctx context.Context) {
	defer close(c.loopDone)
	t := time.NewTicker(c.cfg.RefreshInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		rctx, cancel := context.WithTimeout(ctx, c.cfg.Node.DialTimeout+c.cfg.Node.RequestTimeout)
		if err := c.Refresh(rctx); err != nil && ctx.Err() == nil {
			c.cfg.Node.Logger.Debug("gpucache cluster: view refresh failed", "err", err)
		}
		cancel()
	}
}

// refreshAfter makes the view at least as new as epoch want, which node
// hint refused a batch with: unless a concurrent refresh already got there,
// it fetches the view, from hint first.
func (c *Cluster) refreshAfter(ctx context.Context, hint string, want uint64) {
	if err := c.refresh(ctx, hint, want); err != nil {
		c.cfg.Node.Logger.Debug("gpucache cluster: view refresh after WRONG_EPOCH failed", "node", hint, "err", err)
	}
}

// refresh fetches MEMBERS from hint, then the current members, then the
// seeds, until one answers a view of epoch >= want; it installs the newest
// view it got. Nodes that answer epoch 0 or speak only version 1 make the
// first of them the single node, unless a cluster view is known.
func (c *Cluster) refresh(ctx context.Context, hint string, want uint64) error {
	select {
	case c.refreshing <- struct{}{}:
	case <-ctx.Done():
		return ctxError(ctx)
	}
	defer func() { <-c.refreshing }()
	cur := c.route.Load()
	if hint != "" && cur != nil && cur.single == "" && cur.view.Epoch() >= want {
		return nil // a concurrent refresh got there first
	}
	c.stats.refreshes.Add(1)
	var candidates []string
	seen := map[string]bool{}
	add := func(addr string) {
		if addr != "" && !seen[addr] {
			seen[addr] = true
			candidates = append(candidates, addr)
		}
	}
	add(hint)
	if cur != nil {
		add(cur.single)
		for _, m := range cur.pub.Members {
			if !m.Draining {
				add(m.Addr)
			}
		}
		for _, m := range cur.pub.Members {
			add(m.Addr)
		}
	}
	for _, s := range c.cfg.Seeds {
		add(s)
	}
	var best *routing
	var single string
	var firstErr error
	for _, addr := range candidates {
		if ctx.Err() != nil {
			break
		}
		v, err := c.fetchView(ctx, addr)
		switch {
		case errors.Is(err, ErrUnsupported) || err == nil && v.Epoch == 0:
			if single == "" {
				single = addr
			}
			continue
		case err != nil:
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		cv, err := controlView(v)
		if err != nil {
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		if best == nil || cv.Epoch() > best.view.Epoch() {
			best = &routing{view: cv, pub: v}
		}
		if cv.Epoch() >= want {
			break
		}
	}
	switch {
	case best != nil:
		c.install(best)
	case single != "":
		c.install(&routing{single: single})
	default:
		if firstErr == nil {
			firstErr = ctxError(ctx)
		}
		return fmt.Errorf("%w: no node answered MEMBERS: %w", ErrUnavailable, firstErr)
	}
	return nil
}

func (c *Cluster) fetchView(ctx context.Context, addr string) (View, error) {
	n, err := c.client(ctx, addr)
	if err != nil {
		return View{}, err
	}
	v, err := n.Members(ctx)
	if errors.Is(err, ErrUnavailable) {
		c.markDown(addr, err)
	}
	return v, err
}

// install makes rt the routing if it is newer: a cluster view replaces the
// single-node fallback and older views, never the other way round. The
// Clients of addresses the new routing does not use are closed.
func (c *Cluster) install(rt *routing) {
	c.mu.Lock()
	cur := c.route.Load()
	if cur != nil {
		switch {
		case rt.single != "" && cur.single == "":
			c.mu.Unlock()
			return
		case rt.single == "" && cur.single == "" && rt.view.Epoch() <= cur.view.Epoch():
			c.mu.Unlock()
			return
		}
	}
	c.route.Store(rt)
	keep := map[string]bool{rt.single: rt.single != ""}
	for _, m := range rt.pub.Members {
		keep[m.Addr] = true
	}
	var gone []*node
	for addr, n := range c.nodes {
		if !keep[addr] {
			delete(c.nodes, addr)
			gone = append(gone, n)
		}
	}
	c.mu.Unlock()
	for _, n := range gone {
		n.close()
	}
}

// client returns the Client of addr, dialing it on first use. While the
// node is in its backoff after a failure, it returns that failure at once.
func (c *Cluster) client(ctx context.Context, addr string) (*Client, error) {
	if c.closed.Load() {
		return nil, ErrClosed
	}
	c.mu.Lock()
	if c.closed.Load() {
		// Close has taken (or is taking) the map: a node added now would
		// never be closed.
		c.mu.Unlock()
		return nil, ErrClosed
	}
	n := c.nodes[addr]
	if n == nil {
		n = &node{addr: addr, dial: make(chan struct{}, 1)}
		c.nodes[addr] = n
	}
	c.mu.Unlock()
	if cl, err := n.ready(); cl != nil || err != nil {
		return cl, err
	}
	select {
	case n.dial <- struct{}{}:
	case <-ctx.Done():
		return nil, ctxError(ctx)
	}
	defer func() { <-n.dial }()
	if cl, err := n.ready(); cl != nil || err != nil {
		return cl, err
	}
	cfg := c.cfg.Node
	cfg.Addr = addr
	cl, err := Dial(ctx, cfg)
	n.mu.Lock()
	defer n.mu.Unlock()
	switch {
	case err != nil:
		if ctx.Err() == nil {
			n.failedAt, n.failErr = time.Now(), err
		}
		return nil, err
	case n.closed: // the member left the view (or Close) while we dialed
		cl.Close()
		return nil, ErrClosed
	}
	n.client = cl
	return cl, nil
}

// ready returns the node's Client, or the error of its backoff, or
// neither when it must be dialed.
func (n *node) ready() (*Client, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	switch {
	case n.closed:
		return nil, ErrClosed
	case time.Since(n.failedAt) < nodeBackoff:
		return nil, n.failErr
	}
	return n.client, nil
}

func (n *node) close() {
	n.mu.Lock()
	cl := n.client
	n.client, n.closed = nil, true
	n.mu.Unlock()
	if cl != nil {
		cl.Close()
	}
}

// markDown starts addr's backoff: its connection failed.
func (c *Cluster) markDown(addr string, err error) {
	c.mu.Lock()
	n := c.nodes[addr]
	c.mu.Unlock()
	if n != nil {
		n.mu.Lock()
		n.failedAt, n.failErr = time.Now(), err
		n.mu.Unlock()
	}
}

func (c *Cluster) withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, c.cfg.Node.RequestTimeout)
}

// sent is what a batch to one node came to.
type sent struct {
	moved []int  // indices the node refused with WRONG_EPOCH
	epoch uint64 // the epoch it refused them with
	down  error  // non-nil: the node could not be reached
}

// note records key i's failure err: a WRONG_EPOCH refusal (moved is true)
// or an unreachable node. Other errors are the caller's to record.
func (s *sent) note(i int, err error) (moved bool) {
	if e, ok := WrongEpoch(err); ok {
		s.moved, s.epoch = append(s.moved, i), e
		return true
	}
	if errors.Is(err, ErrUnavailable) {
		s.down = err
	}
	return false
}

// batchOp is one operation spread over the owners. send sends the keys at
// idx to node n and records their outcome (a refused key is recorded as
// degraded, and overwritten if a retry succeeds); last is true for the
// retry after a refresh. fail records keys whose owner could not be
// reached, or that have none. Both run concurrently for disjoint idx.
type batchOp struct {
	send func(ctx context.Context, n *Client, idx []int, last bool) sent
	fail func(ctx context.Context, idx []int, err error)
}

// dispatch routes every key and runs op on each owner in parallel.
func (c *Cluster) dispatch(ctx context.Context, keys []BlockKey, op batchOp) {
	idx := make([]int, len(keys))
	for i := range idx {
		idx[i] = i
	}
	c.sendGroups(ctx, c.route.Load(), keys, idx, op, false)
}

// sendGroups splits idx by owner under rt and sends each group.
func (c *Cluster) sendGroups(ctx context.Context, rt *routing, keys []BlockKey, idx []int, op batchOp, last bool) {
	groups, orphans := groupByOwner(rt, keys, idx)
	if len(orphans) > 0 {
		op.fail(ctx, orphans, errNoOwner)
	}
	if len(groups) == 1 {
		for addr, g := range groups {
			c.sendGroup(ctx, addr, keys, g, op, last)
		}
		return
	}
	var wg sync.WaitGroup
	for addr, g := range groups {
		wg.Go(func() { c.sendGroup(ctx, addr, keys, g, op, last) })
	}
	wg.Wait()
}

// sendGroup sends one owner's keys; those it refuses with WRONG_EPOCH are
// re-routed under a refreshed view and sent again, once.
func (c *Cluster) sendGroup(ctx context.Context, addr string, keys []BlockKey, idx []int, op batchOp, last bool) {
	n, err := c.client(ctx, addr)
	if err != nil {
		if ctx.Err() == nil && !errors.Is(err, ErrClosed) {
			c.stats.unreachable.Add(1)
		}
		op.fail(ctx, idx, err)
		return
	}
	c.stats.routed.Add(1)
	s := op.send(ctx, n, idx, last)
	if s.down != nil && ctx.Err() == nil {
		c.stats.unreachable.Add(1)
		c.markDown(addr, s.down)
	}
	if len(s.moved) == 0 {
		return
	}
	c.stats.wrongEpoch.Add(1)
	if last {
		return // refused twice: send recorded them degraded
	}
	c.refreshAfter(ctx, addr, s.epoch)
	if ctx.Err() != nil {
		return
	}
	c.stats.retries.Add(1)
	c.sendGroups(ctx, c.route.Load(), keys, s.moved, op, true)
}

// groupByOwner maps each owner's address to its keys' indices (ascending),
// and returns the keys no member owns.
func groupByOwner(rt *routing, keys []BlockKey, idx []int) (groups map[string][]int, orphans []int) {
	if rt.single != "" {
		return map[string][]int{rt.single: idx}, nil
	}
	sub := make([]BlockKey, len(idx))
	for k, i := range idx {
		sub[k] = keys[i]
	}
	groups = make(map[string][]int)
	for id, ks := range control.Route(rt.view, sub) {
		m, _ := rt.view.Member(id)
		g := groups[m.Addr]
		for _, k := range ks {
			g = append(g, idx[k])
		}
		groups[m.Addr] = g
	}
	if len(groups) == 0 {
		return nil, idx // no active member: Route gives every key to none
	}
	for addr, g := range groups {
		slices.Sort(g) // two members at one address: merge in order
		groups[addr] = g
	}
	return groups, nil
}

// failedAll returns st, or, when the call failed before sending anything
// (st nil), statuses for a call whose every block failed with err.
func failedAll(st []Status, errs []error, err error) []Status {
	if st != nil {
		return st
	}
	st = make([]Status, len(errs))
	for k := range errs {
		st[k], errs[k] = StatusMiss, err
	}
	return st
}

func pickKeys(keys []BlockKey, idx []int) []BlockKey {
	out := make([]BlockKey, len(idx))
	for k, i := range idx {
		out[k] = keys[i]
	}
	return out
}

// Get reads blocks from their owners. Like Client.Get it never fails as a
// whole: each result is a hit with its payload or a miss with a Reason. The
// keys of an owner that cannot be reached, or that refuses them twice, are
// misses (WrongEpoch reads the epoch from the Reason of the latter).
// Options apply to every owner's request. WithLease takes a lease of this
// Cluster's Lookup: each owner that pinned its part of the run gets its own
// node lease with its keys, and releases it once it has answered; an owner
// the keys no longer route to (the view changed) keeps its pins until they
// expire.
func (c *Cluster) Get(ctx context.Context, ns Namespace, keys []BlockKey, opts ...GetOption) []GetResult {
	res := make([]GetResult, len(keys))
	if len(keys) == 0 {
		return res
	}
	if err := c.check(ns); err != nil {
		missAll(res, err)
		return res
	}
	var o getOptions
	for _, opt := range opts {
		opt(&o)
	}
	var leases *leaseSpend
	if nodes := c.leases.take(o.lease); nodes != nil {
		leases = &leaseSpend{nodes: nodes}
	}
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	c.dispatch(ctx, keys, batchOp{
		send: func(ctx context.Context, n *Client, idx []int, last bool) sent {
			no := o
			no.lease = leases.take(n)
			var s sent
			for k, r := range n.Get(ctx, ns, pickKeys(keys, idx), func(p *getOptions) { *p = no }) {
				res[idx[k]] = r
				if r.Reason != nil {
					s.note(idx[k], r.Reason)
				}
			}
			return s
		},
		fail: func(_ context.Context, idx []int, err error) {
			for _, i := range idx {
				res[i] = GetResult{Reason: err}
			}
		},
	})
	return res
}

// Put stores blocks on their owners and returns one status per block, in
// order. A block whose owner cannot be reached, or refuses it twice, is
// StatusNoSpace: not stored, and not an error (the cache is best effort;
// the engine keeps its block). Put fails only for an invalid namespace
// (ErrInvalid) or a closed Cluster.
func (c *Cluster) Put(ctx context.Context, ns Namespace, blocks []PutBlock) ([]Status, error) {
	statuses := make([]Status, len(blocks))
	if len(blocks) == 0 {
		return statuses, nil
	}
	if err := c.check(ns); err != nil {
		return nil, err
	}
	keys := make([]BlockKey, len(blocks))
	for i := range blocks {
		keys[i] = blocks[i].Key
	}
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	c.dispatch(ctx, keys, batchOp{
		send: func(ctx context.Context, n *Client, idx []int, last bool) sent {
			sub := make([]PutBlock, len(idx))
			for k, i := range idx {
				sub[k] = blocks[i]
			}
			errs := make([]error, len(idx))
			st, err := n.put(ctx, ns, sub, errs)
			st = failedAll(st, errs, err)
			var s sent
			for k, i := range idx {
				statuses[i] = st[k]
				if errs[k] == nil {
					continue
				}
				statuses[i] = StatusNoSpace
				s.note(i, errs[k])
			}
			return s
		},
		fail: func(_ context.Context, idx []int, _ error) {
			for _, i := range idx {
				statuses[i] = StatusNoSpace
			}
		},
	})
	return statuses, nil
}

// Delete removes blocks from their owners and returns one status per key,
// in order, as Client.Delete. The keys whose owner could not be reached,
// or refused them twice, report StatusMiss, and the first such failure is
// returned.
func (c *Cluster) Delete(ctx context.Context, ns Namespace, keys []BlockKey) ([]Status, error) {
	statuses := make([]Status, len(keys))
	if len(keys) == 0 {
		return statuses, nil
	}
	if err := c.check(ns); err != nil {
		return nil, err
	}
	var first firstError
	record := first.set
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	c.dispatch(ctx, keys, batchOp{
		send: func(ctx context.Context, n *Client, idx []int, last bool) sent {
			errs := make([]error, len(idx))
			st, err := n.delete(ctx, ns, pickKeys(keys, idx), errs)
			st = failedAll(st, errs, err)
			var s sent
			for k, i := range idx {
				statuses[i] = st[k]
				if errs[k] == nil {
					continue
				}
				if s.note(i, errs[k]) && !last {
					continue // retried: not a failure yet
				}
				record(errs[k])
			}
			return s
		},
		fail: func(_ context.Context, idx []int, err error) {
			for _, i := range idx {
				statuses[i] = StatusMiss
			}
			record(err)
		},
	})
	return statuses, first.get()
}

// Lookup returns the length of the leading run of keys that are cached,
// asking every owner in parallel for its part of the chain: the run ends
// at the first key, in chain order, that its owner does not hold. With
// leaseTTL > 0 each owner pins its part of the run for that long, and
// Lookup returns a lease that stands for the owners' leases: pass it to
// Get with WithLease, which releases each on its owner. Unused, the pins
// expire on their own. The lease is 0 when no owner granted one or the run
// is empty. An owner that cannot be reached, or refuses its keys twice,
// ends the run at its first key; that is not an error. Lookup fails only
// for an invalid namespace (ErrInvalid) or a closed Cluster.
func (c *Cluster) Lookup(ctx context.Context, ns Namespace, keys []BlockKey, leaseTTL time.Duration) (int, LeaseID, error) {
	if len(keys) == 0 {
		return 0, 0, nil
	}
	if err := c.check(ns); err != nil {
		return 0, 0, err
	}
	var mu sync.Mutex
	run := len(keys)
	var leases map[*Client]LeaseID // guarded by mu
	stopAt := func(i int) {
		mu.Lock()
		run = min(run, i)
		mu.Unlock()
	}
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	c.dispatch(ctx, keys, batchOp{
		send: func(ctx context.Context, n *Client, idx []int, last bool) sent {
			hits, lease, err := n.Lookup(ctx, ns, pickKeys(keys, idx), leaseTTL)
			if lease != 0 {
				// A node asked again (a retry after WRONG_EPOCH) keeps its
				// latest lease; an earlier one expires on its own.
				mu.Lock()
				if leases == nil {
					leases = make(map[*Client]LeaseID)
				}
				leases[n] = lease
				mu.Unlock()
			}
			var s sent
			if err != nil {
				if e, ok := WrongEpoch(err); ok {
					// The keys before the refused chunk were looked up.
					s.moved, s.epoch = slices.Clone(idx[hits:]), e
					if !last {
						return s
					}
				} else if errors.Is(err, ErrUnavailable) {
					s.down = err
				}
			}
			if hits < len(idx) {
				stopAt(idx[hits])
			}
			return s
		},
		fail: func(_ context.Context, idx []int, _ error) { stopAt(idx[0]) },
	})
	if run == 0 || len(leases) == 0 {
		return run, 0, nil // pins of an empty run expire on their own
	}
	return run, c.leases.add(leases, leaseTTL), nil
}

// GetOrFill is Client.GetOrFill over the cluster: the chain's blocks are
// split by owner and each owner's part runs as a single-flight
// GetOrFillIdentities on that owner, all in parallel, so that every block
// is computed at most once across the callers that share its owner. Block
// i of the result, and index i passed to fill, is the chain's block i; the
// report adds up the owners' reports (Rounds is the most any owner took).
//
// fill may be called concurrently, once per owner, each time with the
// indices of blocks of that owner: it must be safe for concurrent use. The
// blocks of an owner that cannot be reached, or that refuses them twice,
// are computed here (Local). GetOrFill returns an error only if fill does
// (the other owners' parts are then cancelled), if ctx ends, or if ns or
// tokens are invalid (ErrInvalid).
func (c *Cluster) GetOrFill(ctx context.Context, ns Namespace, tokens []uint32, fill FillFunc) ([][]byte, FillReport, error) {
	var rep FillReport
	if err := c.check(ns); err != nil {
		return nil, rep, err
	}
	ids, err := Identities(ns, tokens)
	if err != nil {
		return nil, rep, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	keys, err := identityKeys(ns, ids)
	if err != nil {
		return nil, rep, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	out := make([][]byte, len(ids))
	var mu sync.Mutex // guards rep
	var first firstError
	failed := func(err error) {
		first.set(err)
		cancel()
	}
	merge := func(r FillReport) {
		mu.Lock()
		rep.Hits += r.Hits
		rep.Led += r.Led
		rep.Joined += r.Joined
		rep.Promoted += r.Promoted
		rep.Local += r.Local
		rep.Rounds = max(rep.Rounds, r.Rounds)
		mu.Unlock()
	}
	c.dispatch(ctx, keys, batchOp{
		send: func(ctx context.Context, n *Client, idx []int, last bool) sent {
			sub := make([]CacheIdentity, len(idx))
			for k, i := range idx {
				sub[k] = ids[i]
			}
			subFill := func(ctx context.Context, sidx []int) ([][]byte, error) {
				chain := make([]int, len(sidx))
				for k, s := range sidx {
					chain[k] = idx[s]
				}
				return fill(ctx, chain)
			}
			o, r, foreign, epoch, err := n.getOrFill(ctx, ns, sub, pickKeys(keys, idx), subFill, !last)
			merge(r)
			if err != nil {
				failed(err)
				return sent{}
			}
			for k, i := range idx {
				out[i] = o[k]
			}
			s := sent{epoch: epoch}
			for _, k := range foreign {
				s.moved = append(s.moved, idx[k])
			}
			return s
		},
		fail: func(ctx context.Context, idx []int, _ error) {
			if ctx.Err() != nil {
				failed(ctxError(ctx))
				return
			}
			data, err := fill(ctx, idx)
			if err == nil && len(data) != len(idx) {
				err = fmt.Errorf("%w: fill returned %d payloads for %d blocks", ErrInvalid, len(data), len(idx))
			}
			if err != nil {
				failed(err)
				return
			}
			for k, i := range idx {
				out[i] = data[k]
			}
			merge(FillReport{Local: len(idx)})
		},
	})
	if err := first.get(); err != nil {
		return nil, rep, err
	}
	if err := ctx.Err(); err != nil {
		return nil, rep, ctxError(ctx)
	}
	return out, rep, nil
}

// firstError keeps the first error that parallel groups report.
type firstError struct {
	mu  sync.Mutex
	err error
}

func (f *firstError) set(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err == nil {
		f.err = err
	}
}

func (f *firstError) get() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
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
