package sink

import "context"

// CancelNamespaces removes every pending or failed job whose Namespace
// match accepts, releasing its credits exactly (as Cancel), and returns how
// many it removed. It first waits for a drain in progress to end, and keeps
// any from starting until it returns, so once it returns nil no job it
// removed has a write in flight or will issue one: a delete of the
// namespaces' objects after it cannot be undone by this sink. Jobs enqueued
// after it returns are written as usual.
//
// It returns ctx's error, having removed nothing, if ctx ends before the
// running drain does. On a closed sink no drain runs: it removes at once.
func (s *Sink) CancelNamespaces(ctx context.Context, match func(ns string) bool) (int, error) {
	select {
	case s.drainTok <- struct{}{}:
		defer func() { <-s.drainTok }()
	case <-s.closeCtx.Done():
		// Close holds the token for good: no drain runs any more.
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, e := range s.mu.jobs {
		if match(e.job.Namespace) && s.cancelLocked(e) {
			n++
		}
	}
	return n, nil
}
