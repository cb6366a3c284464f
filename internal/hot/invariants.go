//go:build invariants || race

package hot

// The invariants build (-tags invariants, or -race, which scripts/test
// uses): the store checks that every View is released and every
// Reservation committed or aborted exactly once, and checkInvariants walks
// the whole store. A release build compiles invariants_off.go instead,
// whose no-op stubs the compiler inlines away: View and Reservation carry
// no ticket and the hot path takes no extra step.

import (
	"errors"
	"fmt"
)

// invariantsOn reports whether this is the invariants build.
const invariantsOn = true

// ticket names one View or one Reservation handed out, so that a second
// Release (or Commit, or Abort) of it is told apart from another holder's
// first: a View's ref names the entry, which every reader of the block
// shares. Zero: a zero View or Reservation, never handed out.
type ticket struct{ n uint64 }

// tracker is what the store has handed out and not yet taken back.
// Guarded by Store.mu. The maps stay across Close: a View released after
// Close is not a misuse, and its ticket is still found.
type tracker struct {
	next  uint64         // last ticket issued
	views map[uint64]ref // Views not yet released, by ticket
	resvs map[uint64]ref // Reservations not yet committed or aborted, by ticket
}

// viewTicketLocked records a View of r handed out.
func (s *Store) viewTicketLocked(r ref) ticket {
	t := &s.mu.handed
	if t.views == nil {
		t.views = make(map[uint64]ref)
	}
	t.next++
	t.views[t.next] = r
	return ticket{t.next}
}

// resvTicketLocked records a Reservation of r handed out.
func (s *Store) resvTicketLocked(r ref) ticket {
	t := &s.mu.handed
	if t.resvs == nil {
		t.resvs = make(map[uint64]ref)
	}
	t.next++
	t.resvs[t.next] = r
	return ticket{t.next}
}

// releaseTicketLocked takes back the View of tk; false reports a View
// released before (a misuse: reported, and the Release does nothing, so
// another reader's pin survives).
func (s *Store) releaseTicketLocked(tk ticket, r ref) bool {
	if tk.n == 0 {
		return true // a zero View: Release ignores it
	}
	if _, ok := s.mu.handed.views[tk.n]; !ok {
		s.misuse(fmt.Errorf("%w (entry %d gen %d)", errReleasedTwice, r.idx, r.gen))
		return false
	}
	delete(s.mu.handed.views, tk.n)
	return true
}

// settleTicketLocked takes back the Reservation of tk for op (Commit,
// Abort or CommitAcquire); false reports one settled before (reported; the
// call does nothing).
func (s *Store) settleTicketLocked(tk ticket, r ref, op string) bool {
	if tk.n == 0 {
		return true // a zero Reservation: ignored
	}
	if _, ok := s.mu.handed.resvs[tk.n]; !ok {
		s.misuse(fmt.Errorf("%w: %s (entry %d gen %d)", errSettledTwice, op, r.idx, r.gen))
		return false
	}
	delete(s.mu.handed.resvs, tk.n)
	return true
}

// misuse reports a broken ownership contract: to the test hook if one is
// set, else by panicking (with the store's lock held; every caller unlocks
// in a defer).
func (s *Store) misuse(err error) {
	if s.hooks.misuse != nil {
		s.hooks.misuse(err)
		return
	}
	panic(err)
}

// checkHandedLocked compares the Views and Reservations handed out with
// the entries' pin counts and the in-flight gauge.
func (s *Store) checkHandedLocked() error {
	es := s.mu.entries
	pins := make(map[uint32]uint32, len(s.mu.handed.views))
	for tk, r := range s.mu.handed.views {
		if int(r.idx) >= len(es) || es[r.idx].gen != r.gen || es[r.idx].state != statePublished {
			return fmt.Errorf("invariant: View %d of entry %d/%d outlived its block", tk, r.idx, r.gen)
		}
		pins[r.idx]++
	}
	for i := s.cl.n; i < len(es); i++ {
		if es[i].pins != pins[uint32(i)] {
			return fmt.Errorf("invariant: entry %d has %d pins, %d Views out", i, es[i].pins, pins[uint32(i)])
		}
	}
	for tk, r := range s.mu.handed.resvs {
		if int(r.idx) >= len(es) || es[r.idx].gen != r.gen || es[r.idx].state != stateReserved {
			return fmt.Errorf("invariant: Reservation %d of entry %d/%d outlived its slot", tk, r.idx, r.gen)
		}
	}
	if got := uint64(len(s.mu.handed.resvs)); got != s.mu.st.InFlight {
		return fmt.Errorf("invariant: %d Reservations out, InFlight %d", got, s.mu.st.InFlight)
	}
	return nil
}

