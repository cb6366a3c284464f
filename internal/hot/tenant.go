package hot

import "fmt"

// Tenant accounting. A tenant holds slot bytes in two ways: its live
// leases pin blocks (each lease is charged the slot bytes of the blocks it
// pins, when it is granted, and credited when it ends), and its
// reservations in flight hold slots (charged at ReserveBlock, credited at
// Commit, CommitAcquire or Abort). Both come out of one per-tenant budget,
// TenantHoldBytes, and leases are also counted against TenantLeases.
//
// The caps are checked before any space is looked for, so a tenant at its
// cap never evicts anything. Nothing else a tenant does is limited here:
// published, unleased blocks stay evictable by anyone, and Views (the pins
// of a GET being answered) are transient.
//
// A tenant is named by a small id while it holds anything, so entries and
// leases stay pointer-free; the record is recycled when it holds nothing,
// so the table is bounded by the live leases and reservations, whatever
// tenant names sessions present.

// tenantRec is what one tenant holds now.
type tenantRec struct {
	name   string
	held   int64 // slot bytes: leases (per lease) plus reservations
	leases int   // live leases
	owned  int64 // slot bytes of its reserved and published blocks (DRAM quota)
}

// tenantTable is the per-tenant accounting, guarded by Store.mu.
type tenantTable struct {
	holdCap  int64 // bytes one tenant may hold (Config.TenantHoldBytes)
	leaseCap int   // leases one tenant may have (Config.TenantLeases)
	ids      map[string]uint32
	recs     []tenantRec      // recs[0] is unused: id 0 means "nobody"
	free     []uint32         // recycled ids
	quotas   map[string]int64 // DRAM quota per tenant name (SetTenantQuotas); absent: none
}

func (t *tenantTable) init(holdCap int64, leaseCap int) {
	t.holdCap, t.leaseCap = holdCap, leaseCap
	t.reset()
}

// reset forgets every tenant (Close).
func (t *tenantTable) reset() {
	t.ids = make(map[string]uint32)
	t.recs = make([]tenantRec, 1)
	t.free = nil
}

// hold charges bytes, and one lease when lease is set, to tenant if that
// keeps it within its caps, and returns the tenant's id. The empty tenant
// is never charged (id 0, ok).
func (t *tenantTable) hold(tenant string, bytes int64, lease bool) (id uint32, ok bool) {
	if tenant == "" {
		return 0, true
	}
	id = t.ids[tenant]
	var cur tenantRec
	if id != 0 {
		cur = t.recs[id]
	}
	if cur.held+bytes > t.holdCap || (lease && cur.leases >= t.leaseCap) {
		return 0, false
	}
	id = t.idFor(tenant)
	r := &t.recs[id]
	r.held += bytes
	if lease {
		r.leases++
	}
	return id, true
}

// idFor returns tenant's id, creating its record when it has none. The
// caller charges the record at once, so it is not left empty.
func (t *tenantTable) idFor(tenant string) uint32 {
	id := t.ids[tenant]
	if id != 0 {
		return id
	}
	if n := len(t.free); n > 0 {
		id = t.free[n-1]
		t.free = t.free[:n-1]
	} else {
		t.recs = append(t.recs, tenantRec{})
		id = uint32(len(t.recs) - 1)
	}
	t.recs[id] = tenantRec{name: tenant}
	t.ids[tenant] = id
	return id
}

// fits reports whether tenant can be charged bytes more (always, for the
// empty tenant).
func (t *tenantTable) fits(tenant string, bytes int64) bool {
	if tenant == "" {
		return true
	}
	var held int64
	if id := t.ids[tenant]; id != 0 {
		held = t.recs[id].held
	}
	return held+bytes <= t.holdCap
}

// release credits what hold charged; id 0 is a no-op. A tenant left holding
// nothing is forgotten.
func (t *tenantTable) release(id uint32, bytes int64, lease bool) {
	if id == 0 {
		return
	}
	r := &t.recs[id]
	r.held -= bytes
	if lease {
		r.leases--
	}
	if r.held < 0 || r.leases < 0 {
		panic(fmt.Sprintf("gpucache/hot: tenant %q released more than it held", r.name))
	}
	t.forgetIfEmpty(id)
}

// forgetIfEmpty recycles the record of id when it holds and owns nothing.
func (t *tenantTable) forgetIfEmpty(id uint32) {
	r := &t.recs[id]
	if r.held == 0 && r.leases == 0 && r.owned == 0 {
		delete(t.ids, r.name)
		*r = tenantRec{}
		t.free = append(t.free, id)
	}
}

// TenantUsage reports what tenant holds now: the slot bytes of its leases
// and reservations in flight, and its live leases.
func (s *Store) TenantUsage(tenant string) (heldBytes int64, leases int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.closed {
		return 0, 0
	}
	t := &s.mu.tenants
	if id := t.ids[tenant]; id != 0 {
		return t.recs[id].held, t.recs[id].leases
	}
	return 0, 0
}

// SetTenantLimits changes the per-tenant caps (Config.TenantHoldBytes and
// Config.TenantLeases; zero takes the default) for leases and reservations
// from now on; what tenants hold already is kept. The daemon calls it when
// a reload changes the number of tenants.
func (s *Store) SetTenantLimits(holdBytes int64, leases int) error {
	c := s.cfg
	c.TenantHoldBytes, c.TenantLeases = holdBytes, leases
	c = c.WithDefaults()
	if err := c.Validate(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mu.tenants.holdCap, s.mu.tenants.leaseCap = c.TenantHoldBytes, c.TenantLeases
	return nil
}

// unholdReservedLocked credits the tenant charged for the in-flight entry
// idx (Commit, CommitAcquire, Abort).
func (s *Store) unholdReservedLocked(idx uint32) {
	e := &s.mu.entries[idx]
	s.mu.tenants.release(e.tenant, int64(s.cl.size(int(e.class))), false)
	e.tenant = 0
}
