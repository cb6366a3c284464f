package directory

import "time"

// Expire fails over, as Fail does, every leader whose turn passed its
// deadline (by Config.Now) and returns how many turns it ended. A promoted
// waiter's turn gets a fresh deadline, so a chain of silent leaders ends,
// one deadline at a time, in Failed after MaxTurns.
func (d *Directory) Expire() int {
	if d.closed.Load() {
		return 0
	}
	now := d.cfg.Now()
	n := 0
	for i := range d.stripes {
		s := &d.stripes[i]
		s.mu.Lock()
		// failover either removes the head (its fill ends) or moves its
		// deadline to now+FillDeadline, which is after now: the loop ends.
		for len(s.timers) > 0 && !s.timers[0].deadline.After(now) {
			d.failover(s.timers[0], now)
			n++
		}
		s.mu.Unlock()
	}
	d.stats.expired.Add(uint64(n))
	return n
}

// NextDeadline returns the earliest deadline of a live leader's turn, so the
// caller can schedule Expire rather than poll; false when no fill is live.
func (d *Directory) NextDeadline() (time.Time, bool) {
	var next time.Time
	ok := false
	for i := range d.stripes {
		s := &d.stripes[i]
		s.mu.Lock()
		if len(s.timers) > 0 && (!ok || s.timers[0].deadline.Before(next)) {
			next, ok = s.timers[0].deadline, true
		}
		s.mu.Unlock()
	}
	return next, ok
}

// LeaveOwner ends everything session owner holds, for a disconnect: its
// waiting waiters are withdrawn (credit released, Failed notice), and then
// every fill it leads (including turns it got by promotion) is failed over
// as Fail does, so the turn never passes to the departing session itself.
func (d *Directory) LeaveOwner(owner uint64) {
	if d.closed.Load() {
		return
	}
	var now time.Time
	for i := range d.stripes {
		s := &d.stripes[i]
		s.mu.Lock()
		for _, f := range s.fills {
			for w := f.head; w != nil; {
				next := w.next
				if w.owner == owner {
					d.endWaiter(w, Notice{Kind: Failed})
					d.stats.withdrawn.Add(1)
				}
				w = next
			}
			if f.owner == owner {
				if now.IsZero() {
					now = d.cfg.Now()
				}
				d.failover(f, now)
			}
		}
		s.mu.Unlock()
	}
}
