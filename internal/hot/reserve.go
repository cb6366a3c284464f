package hot

// ReserveBlock: finding a slot for a new block (a free one, a new slab, an
// empty slab of another class, or an eviction) under the tenant quotas.

import (
	"fmt"
	"math"
)

// ReserveBlock hands out a slot for a payload of size bytes (0..MaxPayload)
// under key. The caller fills r.Buf and then calls Commit or Abort exactly
// once; until then the block is in flight: invisible to readers, never
// evicted, and its key is taken (a second ReserveBlock gets ErrExists).
//
// A key already published under ns counts as a use: ErrExists, and the
// block is touched like an Acquire hit (it becomes the most recent, and
// Config.Policy sees a Touch), because a writer offering a block again means
// its prefix is in use. A key in flight, or published under another
// namespace, is not touched.
//
// With Config.Policy set, the block is offered to Policy.Admit first (unless
// meta.Demand); a refusal stores nothing and returns ErrNotAdmitted.
//
// To find space ReserveBlock, in order: takes a free slot of the size class,
// maps a new slab while the byte budget allows, hands an empty slab of
// another class over, empties a slab of another class whose blocks are all
// older than the eviction candidate of this class (evicting them, and their
// cached descendants first), and evicts the candidate of this class (the
// LRU one, or the policy's first); before the last two it waits for a slab
// another ReserveBlock is mapping, if any. It returns ErrNoSpace when none
// of these succeeds within bounded work.
func (s *Store) ReserveBlock(ns Namespace, key, parent Key, meta BlockMeta, size int) (Reservation, error) {
	if size < 0 || size > s.cfg.MaxClass {
		return s.rejectTooLarge(size)
	}
	rq := reserveReq{ns: ns, key: key, parent: parent, meta: meta, size: size}
	rq.class = s.cl.classOf(size)
	rq.slotBytes = int64(s.cl.size(rq.class))
	now := s.now()

	s.mu.Lock()
	if s.mu.closed {
		s.mu.Unlock()
		return Reservation{}, ErrClosed
	}
	s.expireLocked(now, false)
	rq.admitted = s.cfg.Policy == nil || meta.Demand
	maxAttempts := s.attemptsFor(rq.class)
	for attempt := 0; ; attempt++ {
		if s.mu.closed {
			s.mu.Unlock()
			return Reservation{}, ErrClosed
		}
		next, err := s.gateLocked(&rq)
		if err != nil {
			return s.refuseLocked(err)
		}
		if next == stepAgainFree {
			attempt-- // progress: the tenant owns less each time
			continue
		}
		if sid, slot, ok := s.takeSlotLocked(rq.class); ok {
			tid, _ := s.mu.tenants.hold(meta.Tenant, rq.slotBytes, false)
			oid := s.mu.tenants.own(meta.Tenant, rq.slotBytes)
			r := s.reserveSlotLocked(ns, key, parent, meta, size, rq.class, sid, slot, tid, oid)
			s.mu.Unlock()
			return r, nil
		}
		if attempt >= maxAttempts {
			break
		}
		next, err = s.findSpaceLocked(&rq)
		if err != nil {
			return s.refuseLocked(err)
		}
		if next == stepGiveUp {
			break
		}
		if next == stepAgainFree {
			attempt--
		}
	}
	return s.refuseLocked(fmt.Errorf("%w: class %d bytes", ErrNoSpace, s.cl.size(rq.class)))
}

// reserveReq is one ReserveBlock call as its find-space passes see it.
type reserveReq struct {
	ns          Namespace
	key, parent Key
	meta        BlockMeta
	size        int
	class       int   // size class of size
	slotBytes   int64 // bytes of a slot of class
	admitted    bool  // no Config.Policy, meta.Demand, or Policy.Admit said yes
	ownOnly     bool  // the tenant is at its DRAM quota: evict only its blocks
}

// reserveStep is what a ReserveBlock pass does next.
type reserveStep uint8

const (
	stepNext      reserveStep = iota // go on (the next pass counts as an attempt)
	stepAgainFree                    // pass again; this pass was not an attempt
	stepGiveUp                       // answer ErrNoSpace
)

// rejectTooLarge answers a ReserveBlock of size bytes, beyond MaxClass.
func (s *Store) rejectTooLarge(size int) (Reservation, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.closed {
		return Reservation{}, ErrClosed
	}
	s.mu.st.PutRejects++
	return Reservation{}, fmt.Errorf("%w: %d bytes (max %d)", ErrTooLarge, size, s.cfg.MaxClass)
}

// refuseLocked counts a refused ReserveBlock, drops the lock and returns err.
func (s *Store) refuseLocked(err error) (Reservation, error) {
	s.mu.st.PutRejects++
	s.mu.Unlock()
	return Reservation{}, err
}