// checkInvariants walks the whole store and reports the first inconsistency
// between the index, the LRU lists, the slabs, the leases, the Views and
// Reservations handed out, the gauges in Stats and, with a Config.Policy,
// the policy's block count. It is O(entries + slots) and takes the lock;
// tests call it after each operation sequence.
func (s *Store) checkInvariants() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.closed {
		return nil
	}
	if err := s.checkHandedLocked(); err != nil {
		return err
	}
	a := audit{s: s, es: s.mu.entries}
	for _, step := range []func() error{
		a.lists, a.freeList, a.leaseRefs, a.entries, a.policy, a.children, a.slabs,
	} {
		if err := step(); err != nil {
			return err
		}
	}
	return a.gauges()
}

// audit is one checkInvariants walk: each step checks one structure of the
// store and records what the later steps compare against. The store's lock
// is held throughout.
type audit struct {
	s  *Store
	es []entry

	onList []bool               // entries found on an LRU list (lists)
	free   map[uint32]bool      // entries on the free list (freeList)
	leases map[uint32]uint32    // lease pins per entry (leaseRefs)
	held   map[uint32]tenantRec // recomputed per tenant id (leaseRefs, entries)
	kids   map[kidKey]uint32    // published children per (parent, ns) (entries)
	want   Stats                // the gauges as recounted (entries, slabs)
}

// invariantf formats an invariant violation.
func invariantf(format string, args ...any) error {
	return fmt.Errorf("invariant: "+format, args...)
}

// lists checks the LRU lists: well linked, members are published leaves
// of the class.
func (a *audit) lists() error {
	es := a.es
	a.onList = make([]bool, len(es))
	for c := range a.s.cl.n {
		sent := uint32(c)
		if es[sent].state != stateSentinel {
			return invariantf("entry %d is not a sentinel", c)
		}
		prev, p := sent, es[sent].next
		for steps := 0; p != sent; steps++ {
			if steps > len(es) {
				return invariantf("class %d: LRU list loops", c)
			}
			e := &es[p]
			if e.prev != prev {
				return invariantf("class %d: entry %d prev %d, want %d", c, p, e.prev, prev)
			}
			if !e.linked || a.onList[p] || int(e.class) != c || e.state != statePublished || e.children != 0 || e.leases != 0 {
				return invariantf("class %d: bad list member %d (linked %v state %d children %d class %d)",
					c, p, e.linked, e.state, e.children, e.class)
			}
			a.onList[p] = true
			prev, p = p, e.next
		}
		if es[sent].prev != prev {
			return invariantf("class %d: tail %d, want %d", c, es[sent].prev, prev)
		}
	}
	return nil
}

// freeList checks that the free list holds free entries, each once.
func (a *audit) freeList() error {
	a.free = make(map[uint32]bool, len(a.s.mu.freeEntries))
	for _, idx := range a.s.mu.freeEntries {
		if a.free[idx] || a.es[idx].state != stateFree {
			return invariantf("free list entry %d (state %d) repeated or in use", idx, a.es[idx].state)
		}
		a.free[idx] = true
	}
	return nil
}

// leaseRefs checks each lease's charge against its pins and counts the
// pins per entry and the bytes held per tenant.
func (a *audit) leaseRefs() error {
	s, es := a.s, a.es
	a.leases = make(map[uint32]uint32)
	a.held = make(map[uint32]tenantRec)
	for _, l := range s.mu.leases {
		if l.tenant != 0 {
			h := a.held[l.tenant]
			h.held += l.bytes
			h.leases++
			a.held[l.tenant] = h
		}
		var bytes int64
		for _, r := range l.refs {
			bytes += int64(s.cl.size(int(es[r.idx].class)))
		}
		if l.tenant != 0 && bytes != l.bytes {
			return invariantf("lease charged %d bytes, pins %d", l.bytes, bytes)
		}
		for _, r := range l.refs {
			if es[r.idx].gen != r.gen {
				return invariantf("lease holds stale ref %d/%d", r.idx, r.gen)
			}
			a.leases[r.idx]++
		}
	}
	return nil
}

// charge adds n bytes to tenant id's owned (owner) or held (!owner)
// bytes; id 0 is no tenant.
func (a *audit) charge(id uint32, n int64, owner bool) {
	if id == 0 {
		return
	}
	h := a.held[id]
	if owner {
		h.owned += n
	} else {
		h.held += n
	}
	a.held[id] = h
}

