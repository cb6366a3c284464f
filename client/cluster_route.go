package client

// Routing a Cluster batch: grouping keys by owner, sending each group on
// the owner's Client and retrying the keys that moved.

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/gpucache/gpucache/api/placement"
)

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
	for id, ks := range placement.Route(rt.view, sub) {
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
