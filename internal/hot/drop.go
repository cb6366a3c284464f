package hot

// DropTenant removes every published block tenant wrote (its owner, as
// counted for its DRAM quota) that no reader pins and no lease holds, and
// reports how many it removed and how many it left because they were
// pinned, leased or still being written. It is the hot-tier half of a
// tenant purge: a removed block is not passed to OnEvict, so it is not
// written behind. The empty tenant owns nothing, so it drops nothing.
//
// Blocks the tenant writes after DropTenant returns are cached as usual.
func (s *Store) DropTenant(tenant string) (dropped, busy int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.closed || tenant == "" {
		return 0, 0
	}
	id := s.mu.tenants.ids[tenant]
	if id == 0 {
		return 0, 0
	}
	for i := range s.mu.entries {
		e := &s.mu.entries[i]
		if e.owner != id || (e.state != statePublished && e.state != stateReserved) {
			continue
		}
		if e.state != statePublished || e.pinned() {
			busy++
			continue
		}
		s.removeLocked(uint32(i))
		s.mu.st.Deletes++
		dropped++
		if s.mu.tenants.ids[tenant] != id {
			break // the tenant owns nothing more: its record was recycled
		}
	}
	return dropped, busy
}