// entries checks every entry against the index, the slabs and the gauges,
// then the tenant table against what the entries and leases hold.
func (a *audit) entries() error {
	s := a.s
	a.kids = make(map[kidKey]uint32)
	live := 0
	for i := s.cl.n; i < len(a.es); i++ {
		e := &a.es[i]
		if e.state == stateFree {
			if !a.free[uint32(i)] {
				return invariantf("free entry %d not on the free list", i)
			}
			continue
		}
		if err := a.entryState(i, e); err != nil {
			return err
		}
		live++
		a.want.BytesReserved += uint64(s.cl.size(int(e.class)))
		if err := a.entrySlot(i, e); err != nil {
			return err
		}
	}
	if live != len(s.mu.index) {
		return invariantf("%d live entries, %d indexed", live, len(s.mu.index))
	}
	return s.checkTenantsLocked(a.held)
}

// entryState checks and counts entry i by its state (reserved or
// published).
func (a *audit) entryState(i int, e *entry) error {
	switch e.state {
	case stateReserved:
		size := int64(a.s.cl.size(int(e.class)))
		a.want.InFlight++
		a.charge(e.owner, size, true)
		a.charge(e.tenant, size, false)
		if e.linked || e.pins != 0 || e.leases != 0 {
			return invariantf("in-flight entry %d linked or pinned", i)
		}
	case statePublished:
		a.charge(e.owner, int64(a.s.cl.size(int(e.class))), true)
		a.want.Blocks++
		a.want.BytesCached += uint64(e.length)
		if !e.parent.IsZero() {
			a.kids[kidKey{e.parent, e.ns}]++
		}
		if e.pinned() {
			a.want.Pinned++
		}
		if e.linked != (e.children == 0 && e.leases == 0) || e.linked != a.onList[i] {
			return invariantf("entry %d linked %v, children %d, leases %d, on list %v", i, e.linked, e.children, e.leases, a.onList[i])
		}
	default:
		return invariantf("entry %d in state %d", i, e.state)
	}
	return nil
}

// entrySlot checks live entry i against the index, its lease pins and the
// slab slot it names.
func (a *audit) entrySlot(i int, e *entry) error {
	s, idx := a.s, uint32(i)
	if got, ok := s.mu.index[e.key]; !ok || got != idx {
		return invariantf("entry %d not indexed under its key", i)
	}
	if e.leases != a.leases[idx] {
		return invariantf("entry %d leases %d, want %d", i, e.leases, a.leases[idx])
	}
	if int(e.slab) >= len(s.mu.slabs) {
		return invariantf("entry %d slab %d out of range", i, e.slab)
	}
	sl := &s.mu.slabs[e.slab]
	if sl.mem == nil || sl.class != int(e.class) || int(e.slot) >= len(sl.owner) || sl.owner[e.slot] != idx {
		return invariantf("entry %d slot %d/%d not owned", i, e.slab, e.slot)
	}
	if int(e.length) > sl.slotSize {
		return invariantf("entry %d length %d > slot %d", i, e.length, sl.slotSize)
	}
	return nil
}

// policy checks, with a Config.Policy, its block count and meta records.
func (a *audit) policy() error {
	p := a.s.cfg.Policy
	if p == nil {
		return nil
	}
	if got := p.Len(); uint64(got) != a.want.Blocks {
		return invariantf("policy %s tracks %d blocks, %d published", p.Name(), got, a.want.Blocks)
	}
	if len(a.s.mu.meta) != len(a.es) {
		return invariantf("%d policy meta records for %d entries", len(a.s.mu.meta), len(a.es))
	}
	return nil
}

// children checks the children counts and the sibling lists against the
// published entries' parents.
func (a *audit) children() error {
	es, kids := a.es, a.kids
	for i := a.s.cl.n; i < len(es); i++ {
		e := &es[i]
		if e.state == statePublished && e.children != kids[kidKey{e.key, e.ns}] {
			return invariantf("entry %d children %d, want %d", i, e.children, kids[kidKey{e.key, e.ns}])
		}
	}
	if len(kids) != len(a.s.mu.kids) {
		return invariantf("kids map has %d parents, want %d", len(a.s.mu.kids), len(kids))
	}
	for k, v := range kids {
		if err := a.siblings(k, v); err != nil {
			return err
		}
	}
	return nil
}

// siblings checks the sibling list of (parent, ns) k: v published
// children of k, well linked.
func (a *audit) siblings(k kidKey, v uint32) error {
	kl := a.s.mu.kids[k]
	if kl.n != v {
		return invariantf("kids[%s].n = %d, want %d", k.parent, kl.n, v)
	}
	prev, got := uint32(0), uint32(0)
	for c := kl.head; c != 0; prev, c = c, a.es[c].sibNext {
		if got++; got > v {
			return invariantf("kids[%s] list longer than %d", k.parent, v)
		}
		e := &a.es[c]
		if e.state != statePublished || e.parent != k.parent || e.ns != k.ns || e.sibPrev != prev {
			return invariantf("kids[%s] lists a stranger %d", k.parent, c)
		}
	}
	if got != v {
		return invariantf("kids[%s] list has %d, want %d", k.parent, got, v)
	}
	return nil
}

