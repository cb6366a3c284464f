package sink

import (
	"fmt"
	"sync/atomic"
)

// Budget is a byte budget several holders draw from, so that one bound
// covers bytes at different stages of a pipeline: the cold tier's
// write-behind takes bytes for an evicted block when it copies it, and the
// same bytes stay taken while the block's pack waits in the sink, pending
// or failed, until the pack is written or given up. Whoever takes bytes
// gives them back exactly once, or hands them over (Sink.EnqueuePaid).
//
// The zero value holds nothing and admits nothing; use NewBudget.
type Budget struct {
	max  int64
	used atomic.Int64
}

// NewBudget returns a budget of max bytes. max must be positive.
func NewBudget(max int64) (*Budget, error) {
	if max <= 0 {
		return nil, fmt.Errorf("gpucache/sink: budget of %d bytes", max)
	}
	return &Budget{max: max}, nil
}

// TryTake takes n bytes if they fit and reports whether it did. It never
// blocks: a full budget is an answer, not a wait. n <= 0 always fits.
func (b *Budget) TryTake(n int64) bool {
	if n <= 0 {
		return true
	}
	for {
		u := b.used.Load()
		if u+n > b.max || u+n < u {
			return false
		}
		if b.used.CompareAndSwap(u, u+n) {
			return true
		}
	}
}

// Give returns n bytes taken earlier.
func (b *Budget) Give(n int64) {
	if n > 0 {
		b.used.Add(-n)
	}
}

// Used returns the bytes taken now.
func (b *Budget) Used() int64 { return b.used.Load() }

// Max returns the budget's size.
func (b *Budget) Max() int64 { return b.max }
