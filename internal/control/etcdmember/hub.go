package etcdmember

import (
	"context"
	"sync"

	"github.com/gpucache/gpucache/internal/control"
)

// hub holds the current view and fans it out to watchers, drop to latest
// (the same contract as control's Static and Memory). publish installs a
// view only if its epoch is newer than the current one, so views published
// from transactions and from the watch loop can race harmlessly.
type hub struct {
	mu       sync.Mutex
	view     control.View
	done     bool
	watchers map[*watcher]struct{}
}

type watcher struct {
	ch   chan control.View
	stop func() bool
}

// Current is the latest view. It never blocks on the network.
func (h *hub) Current() control.View {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.view
}

// Watch returns a channel that first holds the current view and then
// receives every later view, drop to latest. It is closed when ctx is done
// or the membership is closed.
func (h *hub) Watch(ctx context.Context) <-chan control.View {
	h.mu.Lock()
	defer h.mu.Unlock()
	w := &watcher{ch: make(chan control.View, 1)}
	if h.done || ctx.Err() != nil {
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

func (h *hub) publish(v control.View) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.done || v.Epoch() <= h.view.Epoch() {
		return
	}
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

func (h *hub) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.done {
		return
	}
	h.done = true
	for w := range h.watchers {
		w.stop()
		close(w.ch)
	}
	h.watchers = nil
}
