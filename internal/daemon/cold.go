package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpucache/gpucache/api/wire"
	"github.com/gpucache/gpucache/internal/cold"
	"github.com/gpucache/gpucache/internal/cold/refill"
	"github.com/gpucache/gpucache/internal/cold/s3store"
	"github.com/gpucache/gpucache/internal/cold/tier"
	"github.com/gpucache/gpucache/internal/config"
	"github.com/gpucache/gpucache/internal/degrade"
)

// coldConnectBackoff bounds the wait between background checks of a cold
// store that was unreachable at start: 1s, doubling, at most 30s.
const (
	coldConnectFirst = time.Second
	coldConnectMax   = 30 * time.Second
)

// coldNode is the node's cold tier and what the daemon knows about its
// store: whether it answered, for /readyz, STAT and the logs.
type coldNode struct {
	tier *tier.Tier
	// store is the tier's store, for the admin lifecycle endpoints; nil
	// when the cold tier is off.
	store cold.Store
	log   *slog.Logger
	// check probes the store again; set only when it was unreachable at
	// start, until it answers.
	check     func(context.Context) error
	connected atomic.Bool
	// onChange, when set, is called when connected changes (tests).
	onChange func(connected bool)
}

// coldTierConfig is the cold tier's config over store: pending bytes,
// index, refill budget, seal keys with their integrity audit, encryption
// and compression.
func coldTierConfig(cfg config.Config, store cold.Store, log *slog.Logger, sec *secure, faults *degrade.Registry) (tier.Config, error) {
	tcfg := tier.Config{Store: store, PendingBytes: int64(cfg.ColdPending), Logger: log, Faults: faults,
		ReclaimInterval: cfg.ColdReclaimInterval, ReclaimGrace: cfg.ColdReclaimGrace}
	indexConfig(&tcfg, cfg) // coldindex.go
	// A refill may download one hot_max_class block (ADR 0015).
	tcfg.Refill.Budget = max(refill.Default().Budget, int64(cfg.HotMaxClass))
	if sec != nil {
		// Manifests are sealed with the current seal key and verified on
		// every refill; a failed check is a miss and an audit event.
		tcfg.Keyring = sec.keyring
		tcfg.OnIntegrity = func(ev refill.IntegrityEvent) {
			reason := ""
			if ev.Err != nil {
				reason = ev.Err.Error()
			}
			sec.audit.Integrity(ev.Kind, ev.Namespace, ev.Key, ev.KeyID, reason)
			log.Warn("cold tier integrity check failed; served as a miss", "kind", ev.Kind, "namespace", ev.Namespace, "block", ev.Key, "key_id", ev.KeyID)
		}
	}
	if err := coldCryptConfig(&tcfg, cfg, sec); err != nil { // coldcrypt.go
		return tcfg, fmt.Errorf("cold tier: %w", err)
	}
	return tcfg, nil
}

// openColdStore opens cold_store (fs or s3) and returns it with what
// releases it.
//
// An S3 store that does not answer at start (cold.ErrUnavailable: no
// connection, a server error, a missing bucket) does not stop the node: it
// starts degraded, as the same outage at run time leaves it (cold reads
// are misses, evicted blocks wait within cold_pending), says so in the log
// and in /readyz, and run checks the store in the background until it
// answers (cn.check). Any other error (bad credentials, a bad config)
// stops the start.
func openColdStore(ctx context.Context, cfg config.Config, cn *coldNode) (cold.Store, func(), error) {
	switch cfg.ColdStore {
	case "fs":
		fs, err := cold.NewFS(cfg.ColdDir)
		if err != nil {
			return nil, nil, fmt.Errorf("cold tier: cold_dir %s: %w", cfg.ColdDir, err)
		}
		// No writer runs yet: every temp file is a crashed Put's.
		n, err := fs.CleanTemp(ctx, 0)
		if err != nil {
			return nil, nil, fmt.Errorf("cold tier: cold_dir %s: cleaning tmp/: %w", cfg.ColdDir, err)
		}
		if n > 0 {
			cn.log.Info("cold tier: removed temp files left by interrupted writes", "cold_dir", cfg.ColdDir, "files", n)
		}
		return fs, func() {}, nil
	case "s3":
		s3, err := s3store.New(ctx, s3store.Config{Endpoint: cfg.S3Endpoint, Region: cfg.S3Region, Bucket: cfg.S3Bucket,
			Prefix: cfg.S3Prefix, PathStyle: cfg.S3PathStyle, AccessKey: cfg.S3AccessKey, SecretKey: cfg.S3SecretKey})
		if err != nil {
			return nil, nil, fmt.Errorf("cold tier: s3: %w", err)
		}
		if err := s3.Check(ctx); err != nil {
			if !errors.Is(err, cold.ErrUnavailable) || ctx.Err() != nil {
				s3.Close()
				return nil, nil, fmt.Errorf("cold tier: s3 %s bucket %s: %w", cfg.S3Endpoint, cfg.S3Bucket, err)
			}
			cn.log.Warn("cold tier unreachable at start: serving degraded (cold reads are misses, evicted blocks wait within cold_pending); checking again in the background",
				"endpoint", cfg.S3Endpoint, "bucket", cfg.S3Bucket, "err", err)
			cn.connected.Store(false)
			cn.check = s3.Check
		}
		return s3, s3.Close, nil
	}
	return nil, nil, fmt.Errorf("cold tier: unknown cold_store %q", cfg.ColdStore)
}

