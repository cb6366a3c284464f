package hot

// ExportFunc receives one cached block from Export. payload is the slab's
// memory, valid only during the call: copy what you keep. It runs under
// the store's lock, so it must not block or call back into the store.
// Returning false stops the export at this block, which a later Export
// from the returned cursor yields again.
type ExportFunc func(ns Namespace, key, parent Key, tokens uint32, payload []byte) bool

// Export hands published blocks to fn, in index order, starting at the
// cursor from (0 for the first call), at most max blocks per call (max <=
// 0: all). It returns the cursor of the next call and whether blocks may
// remain past it. The lock is held for one call only, so a caller
// exporting a large store in chunks lets requests run between them.
//
// Export neither touches nor removes anything: the blocks stay cached and
// their eviction order is unchanged. Blocks published after the cursor
// passed their index are not seen; blocks removed meanwhile are skipped.
// It is how a node leaving the cluster hands its hot blocks to the shared
// cold tier before their ownership moves (drain spill).
func (s *Store) Export(from uint32, max int, fn ExportFunc) (next uint32, more bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.closed {
		return from, false
	}
	n := uint32(len(s.mu.entries))
	seen := 0
	for i := from; i < n; i++ {
		e := &s.mu.entries[i]
		if e.state != statePublished {
			continue
		}
		if max > 0 && seen == max {
			return i, true
		}
		if !fn(e.ns, e.key, e.parent, e.tokens, s.bytesLocked(e)) {
			return i, true
		}
		seen++
	}
	return n, false
}
