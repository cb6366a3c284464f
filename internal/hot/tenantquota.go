package hot

import "fmt"

// Per-tenant DRAM quotas. The fair share of tenant.go caps what
// a tenant holds back from eviction; a quota caps what it has cached. Each
// reserved or published block is owned by the tenant that wrote it
// (entry.owner), and the tenant's record counts the slot bytes it owns.
//
// A ReserveBlock that would take a tenant with a quota past it evicts that
// tenant's own blocks (least recently used first, unpinned, without cached
// children or leases) until the block fits, and then, if the tier still has
// no room for it, evicts only the tenant's own blocks of the block's size
// class: it never evicts another tenant's block, nor empties another
// class's slab. When the tenant has nothing of its own left to evict, the
// ReserveBlock is refused (ErrTenantQuota when the quota is the limit,
// ErrNoSpace when the tier is). A tenant without a quota, or under it,
// evicts by the tier's order as before.

// own charges bytes to tenant's owned total and returns its id (0 for the
// empty tenant, which owns nothing).
func (t *tenantTable) own(tenant string, bytes int64) uint32 {
	if tenant == "" {
		return 0
	}
	id := t.idFor(tenant)
	t.recs[id].owned += bytes
	return id
}

// disown credits what own charged; id 0 is a no-op.
func (t *tenantTable) disown(id uint32, bytes int64) {
	if id == 0 {
		return
	}
	r := &t.recs[id]
	r.owned -= bytes
	if r.owned < 0 {
		panic(fmt.Sprintf("gpucache/hot: tenant %q disowned more than it owned", r.name))
	}
	t.forgetIfEmpty(id)
}

// owned returns the slot bytes tenant owns now.
func (t *tenantTable) ownedBy(tenant string) int64 {
	if id := t.ids[tenant]; id != 0 {
		return t.recs[id].owned
	}
	return 0
}

// overQuota reports whether charging bytes more to tenant would take it
// past its DRAM quota, and the quota.
func (t *tenantTable) overQuota(tenant string, bytes int64) (over bool, quota int64) {
	q, ok := t.quotas[tenant]
	if !ok || tenant == "" {
		return false, 0
	}
	return t.ownedBy(tenant)+bytes > q, q
}

// ownCandidateLocked returns an eviction candidate owned by tenant: the
// least recently used evictable one of class k, or with anyClass, of any
// class when class k has none. Each class list is scanned from its tail
// for at most cfg.EvictScan entries.
func (s *Store) ownCandidateLocked(tenant string, k int, anyClass bool) (uint32, bool) {
	id := s.mu.tenants.ids[tenant]
	if id == 0 {
		return 0, false
	}
	if c, ok := s.ownInClassLocked(id, k); ok {
		return c, true
	}
	if !anyClass {
		return 0, false
	}
	var best uint32
	found := false
	for c := range s.cl.n {
		if c == k {
			continue
		}
		if idx, ok := s.ownInClassLocked(id, c); ok && (!found || s.mu.entries[idx].tick < s.mu.entries[best].tick) {
			best, found = idx, true
		}
	}
	return best, found
}

// ownInClassLocked scans the LRU list of class k from its tail for an
// unpinned entry owned by tenant id.
func (s *Store) ownInClassLocked(id uint32, k int) (uint32, bool) {
	es := s.mu.entries
	sent := uint32(k)
	p := es[sent].prev
	for i := 0; p != sent && i < s.cfg.EvictScan; i++ {
		if es[p].owner == id && !es[p].pinned() {
			return p, true
		}
		p = es[p].prev
	}
	return 0, false
}

// SetTenantQuotas replaces the per-tenant DRAM quotas (slot bytes a tenant
// may have reserved and cached; a tenant absent from the map has none).
// Blocks already cached are kept; a tenant over a lowered quota evicts its
// own blocks at its next ReserveBlock. A quota below MaxClass is refused: every
// tenant must be able to store its largest block.
func (s *Store) SetTenantQuotas(quotas map[string]int64) error {
	m := make(map[string]int64, len(quotas))
	for name, q := range quotas {
		if q < int64(s.cl.size(0)) {
			return fmt.Errorf("gpucache/hot: tenant %q DRAM quota %d bytes is below the smallest block slot (%d bytes)", name, q, s.cl.size(0))
		}
		m[name] = q
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mu.tenants.quotas = m
	return nil
}

// TenantDRAM is one tenant's DRAM usage.
type TenantDRAM struct {
	Tenant string
	Bytes  int64 // slot bytes of its reserved and cached blocks
	Quota  int64 // its DRAM quota; 0: none
}

// TenantDRAMUsage reports tenant's owned slot bytes and quota (0: none).
func (s *Store) TenantDRAMUsage(tenant string) TenantDRAM {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.closed || tenant == "" {
		return TenantDRAM{Tenant: tenant}
	}
	return TenantDRAM{Tenant: tenant, Bytes: s.mu.tenants.ownedBy(tenant), Quota: s.mu.tenants.quotas[tenant]}
}