// run runs the tier's write-behind (tier.Tier.Run, which flushes what
// is pending when ctx ends) and, if the store was unreachable at start,
// checks it in the background until it answers. It returns when both are
// done.
func (c *coldNode) run(ctx context.Context, flushEvery time.Duration) {
	if c.tier == nil {
		return
	}
	var wg sync.WaitGroup
	if c.check != nil {
		wg.Go(func() { c.connect(ctx) })
	}
	wg.Go(func() { c.tier.RunIndex(ctx) })     // coldindex.go
	wg.Go(func() { c.tier.RunColdUsage(ctx) }) // per-tenant cold bytes (cold/tier/quota.go)
	c.tier.Run(ctx, flushEvery)
	wg.Wait()
}

// connect checks the store with a doubling backoff until it answers or
// ctx ends, then logs (once) that the cold tier is connected.
func (c *coldNode) connect(ctx context.Context) {
	wait := coldConnectFirst
	t := time.NewTimer(wait)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		err := c.check(ctx)
		if err == nil {
			c.connected.Store(true)
			c.log.Info("cold tier connected: cold reads and write-behind use the store")
			if c.onChange != nil {
				c.onChange(true)
			}
			return
		}
		if ctx.Err() != nil {
			return
		}
		c.log.Debug("cold tier still unreachable", "err", err, "next_check", wait)
		wait = min(2*wait, coldConnectMax)
		t.Reset(wait)
	}
}

// degraded is /readyz's reason the node is degraded, "" when it is not.
func (c *coldNode) degraded() string {
	switch {
	case c.tier == nil:
		return ""
	case !c.connected.Load():
		return "cold tier unreachable"
	case c.tier.Stats().WriteDegraded:
		return "cold tier writes failing"
	}
	return ""
}

// stats returns the cold tier's STAT entries (gauges are listed in
// internal/admin's gauges map).
func (c *coldNode) stats() []wire.StatEntry {
	st := c.tier.Stats()
	b := func(v bool) uint64 {
		if v {
			return 1
		}
		return 0
	}
	u := func(v int64) uint64 { return uint64(max(v, 0)) }
	return []wire.StatEntry{
		// Gauges.
		{Name: "cold_store_connected", Value: b(c.connected.Load())},
		{Name: "cold_write_degraded", Value: b(st.WriteDegraded)},
		{Name: "cold_bytes_held", Value: u(st.HeldBytes)},
		{Name: "cold_bytes_limit", Value: u(st.LimitBytes)},
		{Name: "cold_bytes_batched", Value: u(st.PendingBytes)},
		{Name: "cold_packs_pending", Value: uint64(max(st.SinkPending, 0))},
		// Counters.
		{Name: "cold_blocks_offered", Value: st.Offered},
		{Name: "cold_blocks_spilled", Value: st.Spilled},
		{Name: "cold_blocks_dropped_full", Value: st.DroppedFull},
		{Name: "cold_blocks_dropped_unknown", Value: st.DroppedUnknown},
		{Name: "cold_packs_built", Value: st.PacksBuilt},
		{Name: "cold_packs_queued", Value: st.PacksQueued},
		{Name: "cold_packs_written", Value: st.SinkCompleted},
		{Name: "cold_packs_failed", Value: st.SinkFailed},
		{Name: "cold_pack_errors", Value: st.PackErrors},
		{Name: "cold_packs_given_up", Value: st.PacksGivenUp},
		{Name: "cold_blocks_given_up", Value: st.BlocksGivenUp},
		{Name: "cold_bytes_given_up", Value: st.BytesGivenUp},
		{Name: "cold_write_retries", Value: st.SinkRetries},
		{Name: "cold_write_outages", Value: st.WriteOutages},
		{Name: "cold_refill_integrity", Value: st.RefillIntegrity},
	}
}
