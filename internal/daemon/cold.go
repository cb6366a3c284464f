package daemon

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/gpucache/gpucache/internal/cold"
	"github.com/gpucache/gpucache/internal/cold/refill"
	"github.com/gpucache/gpucache/internal/cold/s3store"
	"github.com/gpucache/gpucache/internal/coldtier"
	"github.com/gpucache/gpucache/internal/config"
	"github.com/gpucache/gpucache/internal/degrade"
)

// openCold builds the cold tier the config asks for, or nil for "off". The
// returned close function releases the store.
func openCold(ctx context.Context, cfg config.Config, log *slog.Logger, sec *secure, faults *degrade.Registry) (*coldtier.Tier, func(), error) {
	var store cold.Store
	release := func() {}
	switch cfg.ColdStore {
	case "off":
		return nil, release, nil
	case "fs":
		fs, err := cold.NewFS(cfg.ColdDir)
		if err != nil {
			return nil, nil, fmt.Errorf("cold tier: cold_dir %s: %w", cfg.ColdDir, err)
		}
		store = fs
	case "s3":
		s3, err := s3store.New(ctx, s3store.Config{Endpoint: cfg.S3Endpoint, Region: cfg.S3Region, Bucket: cfg.S3Bucket,
			Prefix: cfg.S3Prefix, PathStyle: cfg.S3PathStyle, AccessKey: cfg.S3AccessKey, SecretKey: cfg.S3SecretKey})
		if err != nil {
			return nil, nil, fmt.Errorf("cold tier: s3: %w", err)
		}
		if err := s3.Check(ctx); err != nil {
			s3.Close()
			return nil, nil, fmt.Errorf("cold tier: s3 %s bucket %s: %w", cfg.S3Endpoint, cfg.S3Bucket, err)
		}
		store, release = s3, s3.Close
	default:
		return nil, nil, fmt.Errorf("cold tier: unknown cold_store %q", cfg.ColdStore)
	}
	tcfg := coldtier.Config{Store: store, PendingBytes: int64(cfg.ColdPending), Logger: log, Faults: faults}
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
	tier, err := coldtier.New(tcfg)
	if err != nil {
		release()
		return nil, nil, fmt.Errorf("cold tier: %w", err)
	}
	return tier, release, nil
}