// slabs checks the slot accounting and the byte budget.
func (a *audit) slabs() error {
	s := a.s
	var mapped int64
	empty := 0
	for i := range s.mu.slabs {
		sl := &s.mu.slabs[i]
		if sl.mem == nil {
			continue
		}
		a.want.Slabs++
		mapped += int64(len(sl.mem))
		used, err := a.slab(i, sl)
		if err != nil {
			return err
		}
		if used == 0 {
			empty++
		}
	}
	if empty != s.mu.emptySlabs {
		return invariantf("%d empty slabs, counted %d", empty, s.mu.emptySlabs)
	}
	a.want.BytesMapped = uint64(mapped)
	if mapped > s.cfg.CapacityBytes || s.mu.budget > s.cfg.CapacityBytes || mapped > s.mu.budget {
		return invariantf("mapped %d, budget %d, capacity %d", mapped, s.mu.budget, s.cfg.CapacityBytes)
	}
	return nil
}

// slab checks mapped slab i's carving, owners and avail listing, and
// returns its slots in use.
func (a *audit) slab(i int, sl *slab) (int, error) {
	if len(sl.owner) != len(sl.mem)/sl.slotSize || sl.slotSize != a.s.cl.size(sl.class) {
		return 0, invariantf("slab %d carved wrong", i)
	}
	used := 0
	for _, o := range sl.owner {
		if o != 0 {
			used++
		}
	}
	if used != sl.used() {
		return 0, invariantf("slab %d: %d owners, %d used", i, used, sl.used())
	}
	inAvail := false
	for _, id := range a.s.mu.avail[sl.class] {
		inAvail = inAvail || id == uint32(i)
	}
	if inAvail != sl.inAvail || (len(sl.free) > 0 && !sl.inAvail) {
		return 0, invariantf("slab %d avail flag %v, listed %v, free %d", i, sl.inAvail, inAvail, len(sl.free))
	}
	return used, nil
}

// gauges compares Stats with the recount, reporting every gauge off.
func (a *audit) gauges() error {
	st, want := a.s.mu.st, a.want
	type gauge struct {
		name      string
		got, want uint64
	}
	var errs []error
	for _, g := range []gauge{
		{"Blocks", st.Blocks, want.Blocks},
		{"BytesCached", st.BytesCached, want.BytesCached},
		{"BytesReserved", st.BytesReserved, want.BytesReserved},
		{"BytesMapped", st.BytesMapped, want.BytesMapped},
		{"Pinned", st.Pinned, want.Pinned},
		{"InFlight", st.InFlight, want.InFlight},
		{"Slabs", st.Slabs, want.Slabs},
	} {
		if g.got != g.want {
			errs = append(errs, invariantf("Stats.%s = %d, want %d", g.name, g.got, g.want))
		}
	}
	return errors.Join(errs...)
}

// checkTenantsLocked compares the tenant table with what the leases and
// reservations hold (want, by tenant id).
func (s *Store) checkTenantsLocked(want map[uint32]tenantRec) error {
	t := &s.mu.tenants
	if err := t.checkFree(); err != nil {
		return err
	}
	for name, id := range t.ids {
		r := t.recs[id]
		w := want[id]
		if r.name != name || r.held != w.held || r.leases != w.leases || r.owned != w.owned || (r.held == 0 && r.leases == 0 && r.owned == 0) {
			return fmt.Errorf("invariant: tenant %q holds %d bytes in %d leases and owns %d, want %d in %d owning %d", name, r.held, r.leases, r.owned, w.held, w.leases, w.owned)
		}
		delete(want, id)
	}
	if len(want) != 0 {
		return fmt.Errorf("invariant: leases or reservations charge unknown tenant ids %v", want)
	}
	return nil
}

// checkFree checks the free tenant ids: in range, once each, with empty
// records, and with the ids in use accounting for every record.
func (t *tenantTable) checkFree() error {
	free := make(map[uint32]bool, len(t.free))
	for _, id := range t.free {
		if id == 0 || int(id) >= len(t.recs) || free[id] || t.recs[id] != (tenantRec{}) {
			return fmt.Errorf("invariant: tenant id %d free twice, out of range or in use", id)
		}
		free[id] = true
	}
	if len(t.ids)+len(t.free)+1 != len(t.recs) {
		return fmt.Errorf("invariant: %d tenant ids + %d free + 1 != %d records", len(t.ids), len(t.free), len(t.recs))
	}
	return nil
}
