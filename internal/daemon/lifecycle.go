package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/gpucache/gpucache/api/identity"
	"github.com/gpucache/gpucache/api/wire"
	"github.com/gpucache/gpucache/internal/admin"
	"github.com/gpucache/gpucache/internal/cold"
	"github.com/gpucache/gpucache/internal/cold/pack"
	"github.com/gpucache/gpucache/internal/config"
	"github.com/gpucache/gpucache/internal/hot"
	"github.com/gpucache/gpucache/internal/server"
)

// RetentionHooks let a test drive the retention loop without waiting for
// its interval (Options.Retention). Zero: the loop ticks every
// cold_retention_interval on the wall clock.
type RetentionHooks struct {
	// Tick replaces the interval's ticker: each value received runs
	// retention once.
	Tick <-chan time.Time
	// Now replaces time.Now for the retention cut-off.
	Now func() time.Time
	// Done is called after each run with its summary and error.
	Done func(admin.ExpireSummary, error)
}

// nodeLifecycle is the node's side of the admin lifecycle operations
// (internal/admin Lifecycle): the backfill sink into the hot tier, the
// purge of the tenant's DRAM blocks and pending write-behind, and the
// periodic retention cold_retention asks for, with their counters in STAT.
type nodeLifecycle struct {
	lc    *admin.Lifecycle
	srv   *server.Server // set once the server is built, before the admin listener serves
	store *hot.Store
	cn    *coldNode
	log   *slog.Logger

	retention, interval time.Duration

	st struct {
		backfilled, backfillRejected                          atomic.Uint64
		purgeDRAMBlocks, purgePacks                           atomic.Uint64
		retentionRuns, retentionFailures, retentionBusy       atomic.Uint64
		retentionPointers, retentionManifests, retentionPacks atomic.Uint64
	}
}

// newNodeLifecycle returns nil when the node has no cold store.
func newNodeLifecycle(cfg config.Config, cn *coldNode, store *hot.Store, sec *secure, log *slog.Logger, wrap func(cold.Store) cold.Store) *nodeLifecycle {
	if cn.store == nil {
		return nil
	}
	st := cn.store
	if wrap != nil {
		st = wrap(st)
	}
	nl := &nodeLifecycle{store: store, cn: cn, log: log, retention: cfg.ColdRetention, interval: cfg.ColdRetentionInterval}
	nl.lc = &admin.Lifecycle{Store: st, Audit: sec.audit.AdminAction, Deliver: nl.deliver, Drop: nl.drop}
	if sec.coldKeys != nil {
		nl.lc.Crypt = sec.coldKeys // encrypted packs backfill their plaintext (ADR 0019)
	}
	if sec.keyring != nil {
		// Sealed manifests are written and checked on refill: backfill
		// publishes only blocks whose seal verifies, as a refill would.
		nl.lc.Verifier = sec.keyring
	}
	return nl
}

// deliver is the backfill's sink: the block goes into DRAM by the cold
// refill's path (server.Backfill), charged to its tenant.
func (nl *nodeLifecycle) deliver(_ context.Context, d identity.NamespaceDigest, r pack.Range, payload []byte) (bool, error) {
	ok, err := nl.srv.Backfill(r.Identity, d, r.Key, payload)
	switch {
	case errors.Is(err, server.ErrBackfillIdentity):
		nl.st.backfillRejected.Add(1)
		nl.log.Warn("backfill: block fails its identity check; not published", "namespace", d, "block", r.Key)
		return false, fmt.Errorf("%w: %v", admin.ErrBackfillIdentity, err)
	case err != nil:
		return false, err
	case ok:
		nl.st.backfilled.Add(1)
	}
	return ok, nil
}

// drop is the purge's node half: the tenant's blocks leave the
// write-behind first (so a block still pinned in DRAM is never written
// behind), then DRAM.
func (nl *nodeLifecycle) drop(ctx context.Context, tenant string) (admin.DropSummary, error) {
	var sum admin.DropSummary
	if ct := nl.cn.tier; ct != nil {
		rep, err := ct.DropTenant(ctx, tenant)
		sum.Remembered, sum.Batched, sum.Packs = rep.Remembered, rep.Batched, rep.Packs
		nl.st.purgePacks.Add(uint64(rep.Packs))
		if err != nil {
			return sum, err
		}
	}
	sum.DRAMBlocks, sum.DRAMBusy = nl.store.DropTenant(tenant)
	nl.st.purgeDRAMBlocks.Add(uint64(sum.DRAMBlocks))
	return sum, nil
}

