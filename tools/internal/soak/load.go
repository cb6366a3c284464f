package soak

import (
	"context"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpucache/gpucache/client"
)

// tenant is one tenant of the load: its keyspace and the store it uses.
type tenant struct {
	name   string
	auth   bool // authenticated (bearer secret) or open mode
	ks     *keyspace
	st     client.Cache // a Cluster (the authenticated tenants) or a Client of the open node
	weight float64      // share of the operations
}

// leaseTTL is the TTL the load asks for in Lookup.
const leaseTTL = 2 * time.Second

// load drives the mixed workload and records its history.
type load struct {
	cfg     Config
	h       *history
	tenants []*tenant
	pacer   *pacer

	stopping atomic.Bool
	done     chan struct{}
	wg       sync.WaitGroup
}

func newLoad(cfg Config, h *history, tenants []*tenant) *load {
	l := &load{cfg: cfg, h: h, tenants: tenants, done: make(chan struct{})}
	if cfg.Rate > 0 {
		l.pacer = &pacer{every: time.Duration(float64(time.Second) / cfg.Rate)}
	}
	return l
}

// start runs the workers until stop.
func (l *load) start(ctx context.Context) {
	for w := range l.cfg.Workers {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			rng := rand.New(rand.NewPCG(l.cfg.Seed, uint64(w)+1))
			for !l.stopping.Load() {
				if l.pacer != nil && !l.pacer.wait(ctx, l.done) {
					return
				}
				if ctx.Err() != nil {
					return
				}
				l.op(ctx, rng)
			}
		}()
	}
}

// prime PUTs every chain of every tenant once, with the workers in
// parallel and unpaced, so that the hot tiers are full and the scan
// chains have gone through write-behind before the first fault: the cold
// tier then has blocks to refill from the start.
func (l *load) prime(ctx context.Context) {
	type job struct {
		t  *tenant
		ch *chain
	}
	jobs := make(chan job)
	var wg sync.WaitGroup
	for range l.cfg.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				all := make([]int, len(j.ch.keys))
				for i := range all {
					all[i] = i
				}
				l.put(ctx, j.t, j.ch, all)
			}
		}()
	}
	defer func() {
		close(jobs)
		wg.Wait()
	}()
	for i := 0; ; i++ {
		sent := false
		for _, t := range l.tenants { // interleave tenants, hot chains first
			if i >= len(t.ks.chains) {
				continue
			}
			select {
			case jobs <- job{t, &t.ks.chains[i]}:
				sent = true
			case <-ctx.Done():
				return
			}
		}
		if !sent {
			return
		}
	}
}

// stop ends the load and waits for every worker; idempotent.
func (l *load) stop() {
	if !l.stopping.Swap(true) {
		close(l.done)
	}
	l.wg.Wait()
}

func (l *load) pickTenant(rng *rand.Rand) *tenant {
	x := rng.Float64()
	for _, t := range l.tenants {
		if x < t.weight {
			return t
		}
		x -= t.weight
	}
	return l.tenants[len(l.tenants)-1]
}

// op runs one operation: one to three client calls on one chain of one
// tenant, each checked.
//
//	30% GET of the chain; the blocks that missed are PUT (an engine
//	    recomputes and stores them)
//	20% LOOKUP with a lease, then GET of the leading run under the lease
//	20% GetOrFill (ACQUIRE, FILL_COMMIT, WAIT): single-flight fills
//	20% PUT of the chain
//	10% DELETE of the chain's last block, then GET of it (a miss, or
//	    its exact bytes refilled from the cold tier)
func (l *load) op(ctx context.Context, rng *rand.Rand) {
	t := l.pickTenant(rng)
	ch := t.ks.pick(rng, l.cfg.ScanShare)
	ns := t.ks.ns
	switch r := rng.IntN(10); {
	case r < 3:
		var missed []int
		for i := range l.get(ctx, t, callGet, ch.keys, 0) {
			missed = append(missed, i)
		}
		slices.Sort(missed)
		if len(missed) > 0 {
			l.put(ctx, t, ch, missed)
		}
	case r < 5:
		c, cancel := l.h.ctx(ctx)
		start := time.Now()
		hits, lease, err := t.st.Lookup(c, ns, ch.keys, leaseTTL)
		l.h.call(callLookup, time.Since(start))
		cancel()
		switch {
		case err != nil:
			l.h.reason(t.name + " lookup:" + reasonClass(err))
		case hits < 0 || hits > len(ch.keys):
			l.h.lookupBad.Add(1)
			l.h.violation("lookup answered more hits than keys")
		case hits > 0:
			// Blocks LOOKUP found and pinned (under its lease) should
			// hit; a miss here is allowed, with its reason, but counted
			// apart: under a lease, not_cached would mean the lease did
			// not pin.
			for _, r := range l.get(ctx, t, callGetLeased, ch.keys[:hits], lease) {
				l.h.leasedMiss.Add(1)
				l.h.reason(t.name + " leased_miss:" + reasonClass(r.Reason))
			}
		}
	case r < 7:
		l.getOrFill(ctx, t, ch)
	case r < 9:
		all := make([]int, len(ch.keys))
		for i := range all {
			all[i] = i
		}
		l.put(ctx, t, ch, all)
	default:
		last := len(ch.keys) - 1
		c, cancel := l.h.ctx(ctx)
		start := time.Now()
		_, err := t.st.Delete(c, ns, ch.keys[last:])
		l.h.call(callDelete, time.Since(start))
		cancel()
		if err != nil {
			l.h.reason(t.name + " delete:" + reasonClass(err))
		}
		l.get(ctx, t, callGet, ch.keys[last:], 0)
	}
}

