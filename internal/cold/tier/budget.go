package tier

import (
	"github.com/gpucache/gpucache/internal/cold/sink"
)

// Metadata allowance of one block in a pack (blockCost): its manifest
// record holds its canonical identity (the namespace's canonical bytes,
// then parent, position, tokens, valid length, or an opaque-key block's
// name) and its range (key, offset,
// length, checksum); its pointer object names the namespace, the block and
// the manifest (key, digest, size). blockSlack covers those fixed fields
// with room to spare, and the pack's own header, manifest header, pack key
// and seal, which the first block of every pack pays for. A test checks the
// allowance against Build's output, sealed and not, from one block to
// PackBlocks.
const blockSlack = 1024

// costLocked returns the budget bytes a block takes while it waits: its
// payload plus its share of the pack's metadata. t.mu must be held.
func (t *Tier) costLocked(tl tail, payload int) int64 {
	return int64(payload) + 4*int64(tl.tokLen) + int64(len(tl.opaque)) + 2*int64(t.mu.nsCanon[tl.ns]) + blockSlack
}

// pointersOf counts a job's pointer objects: one per block.
func pointersOf(j *sink.Job) int {
	n := 0
	for _, o := range j.Objects {
		if o.Kind == sink.KindPointer {
			n++
		}
	}
	return n
}

// lossReport sums the packs one flush gave up, for one log line.
type lossReport struct {
	packs, blocks, bytes int
	reason               string // the first pack's
	err                  error
}

func (l *lossReport) add(bytes, blocks int, reason string, err error) {
	if l.packs == 0 {
		l.reason, l.err = reason, err
	}
	l.packs++
	l.blocks += blocks
	l.bytes += bytes
}

// settleLosses counts what a flush gave up and logs it in one line. The
// bytes are already back in the budget.
func (t *Tier) settleLosses(l *lossReport) {
	if l.packs == 0 {
		return
	}
	t.st.packsGivenUp.Add(uint64(l.packs))
	t.st.blocksGivenUp.Add(uint64(l.blocks))
	t.st.bytesGivenUp.Add(uint64(l.bytes))
	t.log.Warn("cold write-behind gave up packs; their blocks are not in the cold tier and will be recomputed",
		"packs", l.packs, "blocks", l.blocks, "bytes", l.bytes, "reason", l.reason, "err", l.err)
}

// logBudgetState logs, once each, when the budget starts turning evicted
// blocks away (a flush sees new drops) and when it has room again (a flush
// sees no new drops, and at most three quarters of the budget in use).
// t.flushMu must be held.
func (t *Tier) logBudgetState() {
	dropped := t.st.droppedFull.Load()
	fresh := dropped > t.full.lastDropped
	t.full.lastDropped = dropped
	switch {
	case fresh && !t.full.on:
		t.full.on, t.full.since = true, dropped
		t.log.Warn("cold write-behind budget full: evicted blocks are dropped, not written to the cold tier",
			"held_bytes", t.budget.Used(), "cold_pending", t.budget.Max())
	case !fresh && t.full.on && t.budget.Used() <= t.budget.Max()/4*3:
		t.full.on = false
		t.log.Info("cold write-behind budget has room again: evicted blocks are written behind",
			"dropped", dropped-t.full.since, "held_bytes", t.budget.Used(), "cold_pending", t.budget.Max())
	}
}
