package tier

// Delete hides a block in the cold tier: after it returns nil, a refill of
// the block misses and the presence index answers absent, until the block
// is stored and written behind again.
//
// Ordering. A block can be on its way to the store in four places, and
// Delete closes each before it removes the pointer object:
//
//  1. remembered (in DRAM, its identity in tails): forgotten, so its
//     eviction is not written behind;
//  2. copied into a pending batch: taken out of the batch, its budget
//     bytes given back;
//  3. in a pack being built or queued on the sink: queueMu keeps flush from
//     building packs meanwhile, and sink.Retract withdraws the pointer from
//     every job queued so far and waits out a pointer PUT in flight;
//  4. published: the pointer object is deleted (its pack and manifest stay
//     until the reference-safe reclaim, internal/cold/lifecycle).
//
// The refiller caches pointers for Refill.PointerTTL, and a refill that
// read the pointer before the delete may still be running, so the block
// is also hidden (hideSet) for PointerTTL + RefillBudget: Refill answers
// a hidden block with a miss before and after reading it.
//
// A store that cannot be reached fails step 4: Delete returns the error
// (wrapping cold.ErrUnavailable or the deadline), steps 1-3 stay done, the
// index entry stays removed and the block stays hidden for the hide's
// lifetime; after it the old pointer may be found again by a refill. The
// caller reports the failure (native DELETE answers BUSY) so the client
// can retry.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/gpucache/gpucache/api/identity"
	"github.com/gpucache/gpucache/internal/cold/pack"
	"github.com/gpucache/gpucache/internal/cold/refill"
)

// MaxHidden bounds the blocks hidden at once (hideSet).
const MaxHidden = 1 << 16

// ErrHideFull: Delete removed the pointer but could not hide the block
// from refills that cached it (MaxHidden deletes within one hide
// lifetime); such a refill may serve it until its cached pointer expires.
var ErrHideFull = errors.New("gpucache/cold/tier: too many recent deletes to hide another block")

// hideSet holds recently deleted blocks with their expiry.
type hideSet struct {
	mu  sync.Mutex
	m   map[fingerprint]time.Time // guarded by mu
	ttl time.Duration
}

func (h *hideSet) put(f fingerprint) bool {
	now := time.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.m[f]; !ok && len(h.m) >= MaxHidden {
		for k, exp := range h.m {
			if !now.Before(exp) {
				delete(h.m, k)
			}
		}
		if len(h.m) >= MaxHidden {
			return false
		}
	}
	h.m[f] = now.Add(h.ttl)
	return true
}

func (h *hideSet) has(f fingerprint) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	exp, ok := h.m[f]
	if ok && !time.Now().Before(exp) {
		delete(h.m, f)
		return false
	}
	return ok
}

func (h *hideSet) lift(f fingerprint) {
	h.mu.Lock()
	delete(h.m, f)
	h.mu.Unlock()
}

func (h *hideSet) len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.m)
}

// Delete hides block key of namespace ns (digest d) in the cold tier: see
// the comment at the top of this file. It returns whether the tier knew
// the block (remembered, pending or indexed) and any error; on an error
// the block may still be found by a refill once its hide expires.
func (t *Tier) Delete(ctx context.Context, ns identity.Namespace, d identity.NamespaceDigest, key identity.BlockKey) (known bool, err error) {
	t.st.deletes.Add(1)
	f := t.idx.fp(d, key)
	known = t.idx.remove(f) // from here Present answers absent
	hidden := t.hide.put(f)

	t.queueMu.Lock()
	if t.dropPending(d, key) {
		known = true
	}
	err = t.sk.Retract(ctx, pack.PointerKey(d, key))
	t.queueMu.Unlock()
	if err == nil {
		err = t.cfg.Store.Delete(ctx, pack.PointerKey(d, key))
	}
	if err != nil {
		t.st.deleteErrors.Add(1)
		return known, fmt.Errorf("gpucache/cold/tier: delete %s/%s: %w", d, key, err)
	}
	if !hidden {
		t.st.deleteErrors.Add(1)
		return known, ErrHideFull
	}
	return known, nil
}

// dropPending forgets the block's remembered identity and takes it out of
// its namespace's pending batch, giving its budget bytes back. It reports
// whether the block was in either.
func (t *Tier) dropPending(d identity.NamespaceDigest, key identity.BlockKey) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	known := t.forgetLocked(key)
	b := t.mu.batches[d]
	if b == nil {
		return known
	}
	for i := 0; i < len(b.blocks); i++ {
		if b.blocks[i].Identity.KeyIn(d) != key {
			continue
		}
		known = true
		t.budget.Give(b.costs[i])
		t.mu.pending -= b.costs[i]
		b.bytes -= int64(len(b.blocks[i].Payload))
		b.blocks = append(b.blocks[:i], b.blocks[i+1:]...)
		b.costs = append(b.costs[:i], b.costs[i+1:]...)
		i--
	}
	if len(b.blocks) == 0 {
		delete(t.mu.batches, d)
	}
	return known
}

// refillHidden answers Refill for a block hidden by a recent Delete: a
// miss with no store call.
func (t *Tier) refillHidden(d identity.NamespaceDigest, key identity.BlockKey) bool {
	return t.hide.has(t.idx.fp(d, key))
}

// missHidden turns a refill hit of a block hidden while it ran into a
// miss: dst[:n] is zeroed, so no payload byte of a deleted block leaves.
func missHidden(dst []byte, n int) (int, refill.Result, error) {
	clear(dst[:n])
	return 0, refill.Missing(refill.NotFound), nil
}
