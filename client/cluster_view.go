package client

// The Cluster's view of the members: refreshing it from the nodes and
// installing a newer one.

import (
	"context"
	"errors"
	"fmt"
	"time"
)

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
	best, single, firstErr := c.poll(ctx, c.candidates(cur, hint), want)
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

// candidates lists the addresses refresh asks, in order and each once:
// hint, the single node, the members not draining, the draining members,
// the seeds.
func (c *Cluster) candidates(cur *routing, hint string) []string {
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
	return candidates
}

// poll asks the candidates for MEMBERS until one answers a view of epoch
// >= want. It returns the newest cluster view, the first node that
// answered no cluster view (epoch 0, or version 1 only), and the first
// error.
func (c *Cluster) poll(ctx context.Context, candidates []string, want uint64) (best *routing, single string, firstErr error) {
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
	return best, single, firstErr
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
