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
	bad := func(format string, args ...any) error {
		return fmt.Errorf("invariant: "+format, args...)
	}
	if err := s.checkHandedLocked(); err != nil {
		return err
	}
	es := s.mu.entries
	n := s.cl.n

	// LRU lists: well linked, members are published leaves of the class.
	onList := make([]bool, len(es))
	for c := range n {
		sent := uint32(c)
		if es[sent].state != stateSentinel {
			return bad("entry %d is not a sentinel", c)
		}
		prev, p := sent, es[sent].next
		for steps := 0; p != sent; steps++ {
			if steps > len(es) {
				return bad("class %d: LRU list loops", c)
			}
			e := &es[p]
			if e.prev != prev {
				return bad("class %d: entry %d prev %d, want %d", c, p, e.prev, prev)
			}
			if !e.linked || onList[p] || int(e.class) != c || e.state != statePublished || e.children != 0 || e.leases != 0 {
				return bad("class %d: bad list member %d (linked %v state %d children %d class %d)",
					c, p, e.linked, e.state, e.children, e.class)
			}
			onList[p] = true
			prev, p = p, e.next
		}
		if es[sent].prev != prev {
			return bad("class %d: tail %d, want %d", c, es[sent].prev, prev)
		}
	}

	// Entries against the index, the slabs and the gauges.
	var want Stats
	free := make(map[uint32]bool, len(s.mu.freeEntries))
	for _, idx := range s.mu.freeEntries {
		if free[idx] || es[idx].state != stateFree {
			return bad("free list entry %d (state %d) repeated or in use", idx, es[idx].state)
		}
		free[idx] = true
	}
	kids := make(map[kidKey]uint32)
	leases := make(map[uint32]uint32)
	held := make(map[uint32]tenantRec) // recomputed per tenant id
	for _, l := range s.mu.leases {
		if l.tenant != 0 {
			h := held[l.tenant]
			h.held += l.bytes
			h.leases++
			held[l.tenant] = h
		}
		var bytes int64
		for _, r := range l.refs {
			bytes += int64(s.cl.size(int(es[r.idx].class)))
		}
		if l.tenant != 0 && bytes != l.bytes {
			return bad("lease charged %d bytes, pins %d", l.bytes, bytes)
		}
		for _, r := range l.refs {
			if es[r.idx].gen != r.gen {
				return bad("lease holds stale ref %d/%d", r.idx, r.gen)
			}
			leases[r.idx]++
		}
	}
	live := 0
	for i := n; i < len(es); i++ {
		idx := uint32(i)
		e := &es[i]
		switch e.state {
		case stateFree:
			if !free[idx] {
				return bad("free entry %d not on the free list", i)
			}
			continue
		case stateReserved:
			want.InFlight++
			if e.owner != 0 {
				h := held[e.owner]
				h.owned += int64(s.cl.size(int(e.class)))
				held[e.owner] = h
			}
			if e.tenant != 0 {
				h := held[e.tenant]
				h.held += int64(s.cl.size(int(e.class)))
				held[e.tenant] = h
			}
			if e.linked || e.pins != 0 || e.leases != 0 {
				return bad("in-flight entry %d linked or pinned", i)
			}
		case statePublished:
			if e.owner != 0 {
				h := held[e.owner]
				h.owned += int64(s.cl.size(int(e.class)))
				held[e.owner] = h
			}
			want.Blocks++
			want.BytesCached += uint64(e.length)
			if !e.parent.IsZero() {
				kids[kidKey{e.parent, e.ns}]++
			}
			if e.pinned() {
				want.Pinned++
			}
			if e.linked != (e.children == 0 && e.leases == 0) || e.linked != onList[i] {
				return bad("entry %d linked %v, children %d, leases %d, on list %v", i, e.linked, e.children, e.leases, onList[i])
			}
		default:
			return bad("entry %d in state %d", i, e.state)
		}
		live++
		want.BytesReserved += uint64(s.cl.size(int(e.class)))
		if got, ok := s.mu.index[e.key]; !ok || got != idx {
			return bad("entry %d not indexed under its key", i)
		}
		if e.leases != leases[idx] {
			return bad("entry %d leases %d, want %d", i, e.leases, leases[idx])
		}
		if int(e.slab) >= len(s.mu.slabs) {
			return bad("entry %d slab %d out of range", i, e.slab)
		}
		sl := &s.mu.slabs[e.slab]
		if sl.mem == nil || sl.class != int(e.class) || int(e.slot) >= len(sl.owner) || sl.owner[e.slot] != idx {
			return bad("entry %d slot %d/%d not owned", i, e.slab, e.slot)
		}
		if int(e.length) > sl.slotSize {
			return bad("entry %d length %d > slot %d", i, e.length, sl.slotSize)
		}
	}
	if live != len(s.mu.index) {
		return bad("%d live entries, %d indexed", live, len(s.mu.index))
	}
	if err := s.checkTenantsLocked(held); err != nil {
		return err
	}
	if p := s.cfg.Policy; p != nil {
		if got := p.Len(); uint64(got) != want.Blocks {
			return bad("policy %s tracks %d blocks, %d published", p.Name(), got, want.Blocks)
		}
		if len(s.mu.meta) != len(es) {
			return bad("%d policy meta records for %d entries", len(s.mu.meta), len(es))
		}
	}
	for i := n; i < len(es); i++ {
		e := &es[i]
		if e.state == statePublished && e.children != kids[kidKey{e.key, e.ns}] {
			return bad("entry %d children %d, want %d", i, e.children, kids[kidKey{e.key, e.ns}])
		}
	}
	if len(kids) != len(s.mu.kids) {
		return bad("kids map has %d parents, want %d", len(s.mu.kids), len(kids))
	}
	for k, v := range kids {
		kl := s.mu.kids[k]
		if kl.n != v {
			return bad("kids[%s].n = %d, want %d", k.parent, kl.n, v)
		}
		prev, got := uint32(0), uint32(0)
		for c := kl.head; c != 0; prev, c = c, es[c].sibNext {
			if got++; got > v {
				return bad("kids[%s] list longer than %d", k.parent, v)
			}
			e := &es[c]
			if e.state != statePublished || e.parent != k.parent || e.ns != k.ns || e.sibPrev != prev {
				return bad("kids[%s] lists a stranger %d", k.parent, c)
			}
		}
		if got != v {
			return bad("kids[%s] list has %d, want %d", k.parent, got, v)
		}
	}

	// Slabs: slot accounting and the byte budget.
	var mapped int64
	empty := 0
	for i := range s.mu.slabs {
		sl := &s.mu.slabs[i]
		if sl.mem == nil {
			continue
		}
		want.Slabs++
		mapped += int64(len(sl.mem))
		if len(sl.owner) != len(sl.mem)/sl.slotSize || sl.slotSize != s.cl.size(sl.class) {
			return bad("slab %d carved wrong", i)
		}
		used := 0
		for _, o := range sl.owner {
			if o != 0 {
				used++
			}
		}
		if used != sl.used() {
			return bad("slab %d: %d owners, %d used", i, used, sl.used())
		}
		if used == 0 {
			empty++
		}
		inAvail := false
		for _, id := range s.mu.avail[sl.class] {
			inAvail = inAvail || id == uint32(i)
		}
		if inAvail != sl.inAvail || (len(sl.free) > 0 && !sl.inAvail) {
			return bad("slab %d avail flag %v, listed %v, free %d", i, sl.inAvail, inAvail, len(sl.free))
		}
	}
	if empty != s.mu.emptySlabs {
		return bad("%d empty slabs, counted %d", empty, s.mu.emptySlabs)
	}
	want.BytesMapped = uint64(mapped)
	if mapped > s.cfg.CapacityBytes || s.mu.budget > s.cfg.CapacityBytes || mapped > s.mu.budget {
		return bad("mapped %d, budget %d, capacity %d", mapped, s.mu.budget, s.cfg.CapacityBytes)
	}

	st := s.mu.st
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
			errs = append(errs, bad("Stats.%s = %d, want %d", g.name, g.got, g.want))
		}
	}
	return errors.Join(errs...)
}

// checkTenantsLocked compares the tenant table with what the leases and
// reservations hold (want, by tenant id).
func (s *Store) checkTenantsLocked(want map[uint32]tenantRec) error {
	t := &s.mu.tenants
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
