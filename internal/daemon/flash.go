package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/gpucache/gpucache/api/wire"
	"github.com/gpucache/gpucache/internal/config"
	"github.com/gpucache/gpucache/internal/flash"
	"github.com/gpucache/gpucache/internal/hot"
)

// startFlash opens the local flash tier (ADR 0027) when flash_dir is set:
// it rebuilds its index from the segment files, so blocks written before a
// restart (SIGTERM or kill -9) are served at once. With flash_cold: reclaim
// the blocks of a reclaimed segment go to the cold tier.
func (n *Node) startFlash(context.Context) error {
	cfg := n.cfg
	if !cfg.FlashEnabled() {
		return nil
	}
	fcfg := flash.Config{
		Dir:          cfg.FlashDir,
		Capacity:     int64(cfg.FlashCapacity),
		SegmentBytes: int64(cfg.FlashSegment),
		WriteBuffer:  int64(cfg.FlashWriteBuffer),
		TenantQuotas: cfg.TenantFlashQuotas(),
		Reclaim:      cfg.FlashReclaim,
		Direct:       cfg.FlashDirect,
		Faults:       n.opts.Faults,
		Logger:       n.log,
	}
	if cfg.FlashCold == config.FlashColdReclaim && n.cold.tier != nil && cfg.ColdWriteBehind {
		fcfg.OnReclaim = n.cold.tier.Evicted
	}
	start := time.Now()
	ft, err := flash.Open(fcfg)
	if err != nil {
		return fmt.Errorf("flash tier: flash_dir %s: %w", cfg.FlashDir, err)
	}
	n.onClose(func() {
		if err := ft.CloseContext(n.closeCtx()); err != nil {
			n.log.Warn("flash tier: close", "err", err)
		}
	})
	n.flash = ft
	st := statMap(ft.Stats())
	n.log.Info("flash tier open", "flash_dir", cfg.FlashDir, "capacity", cfg.FlashCapacity.String(), "segment", cfg.FlashSegment.String(),
		"blocks", st["flash_blocks"], "live_bytes", st["flash_live_bytes"], "segments", st["flash_segments"],
		"direct", ft.Direct(), "cold", cfg.FlashCold, "reclaim", cfg.FlashReclaim, "took", time.Since(start).Round(time.Millisecond))
	return nil
}

// flashDegraded is /readyz's reason the flash tier is off, "" when it is
// not (or there is none).
func (n *Node) flashDegraded() string {
	if n.flash == nil {
		return ""
	}
	if bad, _ := n.flash.Degraded(); bad {
		return "flash tier off (disk full or failing)"
	}
	return ""
}

// spillToFlash writes the blocks DRAM still holds to the flash tier on a
// drain, within ctx: flash is faster than the cold store, and a
// restarted node serves them at once. It logs how many blocks went, and
// whether the whole of DRAM was walked; blocks flash declines (a tenant it
// does not know, a degraded disk) are skipped, and the cold spill after it
// (with flash_cold: through) still offers them to the cold tier. ctx is
// the spill's deadline.
func spillToFlash(ctx context.Context, ft *flash.Tier, store *hot.Store, log *slog.Logger) {
	start := time.Now()
	log.Info("drain spill: writing DRAM to the flash tier")
	var cursor uint32
	more, blocks, skipped := true, 0, 0
	var bytes int64
	for more && ctx.Err() == nil {
		full := false
		cursor, more = store.Export(cursor, 256, func(ns hot.Namespace, key, parent hot.Key, tokens uint32, payload []byte) bool {
			switch ft.Spill(ns, key, parent, tokens, payload) {
			case flash.Taken:
				blocks++
				bytes += int64(len(payload))
			case flash.Full:
				full = true
				return false // this block again once the buffer is written
			default:
				skipped++
			}
			return true
		})
		if full {
			if err := ft.Flush(ctx); err != nil {
				break
			}
		}
	}
	err := ft.Flush(ctx)
	attrs := []any{"blocks", blocks, "bytes", bytes, "skipped", skipped, "took", time.Since(start).Round(time.Millisecond)}
	if !more && err == nil {
		log.Info("drain spill: DRAM blocks written to the flash tier", attrs...)
		return
	}
	if err == nil {
		err = ctx.Err()
	}
	log.Warn("drain spill to flash incomplete: the blocks not written go to the cold tier or are recomputed", append(attrs, "err", err)...)
}

func statMap(e []wire.StatEntry) map[string]uint64 {
	m := make(map[string]uint64, len(e))
	for _, s := range e {
		m[s.Name] = s.Value
	}
	return m
}
