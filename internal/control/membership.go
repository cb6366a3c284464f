package control

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
)

// Membership is the cluster's member set as one node or client sees it.
type Membership interface {
	// Current is the latest view. It never blocks on the network.
	Current() View
	// Watch returns a channel that first holds the current view and then
	// receives every later view. The publisher never blocks: the channel
	// holds one view, and a slow reader that misses views finds only the
	// latest one (drop to latest; epochs only grow, so no reader needs the
	// ones in between). The channel is closed when ctx is done or the
	// membership is closed; a Watch on a closed membership or a done ctx
	// returns a closed channel.
	Watch(ctx context.Context) <-chan View
	// Close closes every watch channel. Current keeps answering the last
	// view. Close is idempotent.
	Close() error
}

// hub holds the current view and fans it out to watchers.
type hub struct {
	mu       sync.Mutex
	view     View
	closed   bool
	watchers map[*watcher]struct{}
}

type watcher struct {
	ch   chan View
	stop func() bool
}

func (h *hub) Current() View {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.view
}

func (h *hub) Watch(ctx context.Context) <-chan View {
	h.mu.Lock()
	defer h.mu.Unlock()
	w := &watcher{ch: make(chan View, 1)}
	if h.closed || ctx.Err() != nil {
		close(w.ch)
		return w.ch
	}
	w.ch <- h.view
	if h.watchers == nil {
		h.watchers = map[*watcher]struct{}{}
	}
	h.watchers[w] = struct{}{}
	w.stop = context.AfterFunc(ctx, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		if _, ok := h.watchers[w]; ok {
			delete(h.watchers, w)
			close(w.ch)
		}
	})
	return w.ch
}

// publish installs v and offers it to every watcher without blocking.
// Called with h.mu held; only the publisher sends, so after draining the
// stale view the send always finds room.
func (h *hub) publish(v View) {
	h.view = v
	for w := range h.watchers {
		select {
		case w.ch <- v:
			continue
		default:
		}
		select {
		case <-w.ch:
		default:
		}
		select {
		case w.ch <- v:
		default:
		}
	}
}

func (h *hub) Close() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil
	}
	h.closed = true
	for w := range h.watchers {
		w.stop()
		close(w.ch)
	}
	h.watchers = nil
	return nil
}

// Static is a fixed membership: one node (the embedded default) or a fixed
// list. Its view has epoch 1 and never changes.
type Static struct{ hub }

var _ Membership = (*Static)(nil)

// NewStatic returns a static membership of the given members at epoch 1.
func NewStatic(members ...Member) (*Static, error) {
	if len(members) == 0 {
		return nil, ErrNoMembers
	}
	v, err := NewView(1, members)
	if err != nil {
		return nil, err
	}
	return &Static{hub{view: v}}, nil
}

// Memory is an in-memory membership for tests and simulations. Every change
// goes through CompareAndSwap, which advances the epoch by exactly one per
// membership change; the etcd implementation mirrors it with one etcd
// transaction that compares the epoch key and writes the member keys and the
// new epoch together.
type Memory struct{ hub }

var _ Membership = (*Memory)(nil)

// NewMemory returns an in-memory membership at the given epoch (>= 1).
func NewMemory(epoch uint64, members ...Member) (*Memory, error) {
	if epoch == 0 {
		return nil, fmt.Errorf("gpucache/control: epoch 0 is reserved for the empty view")
	}
	v, err := NewView(epoch, members)
	if err != nil {
		return nil, err
	}
	return &Memory{hub{view: v}}, nil
}

// CompareAndSwap replaces the member set with next and advances the epoch
// by one, if the current epoch is expect. Otherwise it returns
// ErrEpochMismatch (or ErrEpochOverflow at the maximum epoch, ErrClosed, a
// validation error) and changes nothing.
func (m *Memory) CompareAndSwap(expect uint64, next []Member) (View, error) {
	return m.commit(expect, 1, next)
}

// commit is the transaction: compare the epoch, then install next at
// expect+steps, or change nothing. steps is the number of membership
// changes the transaction carries (one per member added, removed or
// drained).
func (m *Memory) commit(expect, steps uint64, next []Member) (View, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return m.view, ErrClosed
	}
	cur := m.view.Epoch()
	if cur != expect {
		return m.view, fmt.Errorf("%w: expected %d, current %d", ErrEpochMismatch, expect, cur)
	}
	if steps > math.MaxUint64-cur {
		return m.view, fmt.Errorf("%w: %d changes at epoch %d", ErrEpochOverflow, steps, cur)
	}
	v, err := NewView(cur+steps, next)
	if err != nil {
		return m.view, err
	}
	m.publish(v)
	return v, nil
}

