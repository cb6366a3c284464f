package directory

import (
	"container/heap"
	"time"
)

// fill is one flight: a leader's turn and the waiters behind it, in FIFO
// order. Every mutable field is guarded by s.mu.
type fill struct {
	id    FillID    // immutable
	key   flightKey // immutable
	s     *stripe   // immutable: the stripe of key
	epoch Epoch     // immutable: the epoch the fill started under

	turn     uint32    // the live leader's turn, from 1
	owner    uint64    // the live leader's session
	leader   *Waiter   // the promoted waiter that leads, nil for the first leader
	deadline time.Time // end of the live turn
	hidx     int       // index in s.timers; -1 once removed

	head, tail *Waiter // waiting waiters, FIFO
	removed    bool    // finished, failed, fenced or closed; never live again
}

func (d *Directory) token(f *fill) Token {
	return Token{Shard: d.cfg.Shard, Fill: f.id, Epoch: f.epoch, Turn: f.turn}
}

func (f *fill) enqueue(w *Waiter) {
	w.prev, w.next = f.tail, nil
	if f.tail != nil {
		f.tail.next = w
	} else {
		f.head = w
	}
	f.tail = w
}

func (f *fill) unlink(w *Waiter) {
	if w.prev != nil {
		w.prev.next = w.next
	} else {
		f.head = w.next
	}
	if w.next != nil {
		w.next.prev = w.prev
	} else {
		f.tail = w.prev
	}
	w.prev, w.next = nil, nil
}

// leaveWaiting takes a waiting waiter out of its fill's queue and releases
// its credit. This is the one place a credit is released. Requires s.mu.
func (d *Directory) leaveWaiting(w *Waiter) {
	w.f.unlink(w)
	d.credits.release(w.f.key.tenant)
	d.stats.waiters.Add(-1)
}

// endWaiter withdraws a waiting waiter with its one notice. Requires s.mu.
func (d *Directory) endWaiter(w *Waiter, n Notice) {
	d.leaveWaiting(w)
	w.state = waiterDone
	deliver(w, n)
}

// deliver sends a waiter's single notice. The channel has room for exactly
// one, and the state machine sends exactly once, so this never blocks.
func deliver(w *Waiter, n Notice) {
	select {
	case w.ch <- n:
	default:
		panic("gpucache/directory: second notice to a waiter")
	}
}

// failover ends the live turn of f, as Fail does: the head waiter is
// promoted, or, with none left or the turns spent, every waiter gets Failed
// and the fill is removed. Requires s.mu.
func (d *Directory) failover(f *fill, now time.Time) {
	if f.head == nil || int64(f.turn) >= int64(d.cfg.MaxTurns) {
		for w := f.head; w != nil; w = f.head {
			d.endWaiter(w, Notice{Kind: Failed})
		}
		d.remove(f)
		d.stats.failed.Add(1)
		return
	}
	w := f.head
	d.leaveWaiting(w)
	f.turn++
	f.owner = w.owner
	f.leader = w
	f.deadline = now.Add(d.cfg.FillDeadline)
	heap.Fix(&f.s.timers, f.hidx)
	w.state = waiterPromoted
	w.turn = f.turn
	deliver(w, Notice{Kind: Promoted, Token: d.token(f)})
	d.stats.promotions.Add(1)
}

// fence ends a fill whose epoch is older than the shard's: every waiter gets
// Fenced and the fill is removed. Requires s.mu.
func (d *Directory) fence(f *fill) {
	for w := f.head; w != nil; w = f.head {
		d.endWaiter(w, Notice{Kind: Fenced})
	}
	d.remove(f)
	d.stats.fenced.Add(1)
}

// remove takes a fill with no waiters out of the shard. Requires s.mu.
func (d *Directory) remove(f *fill) {
	f.removed = true
	f.leader = nil
	delete(f.s.fills, f.key)
	heap.Remove(&f.s.timers, f.hidx)
	d.ids.Delete(f.id)
	d.live.Add(-1)
	d.tenantFills.release(f.key.tenant)
}

// timerHeap orders a stripe's live fills by the deadline of their turn.
type timerHeap []*fill

func (h timerHeap) Len() int           { return len(h) }
func (h timerHeap) Less(i, j int) bool { return h[i].deadline.Before(h[j].deadline) }
func (h timerHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].hidx = i
	h[j].hidx = j
}
func (h *timerHeap) Push(x any) {
	f := x.(*fill)
	f.hidx = len(*h)
	*h = append(*h, f)
}
func (h *timerHeap) Pop() any {
	old := *h
	f := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	f.hidx = -1
	return f
}

func (h *timerHeap) push(f *fill) { heap.Push(h, f) }
