package flash

import (
	"sync/atomic"

	"github.com/gpucache/gpucache/api/wire"
)

type counter = atomic.Uint64

// counters are the tier's monotonic counters (the gauges are read from
// Tier.mu).
type counters struct {
	hits, misses, bufferHits                  counter
	reads, readBytes, readNs                  counter
	writes, writtenBytes, writeNs, syncs      counter
	blocksWritten, tombstonesWritten          counter
	alreadyHeld                               counter
	declinedFull, declinedUnknown             counter
	declinedDegraded, declinedLarge           counter
	declinedQuota                             counter
	reclaims, reclaimedBlocks                 counter
	reclaimOffered, reclaimTaken              counter
	corrupt, readErrors, writeErrors          counter
	segmentsLost, lostBlocks, segmentsSkipped counter
	tornTails                                 counter
	quotaEvictions, deletes, overwrites       counter
	degradations                              counter
}

func b2u(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

// Stats implements lower.Tier: the flash_ gauges and counters.
func (t *Tier) Stats() []wire.StatEntry {
	t.mu.Lock()
	g := []wire.StatEntry{
		{Name: "flash_bytes", Value: uint64(t.mu.bytes)},
		{Name: "flash_live_bytes", Value: uint64(t.mu.live)},
		{Name: "flash_segments", Value: uint64(len(t.mu.segs))},
		{Name: "flash_blocks", Value: uint64(len(t.mu.index))},
		{Name: "flash_capacity_bytes", Value: uint64(t.cfg.Capacity)},
		{Name: "flash_write_buffer_bytes", Value: uint64(t.mu.staged)},
		{Name: "flash_write_queue", Value: uint64(len(t.mu.queue))},
		{Name: "flash_degraded", Value: b2u(t.mu.degraded)},
		{Name: "flash_direct", Value: b2u(t.direct)},
	}
	t.mu.Unlock()
	s := &t.st
	return append(g, []wire.StatEntry{
		{Name: "flash_hits", Value: s.hits.Load()},
		{Name: "flash_buffer_hits", Value: s.bufferHits.Load()},
		{Name: "flash_misses", Value: s.misses.Load()},
		{Name: "flash_reads", Value: s.reads.Load()},
		{Name: "flash_read_bytes", Value: s.readBytes.Load()},
		{Name: "flash_read_ns", Value: s.readNs.Load()},
		{Name: "flash_writes", Value: s.writes.Load()},
		{Name: "flash_written_bytes", Value: s.writtenBytes.Load()},
		{Name: "flash_write_ns", Value: s.writeNs.Load()},
		{Name: "flash_syncs", Value: s.syncs.Load()},
		{Name: "flash_blocks_written", Value: s.blocksWritten.Load()},
		{Name: "flash_tombstones_written", Value: s.tombstonesWritten.Load()},
		{Name: "flash_already_held", Value: s.alreadyHeld.Load()},
		{Name: "flash_declined_full", Value: s.declinedFull.Load()},
		{Name: "flash_declined_unknown", Value: s.declinedUnknown.Load()},
		{Name: "flash_declined_degraded", Value: s.declinedDegraded.Load()},
		{Name: "flash_declined_large", Value: s.declinedLarge.Load()},
		{Name: "flash_declined_quota", Value: s.declinedQuota.Load()},
		{Name: "flash_reclaims", Value: s.reclaims.Load()},
		{Name: "flash_reclaimed_blocks", Value: s.reclaimedBlocks.Load()},
		{Name: "flash_reclaim_offered", Value: s.reclaimOffered.Load()},
		{Name: "flash_reclaim_taken", Value: s.reclaimTaken.Load()},
		{Name: "flash_corrupt", Value: s.corrupt.Load()},
		{Name: "flash_read_errors", Value: s.readErrors.Load()},
		{Name: "flash_write_errors", Value: s.writeErrors.Load()},
		{Name: "flash_segments_lost", Value: s.segmentsLost.Load()},
		{Name: "flash_lost_blocks", Value: s.lostBlocks.Load()},
		{Name: "flash_segments_skipped", Value: s.segmentsSkipped.Load()},
		{Name: "flash_torn_tails", Value: s.tornTails.Load()},
		{Name: "flash_quota_evictions", Value: s.quotaEvictions.Load()},
		{Name: "flash_deletes", Value: s.deletes.Load()},
		{Name: "flash_overwrites", Value: s.overwrites.Load()},
		{Name: "flash_degradations", Value: s.degradations.Load()},
	}...)
}

// TenantStats implements lower.Tier: the tenant's live bytes on the tier
// and its quota (0: none).
func (t *Tier) TenantStats(tenant string) []wire.StatEntry {
	t.mu.Lock()
	defer t.mu.Unlock()
	var live int64
	if u := t.mu.tenantUse[tenant]; u != nil {
		live = u.live
	}
	return []wire.StatEntry{
		{Name: "tenant_flash_bytes", Value: uint64(live)},
		{Name: "tenant_flash_quota_bytes", Value: uint64(t.mu.quotas[tenant])},
	}
}
