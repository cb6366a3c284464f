package sink

import "context"

// Retract withdraws pointer key from every job enqueued so far: none of
// them writes it from now on (each skip is counted in
// Stats.PointersSuperseded), while a job enqueued after Retract returns
// writes it as usual. A write of key in progress when Retract is called
// ends first: once Retract returns nil, no PUT of key by an earlier job is
// in flight or will be issued, so a Delete of the object after it cannot
// be undone by this sink. The rest of those jobs (packs, manifests, other
// pointers) is written as usual.
//
// It waits for at most one store call (a PUT bounded by PutTimeout) and
// returns ctx's error if ctx ends first; the pointer is then not retracted.
func (s *Sink) Retract(ctx context.Context, key string) error {
	select {
	case s.ptrTok <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-s.ptrTok }()
	s.mu.Lock()
	defer s.mu.Unlock()
	// Only pending or writing jobs hold a claim entry; with none, there is
	// nothing to withdraw (a later job has a larger ID anyway).
	if p := s.mu.pointers[key]; p != nil {
		p.claimed = max(p.claimed, s.mu.nextID+1)
	}
	return nil
}