// gateLocked checks, on each pass of a ReserveBlock, that the key is not taken,
// that Config.Policy admits the block and that the tenant's share allows
// the slot. stepAgainFree: it evicted one of the tenant's own blocks to
// stay within its DRAM quota.
//
// The tenant's share is checked before any space is looked for, and again
// on every pass (the lock may have been dropped, and the tenant's other
// reservations may have taken the rest of its share); the slot is charged
// when it is taken, under the same lock as the last check. A tenant with a
// DRAM quota that this block would take past it evicts its own blocks
// first, and from then on this ReserveBlock evicts nothing of another tenant's
// (tenantquota.go).
func (s *Store) gateLocked(rq *reserveReq) (reserveStep, error) {
	if idx, ok := s.mu.index[rq.key]; ok {
		if e := &s.mu.entries[idx]; e.state == statePublished && e.ns == rq.ns {
			s.touchLocked(idx)
		}
		return stepNext, fmt.Errorf("%w: %s", ErrExists, rq.key)
	}
	if !rq.admitted {
		if !s.cfg.Policy.Admit(s.policyBlockLocked(rq.ns, rq.parent, rq.meta)) {
			s.mu.st.NotAdmitted++
			return stepNext, fmt.Errorf("%w: %s", ErrNotAdmitted, rq.key)
		}
		rq.admitted = true
	}
	tenant := rq.meta.Tenant
	if over, limit := s.mu.tenants.overQuota(tenant, rq.slotBytes); over {
		rq.ownOnly = true
		if cand, ok := s.ownCandidateLocked(tenant, rq.class, true); ok && rq.slotBytes <= limit {
			s.evictLocked(cand)
			s.mu.st.QuotaEvictions++
			return stepAgainFree, nil
		}
		s.mu.st.TenantRejects++
		return stepNext, fmt.Errorf("%w: tenant %q, DRAM quota %d bytes", ErrTenantQuota, tenant, limit)
	}
	if !s.mu.tenants.fits(tenant, rq.slotBytes) {
		s.mu.st.TenantRejects++
		return stepNext, fmt.Errorf("%w: tenant %q, cap %d bytes", ErrTenantQuota, tenant, s.mu.tenants.holdCap)
	}
	return stepNext, nil
}

// findSpaceLocked makes room for a slot of rq's class when none is free:
// it maps a new slab while the budget allows, converts an empty slab of
// another class, or evicts (see ReserveBlock for the order).
func (s *Store) findSpaceLocked(rq *reserveReq) (reserveStep, error) {
	k := rq.class
	if sz := int64(s.cl.slabSize(k)); s.mu.budget+sz <= s.cfg.CapacityBytes {
		return stepNext, s.growLocked(k)
	}
	if s.mu.emptySlabs > 0 {
		if id, ok := s.findEmptySlabLocked(k); ok {
			s.convertSlabLocked(id, k)
			return stepNext, nil
		}
	}
	if rq.ownOnly {
		return s.evictOwnLocked(rq)
	}
	if s.mu.remaps > 0 {
		// Another ReserveBlock is mapping a slab (or unmapping one for a
		// class change) with the lock dropped: the budget it holds
		// becomes free slots, or comes back, when it ends. Wait for
		// that instead of evicting a cached block or answering no
		// space: writers arriving together on a store still mapping its
		// slabs would otherwise evict blocks while room is on its way.
		// Waiting is not an attempt, and every wake-up follows a remap
		// that finished.
		if h := s.hooks.waitRoom; h != nil {
			h()
		}
		s.room.Wait()
		return stepAgainFree, nil
	}
	// Evict in class k, unless another class holds a slab whose blocks
	// are all older than that: then the slab changes class.
	var cand uint32
	var ok bool
	if s.cfg.Policy == nil {
		cand, ok = s.candidateLocked(k)
	} else {
		cand, ok = s.policyCandidateLocked(k)
	}
	limit := uint64(math.MaxUint64)
	if ok {
		limit = s.mu.entries[cand].tick
	}
	if id, found := s.pickVictimSlabLocked(k, limit); found && s.reclaimSlabLocked(id) {
		s.convertSlabLocked(id, k)
		return stepNext, nil
	}
	if ok {
		s.evictLocked(cand)
		return stepNext, nil
	}
	return stepGiveUp, nil
}

// evictOwnLocked makes room for a ReserveBlock of a tenant at its DRAM quota,
// which evicts only the tenant's own blocks.
func (s *Store) evictOwnLocked(rq *reserveReq) (reserveStep, error) {
	if cand, ok := s.ownCandidateLocked(rq.meta.Tenant, rq.class, false); ok {
		s.evictLocked(cand)
		s.mu.st.QuotaEvictions++
		return stepNext, nil
	}
	if s.mu.remaps > 0 {
		s.room.Wait()
		return stepAgainFree, nil
	}
	return stepNext, fmt.Errorf("%w: class %d bytes (tenant %q at its DRAM quota evicts only its own blocks)", ErrNoSpace, s.cl.size(rq.class), rq.meta.Tenant)
}

// attemptsFor bounds the find-space passes of one ReserveBlock of class k. A
// slab of a large class (64 MiB for a 64 MiB LMCache chunk) may need the
// memory of many smaller slabs when SlabBytes is small: each of them is
// emptied and unmapped in a pass of its own before the large slab can be
// mapped, so the bound grows by the number of SlabBytes mappings one slab
// of class k takes. Without it a store of 1 MiB slabs answered ErrNoSpace
// to a 64 MiB block with the whole store evictable.
func (s *Store) attemptsFor(k int) int {
	return maxReserveAttempts + s.cl.slabSize(k)/s.cfg.SlabBytes
}

// reserveSlotLocked creates the in-flight entry for a taken slot.
func (s *Store) reserveSlotLocked(ns Namespace, key, parent Key, meta BlockMeta, size, k int, sid, slot, tenant, owner uint32) Reservation {
	idx := s.newEntryLocked()
	e := &s.mu.entries[idx]
	*e = entry{
		key: key, ns: ns, parent: parent,
		slab: sid, slot: slot, length: uint32(size), tokens: meta.Tokens,
		gen: e.gen, class: uint8(k), state: stateReserved, tenant: tenant, owner: owner,
	}
	if s.mu.meta != nil {
		s.mu.meta[idx] = entryMeta{position: meta.Position, partial: meta.Partial}
	}
	s.mu.slabs[sid].owner[slot] = idx
	s.mu.index[key] = idx
	s.mu.st.InFlight++
	s.mu.st.BytesReserved += uint64(s.cl.size(k))
	r := ref{idx: idx, gen: e.gen}
	return Reservation{Buf: s.bytesLocked(e), tk: s.resvTicketLocked(r), ref: r}
}
