package tier

import (
	"context"
	"errors"

	"github.com/gpucache/gpucache/api/identity"
)

// Exporter walks the blocks a hot tier still holds, in chunks: the shape
// of hot.Store.Export. fn runs under the hot tier's lock and returns false
// to stop at the block it was given, which the next call from the
// returned cursor yields again.
type Exporter func(from uint32, max int, fn func(ns identity.NamespaceDigest, key, parent identity.BlockKey, tokens uint32, payload []byte) bool) (next uint32, more bool)

// spillChunk is how many blocks one Export call hands over: small enough
// that the hot tier's lock is never held for long.
const spillChunk = 256

// spillFlushTries is how many flush rounds in a row may complete no pack
// before Spill stops. Two: one retry rides out a transient error, and the
// sink (three attempts per job) keeps an attempt for the final flush, so
// a pack is not moved to the failed queue by the spill alone.
const spillFlushTries = 2

// ErrSpillStalled: flushes during Spill wrote nothing, spillFlushTries
// rounds in a row, so the cold store is failing and the rest of the spill
// would only queue work it cannot take.
var ErrSpillStalled = errors.New("gpucache/cold/tier: spill stopped: the cold store took no pack")

// SpillReport is what Spill did.
type SpillReport struct {
	Blocks  int   // blocks copied into packs
	Bytes   int64 // their payload bytes
	Skipped int   // blocks not written: identity not remembered (a cold refill, already in the store, or forgotten), or larger than the pending budget
	Packs   int   // pack jobs the flushes completed
	Failed  int   // pack jobs the flushes gave up on
	Pending int   // pack jobs still queued when Spill returned
	// Complete: the whole hot tier was walked and every flush round ran.
	Complete bool
	// Walked: the whole hot tier was walked (every block it held copied
	// into a pack or skipped), even if the last flush was cut short: the
	// packs still queued (Pending) are written by a later Flush.
	Walked bool
	// Err is why Spill stopped early: ctx's error, ErrSpillStalled, or a
	// flush error.
	Err error
}

// Spill writes the blocks a hot tier still holds to the cold tier, so that
// they outlive this process: a node leaving the cluster hands its working
// set to the shared cold tier before its keys move to other nodes (which
// then refill instead of recomputing), and a restarted single node finds
// it in its local cold tier.
//
// It walks export in chunks, copying every block whose identity this tier
// remembers into pending batches, and flushes (builds packs and drains the
// sink) whenever the pending budget fills, and at the end. A spilled block
// is forgotten, so its later eviction does not write it twice. Spill
// returns when the walk is done, when ctx ends, or when flushes complete
// no pack although they had work (the store is down; see
// spillFlushTries): bound it with ctx.
func (t *Tier) Spill(ctx context.Context, export Exporter) SpillReport {
	var rep SpillReport
	// flush writes what is batched. A round that completes no pack
	// although it had work is tried again at once (the sink retries a
	// transient error on its next round: a dropped connection must not end
	// the spill); spillFlushTries such rounds in a row mean the store is
	// failing.
	flush := func() bool {
		for try := 1; ; try++ {
			r := t.Flush(ctx, true)
			rep.Packs += r.Completed
			rep.Failed += r.Failed
			rep.Pending = r.Remaining
			switch {
			case ctx.Err() != nil:
				rep.Err = ctx.Err()
				return false
			case r.Selected == 0 || r.Completed > 0:
				return true
			case try == spillFlushTries:
				rep.Err = ErrSpillStalled
				if r.Err != nil {
					rep.Err = errors.Join(ErrSpillStalled, r.Err)
				}
				return false
			}
		}
	}
	var cur uint32
	for {
		if err := ctx.Err(); err != nil {
			rep.Err = err
			return rep
		}
		full := false
		next, more := export(cur, spillChunk, func(ns identity.NamespaceDigest, key, parent identity.BlockKey, _ uint32, payload []byte) bool {
			switch t.spillOne(ns, key, parent, payload) {
			case spillFull:
				full = true
				return false
			case spillSkipped:
				rep.Skipped++
			default:
				rep.Blocks++
				rep.Bytes += int64(len(payload))
			}
			return true
		})
		cur = next
		rep.Walked = !more
		if full || !more {
			if !flush() {
				return rep
			}
		}
		if !more {
			rep.Complete = true
			return rep
		}
	}
}

type spillResult uint8

const (
	spillBatched spillResult = iota
	spillSkipped
	spillFull // the budget is full: flush, then offer it again
)

// spillOne batches one block for Spill. Unlike Evicted it never drops a
// block for a full budget: it asks for a flush instead.
func (t *Tier) spillOne(ns identity.NamespaceDigest, key, parent identity.BlockKey, payload []byte) spillResult {
	t.mu.Lock()
	defer t.mu.Unlock()
	tl, ok := t.mu.tails[key]
	if !ok || t.mu.namespaces[tl.ns].Tenant == "" || tl.parent != parent || len(payload) == 0 {
		return spillSkipped
	}
	cost := t.costLocked(tl, len(payload))
	if cost > t.budget.Max() {
		return spillSkipped // larger than the whole budget
	}
	if !t.budget.TryTake(cost) {
		return spillFull
	}
	t.mu.dead += int(tl.tokLen)
	delete(t.mu.tails, key)
	t.batchLocked(ns, tl, payload, cost)
	t.st.spilled.Add(1)
	return spillBatched
}