// runRetention applies cold_retention every cold_retention_interval (or
// on each hooks.Tick) until ctx ends; it does nothing when retention is
// off. A run that finds another lifecycle operation running is skipped
// and counted; the next tick tries again.
func (nl *nodeLifecycle) runRetention(ctx context.Context, hooks RetentionHooks) {
	if nl == nil || nl.retention <= 0 {
		return
	}
	tick, now := hooks.Tick, hooks.Now
	if tick == nil {
		t := time.NewTicker(nl.interval)
		defer t.Stop()
		tick = t.C
	}
	if now == nil {
		now = time.Now
	}
	nl.log.Info("cold retention on", "retention", nl.retention, "interval", nl.interval)
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick:
		}
		sum, err := nl.retainOnce(ctx, now().Add(-nl.retention))
		if hooks.Done != nil {
			hooks.Done(sum, err)
		}
	}
}

// retainOnce runs one retention pass: pointers last written before
// olderThan are expired, and what they alone referenced reclaimed.
func (nl *nodeLifecycle) retainOnce(ctx context.Context, olderThan time.Time) (admin.ExpireSummary, error) {
	start := time.Now()
	sum, err := nl.lc.Expire(ctx, "retention", "", olderThan, func(string, ...any) {})
	switch {
	case errors.Is(err, admin.ErrBusy):
		nl.st.retentionBusy.Add(1)
		nl.log.Info("cold retention skipped: another lifecycle operation is running; next interval tries again")
		return sum, err
	case err != nil:
		nl.st.retentionFailures.Add(1)
	}
	nl.st.retentionRuns.Add(1)
	nl.st.retentionPointers.Add(uint64(sum.Pointers))
	nl.st.retentionManifests.Add(uint64(sum.Manifests))
	nl.st.retentionPacks.Add(uint64(sum.Packs))
	attrs := []any{"older_than", olderThan.UTC().Format(time.RFC3339), "namespaces", sum.Namespaces,
		"pointers_expired", sum.Pointers, "manifests_reclaimed", sum.Manifests, "packs_reclaimed", sum.Packs,
		"errors", sum.Errors, "took", time.Since(start).Round(time.Millisecond)}
	if err != nil {
		nl.log.Warn("cold retention run incomplete; the next run continues", append(attrs, "err", err)...)
	} else {
		nl.log.Info("cold retention run", attrs...)
	}
	return sum, err
}

// withStats appends the lifecycle counters to the cold tier's STAT
// entries (all counters).
func (nl *nodeLifecycle) withStats(cold func() []wire.StatEntry) func() []wire.StatEntry {
	if nl == nil {
		return cold
	}
	return func() []wire.StatEntry {
		return append(cold(),
			wire.StatEntry{Name: "cold_backfill_blocks", Value: nl.st.backfilled.Load()},
			wire.StatEntry{Name: "cold_backfill_rejected", Value: nl.st.backfillRejected.Load()},
			wire.StatEntry{Name: "purge_dram_blocks", Value: nl.st.purgeDRAMBlocks.Load()},
			wire.StatEntry{Name: "purge_write_behind_packs", Value: nl.st.purgePacks.Load()},
			wire.StatEntry{Name: "cold_retention_runs", Value: nl.st.retentionRuns.Load()},
			wire.StatEntry{Name: "cold_retention_failures", Value: nl.st.retentionFailures.Load()},
			wire.StatEntry{Name: "cold_retention_skipped_busy", Value: nl.st.retentionBusy.Load()},
			wire.StatEntry{Name: "cold_retention_pointers_expired", Value: nl.st.retentionPointers.Load()},
			wire.StatEntry{Name: "cold_retention_manifests_reclaimed", Value: nl.st.retentionManifests.Load()},
			wire.StatEntry{Name: "cold_retention_packs_reclaimed", Value: nl.st.retentionPacks.Load()},
		)
	}
}