// update runs a read-modify-CAS loop, as a client of etcd would. modify
// returns the next member set, or changed=false for a no-op.
func (m *Memory) update(modify func(View) (next []Member, changed bool, err error)) (View, error) {
	for {
		cur := m.Current()
		next, changed, err := modify(cur)
		if err != nil {
			return cur, err
		}
		if !changed {
			return cur, nil
		}
		v, err := m.CompareAndSwap(cur.Epoch(), next)
		if errors.Is(err, ErrEpochMismatch) {
			continue
		}
		return v, err
	}
}

// Join adds a member (epoch + 1). An existing ID is ErrDuplicateMember.
func (m *Memory) Join(mem Member) (View, error) {
	return m.update(func(cur View) ([]Member, bool, error) {
		if _, ok := cur.Member(mem.ID); ok {
			return nil, false, fmt.Errorf("%w: %q", ErrDuplicateMember, mem.ID)
		}
		return append(cur.Members(), mem), true, nil
	})
}

// Leave removes a member (epoch + 1). An unknown ID is ErrUnknownMember.
func (m *Memory) Leave(id MemberID) (View, error) {
	return m.update(func(cur View) ([]Member, bool, error) {
		ms := cur.Members()
		for i := range ms {
			if ms[i].ID == id {
				return append(ms[:i], ms[i+1:]...), true, nil
			}
		}
		return nil, false, fmt.Errorf("%w: %q", ErrUnknownMember, id)
	})
}

// Drain marks a member draining (epoch + 1): it stays in the view but owns
// no key, so its keys move to the other members while it finishes its
// in-flight fills; then it Leaves. Draining a draining member changes
// nothing (no epoch advance).
func (m *Memory) Drain(id MemberID) (View, error) {
	return m.update(func(cur View) ([]Member, bool, error) {
		ms := cur.Members()
		for i := range ms {
			if ms[i].ID == id {
				if ms[i].Draining {
					return nil, false, nil
				}
				ms[i].Draining = true
				return ms, true, nil
			}
		}
		return nil, false, fmt.Errorf("%w: %q", ErrUnknownMember, id)
	})
}

// Isolate removes every member of a fault domain in one transaction, or
// nothing. The plan (see PlanIsolate) checks the whole victim set against
// the epoch budget first; the epoch advances by one per victim.
func (m *Memory) Isolate(domain string) (Plan, error) {
	for {
		cur := m.Current()
		p, err := PlanIsolate(cur, domain, math.MaxUint64-cur.Epoch())
		if err != nil {
			return Plan{}, err
		}
		if _, err := m.Apply(p); err != nil {
			if errors.Is(err, ErrEpochMismatch) {
				continue
			}
			return Plan{}, err
		}
		return p, nil
	}
}

// Apply commits a plan made against the view at epoch p.From, or nothing
// (ErrEpochMismatch when the view moved on: re-plan and retry).
func (m *Memory) Apply(p Plan) (View, error) {
	return m.commit(p.From, p.To-p.From, p.Remaining)
}

// Hub is the watch fan-out every Membership implementation shares: the
// current view, and watchers that receive each newer view drop-to-latest.
// The zero Hub holds the empty view (epoch 0) and is ready to use.
type Hub struct{ h hub }

// Current is the latest published view.
func (x *Hub) Current() View { return x.h.Current() }

// Watch is Membership.Watch.
func (x *Hub) Watch(ctx context.Context) <-chan View { return x.h.Watch(ctx) }

// Publish installs v if its epoch is newer than the current view's, and
// offers it to every watcher without blocking. Publishers may race: an older
// view never replaces a newer one. It reports whether v was installed.
func (x *Hub) Publish(v View) bool {
	x.h.mu.Lock()
	defer x.h.mu.Unlock()
	if x.h.closed || v.Epoch() <= x.h.view.Epoch() {
		return false
	}
	x.h.publish(v)
	return true
}

// Close closes every watch channel; Current keeps the last view.
func (x *Hub) Close() error { return x.h.Close() }
