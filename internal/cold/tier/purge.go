package tier

import (
	"context"
	"fmt"
)

// DropReport counts what DropTenant withdrew from the write-behind.
type DropReport struct {
	Remembered int // remembered identities forgotten (their evictions are not written behind)
	Batched    int // blocks taken out of pending batches
	Packs      int // packs withdrawn from the sink's queue (pending or failed)
}

// DropTenant withdraws every block of tenant's namespaces from the
// write-behind, so that nothing of the tenant that is in DRAM or on its
// way to the store now reaches the store later: it forgets their
// remembered identities (an eviction of such a block is then dropped as
// unknown), takes them out of the pending batches (giving their budget
// bytes back), and cancels the packs of those namespaces queued or failed
// on the sink, after waiting out a sink write in progress (queueMu keeps
// flush from building new packs meanwhile). It is the write-behind half of
// a tenant purge; the caller then deletes the tenant's objects.
//
// Blocks the tenant stores after DropTenant returns are written behind as
// usual. On an error (ctx ended while a sink write was in progress) the
// identities and batches are dropped but queued packs may remain.
func (t *Tier) DropTenant(ctx context.Context, tenant string) (DropReport, error) {
	var rep DropReport
	if tenant == "" {
		return rep, nil
	}
	t.queueMu.Lock()
	defer t.queueMu.Unlock()
	digests := make(map[string]bool)
	t.mu.Lock()
	mine := make(map[uint32]bool)
	for d, i := range t.mu.nsIndex {
		if t.mu.namespaces[i].Tenant == tenant {
			mine[i] = true
			digests[d.String()] = true
		}
	}
	for k, tl := range t.mu.tails {
		if mine[tl.ns] && t.forgetLocked(k) {
			rep.Remembered++
		}
	}
	for d, b := range t.mu.batches {
		if !digests[d.String()] {
			continue
		}
		for _, c := range b.costs {
			t.budget.Give(c)
			t.mu.pending -= c
		}
		rep.Batched += len(b.blocks)
		delete(t.mu.batches, d)
	}
	t.mu.Unlock()
	if len(digests) == 0 {
		return rep, nil
	}
	n, err := t.sk.CancelNamespaces(ctx, func(ns string) bool { return digests[ns] })
	rep.Packs = n
	if err != nil {
		return rep, fmt.Errorf("gpucache/cold/tier: withdraw tenant %q's queued packs: %w", tenant, err)
	}
	return rep, nil
}
