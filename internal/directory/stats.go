package directory

import (
	"sync"
	"sync/atomic"
)

// Stats is a snapshot of a Directory. Gauges are read stripe by stripe
// without a global lock, so under concurrent use they may be a moment
// apart from each other; at rest Waiters == CreditsInUse.
type Stats struct {
	Epoch   Epoch
	Fills   int // live fills
	Waiters int // live waiters (joined, not yet notified or withdrawn)

	// CreditsInUse is the join credits held, over all tenants; Credits
	// holds it per tenant (tenants holding none are absent).
	CreditsInUse int
	Credits      map[string]int

	Leads         uint64 // Acquire answered Lead (fills started)
	Joins         uint64 // Acquire answered Joined
	Hits          uint64 // Acquire answered Hit
	Denied        uint64 // Acquire answered Denied, for any reason
	DeniedCredits uint64 // ... because the tenant was out of credits
	DeniedFills   uint64 // ... because MaxFills fills were live
	Finished      uint64 // fills finished
	Failed        uint64 // fills ended without a block (turns spent or no waiter left)
	Fenced        uint64 // fills fenced by an epoch change
	Promotions    uint64 // turns handed to a waiter
	Expired       uint64 // turns ended by their deadline
	Withdrawn     uint64 // waiters withdrawn by Cancel or LeaveOwner
}

// counters are the Directory's statistics; each is an atomic.
type counters struct {
	waiters                              atomic.Int64
	leads, joins, hits                   atomic.Uint64
	denied, deniedCredits, deniedFills   atomic.Uint64
	finished, failed, fenced, promotions atomic.Uint64
	expired, withdrawn                   atomic.Uint64
}

// Stats returns a snapshot of the directory's counters and gauges.
func (d *Directory) Stats() Stats {
	c := &d.stats
	st := Stats{
		Epoch:         d.Epoch(),
		Fills:         int(d.live.Load()),
		Waiters:       int(c.waiters.Load()),
		Leads:         c.leads.Load(),
		Joins:         c.joins.Load(),
		Hits:          c.hits.Load(),
		Denied:        c.denied.Load(),
		DeniedCredits: c.deniedCredits.Load(),
		DeniedFills:   c.deniedFills.Load(),
		Finished:      c.finished.Load(),
		Failed:        c.failed.Load(),
		Fenced:        c.fenced.Load(),
		Promotions:    c.promotions.Load(),
		Expired:       c.expired.Load(),
		Withdrawn:     c.withdrawn.Load(),
	}
	st.CreditsInUse, st.Credits = d.credits.snapshot()
	return st
}

// credits counts the join credits each tenant holds. Lock order: a stripe
// lock, then mu.
type credits struct {
	mu    sync.Mutex
	limit int            // immutable after init
	inUse map[string]int // guarded by mu; no zero entries
	total int            // guarded by mu
}

func (c *credits) init(limit int) {
	c.limit = limit
	c.inUse = make(map[string]int)
}

// take charges one credit to tenant; false if it has none left.
func (c *credits) take(tenant string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.inUse[tenant]
	if n >= c.limit {
		return false
	}
	c.inUse[tenant] = n + 1
	c.total++
	return true
}

// release gives back one credit of tenant.
func (c *credits) release(tenant string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.inUse[tenant]
	if n <= 0 {
		panic("gpucache/directory: credit released twice")
	}
	if n == 1 {
		delete(c.inUse, tenant)
	} else {
		c.inUse[tenant] = n - 1
	}
	c.total--
}

func (c *credits) snapshot() (int, map[string]int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := make(map[string]int, len(c.inUse))
	for t, n := range c.inUse {
		m[t] = n
	}
	return c.total, m
}
