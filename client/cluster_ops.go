package client

// The Cluster's data operations: each routes its keys by owner.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

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
		rep.merge(r)
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
			data, err := fillOwn(ctx, fill, idx)
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

// merge adds the counts of r, one owner's part of a GetOrFill, to rep.
func (rep *FillReport) merge(r FillReport) {
	rep.Hits += r.Hits
	rep.Led += r.Led
	rep.Joined += r.Joined
	rep.Promoted += r.Promoted
	rep.Local += r.Local
	rep.Rounds = max(rep.Rounds, r.Rounds)
}

// fillOwn computes the blocks idx with fill, here, when no owner could be
// reached; fill must return one payload per block.
func fillOwn(ctx context.Context, fill FillFunc, idx []int) ([][]byte, error) {
	data, err := fill(ctx, idx)
	if err == nil && len(data) != len(idx) {
		err = fmt.Errorf("%w: fill returned %d payloads for %d blocks", ErrInvalid, len(data), len(idx))
	}
	return data, err
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
