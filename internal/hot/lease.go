package hot

import "time"

// leaseRec pins the leading run of hits of one Lookup until ReleaseLease or its
// deadline. Leases are few (at most MaxLeases) and short-lived, so a slice of
// refs per lease is fine; the refs stay valid because a leased entry can be
// neither evicted nor deleted.
type leaseRec struct {
	deadline int64 // ns since Store.base
	refs     []ref
	tenant   uint32 // the tenant charged (tenant.go), 0 for none
	bytes    int64  // slot bytes charged to it
}

// leaseDeadline is one element of the expiry heap.
type leaseDeadline struct {
	deadline int64
	id       LeaseID
}

// leaseHeap is a min-heap of deadlines. Released leases leave their element
// behind; it is dropped when it reaches the top, and the heap is rebuilt when
// such garbage dominates it.
type leaseHeap []leaseDeadline

func (h *leaseHeap) push(d leaseDeadline) {
	*h = append(*h, d)
	a := *h
	for i := len(a) - 1; i > 0; {
		p := (i - 1) / 2
		if a[p].deadline <= a[i].deadline {
			break
		}
		a[p], a[i] = a[i], a[p]
		i = p
	}
}

func (h *leaseHeap) pop() leaseDeadline {
	a := *h
	top := a[0]
	n := len(a) - 1
	a[0] = a[n]
	a = a[:n]
	for i := 0; ; {
		l, r, m := 2*i+1, 2*i+2, i
		if l < n && a[l].deadline < a[m].deadline {
			m = l
		}
		if r < n && a[r].deadline < a[m].deadline {
			m = r
		}
		if m == i {
			break
		}
		a[m], a[i] = a[i], a[m]
		i = m
	}
	*h = a
	return top
}

// Lookup is LookupFor with no tenant charged for the lease.
func (s *Store) Lookup(ns Namespace, keys []Key, ttl time.Duration, lease bool) (hits int, id LeaseID, granted time.Duration) {
	return s.LookupFor("", ns, keys, ttl, lease)
}

// LookupFor returns the length of the leading run of keys that are
// published under ns; the run stops at the first absent, in-flight or
// foreign-namespace key. Hits are touched in order, so the last one is the
// most recent.
//
// With lease set and hits > 0, one lease pins those hits blocks until
// ReleaseLease(id) or until the lease expires: ttl <= 0 means
// DefaultLeaseTTL, and ttl is capped at MaxLeaseTTL; granted is the TTL
// given. The lease is charged to tenant (the slot bytes of its blocks, and
// one of the tenant's leases; see TenantHoldBytes and TenantLeases). When
// MaxLeases leases are live, or the lease would take tenant over its caps,
// no lease is granted (id 0, counted in LeasesRefused) and the hits are
// still reported. The caller owns the lease and should release it after
// its reads; expiry reclaims a forgotten one. An empty tenant is not
// charged.
func (s *Store) LookupFor(tenant string, ns Namespace, keys []Key, ttl time.Duration, lease bool) (hits int, id LeaseID, granted time.Duration) {
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.closed {
		return 0, 0, 0
	}
	s.expireLocked(now, false)
	s.mu.st.Lookups++
	var bytes int64
	for _, k := range keys {
		idx, ok := s.mu.index[k]
		if !ok {
			break
		}
		e := &s.mu.entries[idx]
		if e.state != statePublished {
			break
		}
		if e.ns != ns {
			s.mu.st.LookupMismatches++
			break
		}
		s.touchLocked(idx)
		bytes += int64(s.cl.size(int(e.class)))
		hits++
	}
	s.mu.st.LookupHits += uint64(hits)
	if !lease || hits == 0 {
		return hits, 0, 0
	}
	if len(s.mu.leases) >= s.cfg.MaxLeases {
		s.mu.st.LeasesRefused++
		return hits, 0, 0
	}
	tid, ok := s.mu.tenants.hold(tenant, bytes, true)
	if !ok {
		s.mu.st.LeasesRefused++
		return hits, 0, 0
	}
	if ttl <= 0 {
		ttl = s.cfg.DefaultLeaseTTL
	}
	ttl = min(ttl, s.cfg.MaxLeaseTTL)
	refs := make([]ref, hits)
	for i, k := range keys[:hits] {
		idx := s.mu.index[k]
		e := &s.mu.entries[idx]
		if !e.pinned() {
			s.mu.st.Pinned++
		}
		if e.leases == 0 && e.linked {
			// A leased block leaves its LRU list until its last lease
			// ends, so eviction scans never walk over leased blocks
			// (however many one tenant holds) to find a candidate.
			s.unlinkLocked(idx)
		}
		e.leases++
		refs[i] = ref{idx: idx, gen: e.gen}
	}
	s.mu.nextLease++
	id = s.mu.nextLease
	deadline := now + int64(ttl)
	s.mu.leases[id] = leaseRec{deadline: deadline, refs: refs, tenant: tid, bytes: bytes}
	s.mu.deadlines.push(leaseDeadline{deadline: deadline, id: id})
	s.mu.st.LeasesGranted++
	return hits, id, ttl
}

// ReleaseLease unpins the blocks of lease id. It reports false for an
// unknown, released or expired lease.
func (s *Store) ReleaseLease(id LeaseID) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.closed {
		return false
	}
	l, ok := s.mu.leases[id]
	if !ok {
		return false
	}
	s.dropLeaseLocked(id, l)
	if n := len(s.mu.deadlines); n > 64 && n > 2*len(s.mu.leases) {
		s.rebuildDeadlinesLocked()
	}
	return true
}

// ExpireLeases reclaims every lease whose deadline has passed
// and returns how many it reclaimed. ReserveBlock and Lookup also expire leases
// lazily, which costs a heap peek when nothing is due.
func (s *Store) ExpireLeases() int {
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.closed {
		return 0
	}
	return s.expireLocked(now, true)
}

// expireLocked pops due deadlines. Without all it stops after a small batch,
// keeping the lazy calls cheap.
func (s *Store) expireLocked(now int64, all bool) int {
	n := 0
	for len(s.mu.deadlines) > 0 && s.mu.deadlines[0].deadline <= now {
		if !all && n >= 64 {
			break
		}
		d := s.mu.deadlines.pop()
		l, ok := s.mu.leases[d.id]
		if !ok || l.deadline != d.deadline {
			continue
		}
		s.dropLeaseLocked(d.id, l)
		s.mu.st.LeasesExpired++
		n++
	}
	return n
}

// dropLeaseLocked unpins the lease's entries, credits its tenant and
// forgets it. An entry whose last lease ends goes back on its LRU list (if
// it has no cached child) at the place its last touch earns.
func (s *Store) dropLeaseLocked(id LeaseID, l leaseRec) {
	for _, r := range l.refs {
		e := &s.mu.entries[r.idx]
		if e.gen != r.gen || e.leases == 0 {
			continue // cannot happen: a leased entry is never freed
		}
		e.leases--
		if !e.pinned() {
			s.mu.st.Pinned--
		}
		if e.leases == 0 && e.children == 0 && !e.linked {
			s.linkOrderedLocked(r.idx)
		}
	}
	s.mu.tenants.release(l.tenant, l.bytes, true)
	delete(s.mu.leases, id)
}

// rebuildDeadlinesLocked drops released leases from the heap.
func (s *Store) rebuildDeadlinesLocked() {
	h := s.mu.deadlines[:0]
	for id, l := range s.mu.leases {
		h = append(h, leaseDeadline{deadline: l.deadline, id: id})
	}
	s.mu.deadlines = nil
	for _, d := range h {
		s.mu.deadlines.push(d)
	}
}
