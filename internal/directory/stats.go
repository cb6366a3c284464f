package directory

import (
	"fmt"
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
	// TenantFills is the live fills per tenant (tenants with none are
	// absent).
	TenantFills map[string]int

	Leads         uint64 // Acquire answered Lead (fills started)
	Joins         uint64 // Acquire answered Joined
	Hits          uint64 // Acquire answered Hit
	Denied        uint64 // Acquire answered Denied, for any reason
	DeniedCredits uint64 // ... because the tenant was out of credits
	DeniedFills   uint64 // ... because MaxFills fills were live
	// DeniedTenantFills counts Acquires denied because the tenant had
	// TenantFills fills live.
	DeniedTenantFills uint64
	Finished          uint64 // fills finished (by the leader, or published)
	Published         uint64 // ... of which by a plain PUT of the block (Publish)
	Failed            uint64 // fills ended without a block (turns spent or no waiter left)
	Fenced            uint64 // fills fenced by an epoch change
	Promotions        uint64 // turns handed to a waiter
	Expired           uint64 // turns ended by their deadline
	Withdrawn         uint64 // waiters withdrawn by Cancel or LeaveOwner
}

// counters are the Directory's statistics; each is an atomic.
type counters struct {
	waiters                              atomic.Int64
	leads, joins, hits                   atomic.Uint64
	denied, deniedCredits, deniedFills   atomic.Uint64
	deniedTenantFills                    atomic.Uint64
	finished, failed, fenced, promotions atomic.Uint64
	expired, withdrawn, published        atomic.Uint64
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
		Published:     c.published.Load(),
		Failed:        c.failed.Load(),
		Fenced:        c.fenced.Load(),
		Promotions:    c.promotions.Load(),
		Expired:       c.expired.Load(),
		Withdrawn:     c.withdrawn.Load(),
	}
	st.DeniedTenantFills = c.deniedTenantFills.Load()
	st.CreditsInUse, st.Credits = d.credits.snapshot()
	_, st.TenantFills = d.tenantFills.snapshot()
	return st
}

// credits counts, per tenant, units held against a per-tenant limit: the
// join credits, and the live fills. Lock order: a stripe lock, then mu.
type credits struct {
	mu    sync.Mutex
	limit int            // guarded by mu
	inUse map[string]int // guarded by mu; no zero entries
	total int            // guarded by mu
}

func (c *credits) init(limit int) {
	c.limit = limit
	c.inUse = make(map[string]int)
}

// setLimit changes the limit for what is taken from now on.
func (c *credits) setLimit(limit int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.limit = limit
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
		panic("gpucache/directory: credit or fill released twice")
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

// SetTenantFills changes Config.TenantFills (zero: the default) for fills
// started from now on; live fills are kept. The daemon calls it when a
// reload changes the number of tenants.
func (d *Directory) SetTenantFills(n int) error {
	if n < 0 {
		return fmt.Errorf("%w: TenantFills %d", ErrInvalidConfig, n)
	}
	if n == 0 {
		n = max(d.cfg.MaxFills/2, 1)
	}
	d.tenantFills.setLimit(n)
	return nil
}