// get reads keys (under lease when it is not zero), checks every block,
// and returns the results that missed, by index.
func (l *load) get(ctx context.Context, t *tenant, kind string, keys []client.BlockKey, lease client.LeaseID) map[int]client.GetResult {
	c, cancel := l.h.ctx(ctx)
	defer cancel()
	start := time.Now()
	var res []client.GetResult
	if kind == callGetLeased {
		res = t.st.Get(c, t.ks.ns, keys, client.WithLease(lease))
	} else {
		res = t.st.Get(c, t.ks.ns, keys)
	}
	l.h.call(kind, time.Since(start))
	missed := map[int]client.GetResult{}
	for i := range keys {
		if i >= len(res) {
			l.h.unexplained.Add(1)
			l.h.violation(kind + ": fewer results than keys")
			continue
		}
		l.h.block(kind, t.name, keys[i], res[i])
		if !res[i].Hit {
			missed[i] = res[i]
		}
	}
	return missed
}

// put stores the chain's blocks at idx with their oracle payloads.
func (l *load) put(ctx context.Context, t *tenant, ch *chain, idx []int) {
	ids := make([]client.CacheIdentity, len(idx))
	payloads := make([][]byte, len(idx))
	for j, i := range idx {
		ids[j], payloads[j] = ch.ids[i], l.h.oracle.Payload(ch.keys[i])
	}
	c, cancel := l.h.ctx(ctx)
	defer cancel()
	start := time.Now()
	st, err := t.st.Put(c, t.ks.ns, client.BlocksOf(ids, payloads))
	l.h.call(callPut, time.Since(start))
	if err != nil {
		l.h.reason(t.name + " put:" + reasonClass(err))
		l.h.notStored.Add(int64(len(idx)))
		return
	}
	for _, s := range st {
		switch s {
		case client.StatusStored, client.StatusExists:
			l.h.stored.Add(1)
		case client.StatusKeyMismatch, client.StatusTooLarge:
			l.h.putRefused.Add(1)
			l.h.violation("put: a valid block was refused with " + s.String())
		default:
			l.h.notStored.Add(1)
			l.h.reason(t.name + " put_status:" + s.String())
		}
	}
}

// getOrFill runs a single-flight fill of the chain and checks every block.
func (l *load) getOrFill(ctx context.Context, t *tenant, ch *chain) {
	c, cancel := l.h.ctx(ctx)
	defer cancel()
	fill := func(_ context.Context, idx []int) ([][]byte, error) {
		out := make([][]byte, len(idx))
		for j, i := range idx {
			out[j] = l.h.oracle.Payload(ch.keys[i])
		}
		return out, nil
	}
	start := time.Now()
	got, rep, err := t.st.GetOrFill(c, t.ks.ns, ch.tokens, fill)
	l.h.call(callGetOrFill, time.Since(start))
	if err != nil {
		if c.Err() == nil && ctx.Err() == nil {
			l.h.fillErrors.Add(1)
			l.h.violation("get_or_fill failed with its context alive: " + err.Error())
		}
		l.h.reason(t.name + " get_or_fill:" + reasonClass(err))
		return
	}
	if len(got) != len(ch.keys) {
		l.h.unexplained.Add(1)
		l.h.violation("get_or_fill: answer of the wrong length")
		return
	}
	// The report says how many blocks came from a node (hits and joined
	// fills) but not which: every block is checked against the oracle, and
	// of the correct ones that many count as served, the rest as computed.
	ok := 0
	for i := range got {
		if l.h.filled(ch.keys[i], got[i]) {
			ok++
		}
	}
	served := min(ok, rep.Hits+rep.Joined)
	l.h.verified.Add(int64(served))
	l.h.computed.Add(int64(ok - served))
}

// pacer spaces operations evenly across workers.
type pacer struct {
	mu    sync.Mutex
	next  time.Time // guarded by mu
	every time.Duration
}

// wait blocks until this worker's next slot; false if the load stops first.
func (p *pacer) wait(ctx context.Context, done <-chan struct{}) bool {
	p.mu.Lock()
	now := time.Now()
	if p.next.Before(now) {
		p.next = now
	}
	at := p.next
	p.next = p.next.Add(p.every)
	p.mu.Unlock()
	d := time.Until(at)
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-done:
		return false
	case <-ctx.Done():
		return false
	}
}
