package directory

// waiterState is where a Waiter is in its life. Guarded by its fill's
// stripe lock.
type waiterState uint8

const (
	waiterWaiting  waiterState = iota // in the fill's queue, holding a credit
	waiterPromoted                    // got Promoted; leads (or led) turn Waiter.turn
	waiterDone                        // got Finished, Failed or Fenced, or withdrew
)

// Waiter is a caller's place among the waiters of a fill. It receives
// exactly one Notice on C(). The Directory owns the waiter's credit until
// that notice is sent; the caller owns nothing it must release, but should
// Cancel a waiter it stops listening to (a disconnecting session can use
// LeaveOwner instead), so its credit is not held until the fill ends.
type Waiter struct {
	d     *Directory  // immutable
	f     *fill       // immutable
	owner uint64      // immutable
	ch    chan Notice // buffered 1; sent to exactly once, under f.s.mu

	state      waiterState // guarded by f.s.mu
	turn       uint32      // guarded by f.s.mu; the turn it was promoted to
	prev, next *Waiter     // guarded by f.s.mu; the fill's FIFO
}

// C returns the channel that receives the waiter's one notice. The notice
// stays in the channel until read.
func (w *Waiter) C() <-chan Notice { return w.ch }

// Fill returns the id of the fill the waiter joined.
func (w *Waiter) Fill() FillID { return w.f.id }

// Cancel withdraws the waiter. A waiter still waiting leaves the queue,
// releases its credit and gets a Failed notice (so a goroutine blocked on
// C() is released). A waiter that was Promoted but whose notice is still
// unread takes the notice back (C() then yields Failed instead) and passes
// its turn to the next waiter as Fail would, if the turn is still live. A
// waiter whose notice was read, or that was already notified otherwise, is
// left as it is: in particular a caller that read Promoted leads, and a
// later Cancel does not take that from it. Cancel is idempotent.
func (w *Waiter) Cancel() {
	d, f := w.d, w.f
	f.s.mu.Lock()
	defer f.s.mu.Unlock()
	switch w.state {
	case waiterWaiting:
		d.endWaiter(w, Notice{Kind: Failed})
		d.stats.withdrawn.Add(1)
	case waiterPromoted:
		w.state = waiterDone
		select {
		case <-w.ch: // unread: take it back
			w.ch <- Notice{Kind: Failed}
			d.stats.withdrawn.Add(1)
			if !f.removed && f.leader == w && f.turn == w.turn {
				d.failover(f, d.cfg.Now())
			}
		default: // read: the caller leads; Finish or Fail is its to call
		}
	}
}
