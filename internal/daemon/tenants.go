package daemon

import (
	"log/slog"

	"github.com/gpucache/gpucache/internal/config"
	"github.com/gpucache/gpucache/internal/directory"
	"github.com/gpucache/gpucache/internal/hot"
	"github.com/gpucache/gpucache/internal/server"
)

// logTenantShares says what one tenant may hold back from the others, and
// warns when the shares cannot be fair (more tenants than the hot tier
// holds largest blocks, or than the request buffers hold largest
// requests).
func logTenantShares(log *slog.Logger, cfg config.Config) {
	hold := cfg.TenantHoldCap()
	reqbuf := cfg.TenantRequestBufferCap()
	log.Info("per-tenant caps", "tenant_shares", cfg.TenantShares(), "tenant_hold_bytes", config.ByteSize(hold).Human(),
		"tenant_leases", cfg.TenantLeaseCap(hot.DefaultMaxLeases), "tenant_fills", cfg.TenantFillCap(),
		"tenant_request_buffers", config.ByteSize(reqbuf).Human())
	if cfg.TenantHoldBytes == 0 && hold*int64(cfg.TenantShares()) > int64(cfg.HotCapacity) {
		log.Warn("hot_capacity is too small to give every tenant a share of at least one hot_max_class block: "+
			"the tenants' shares overlap, so one tenant's leases and PUTs in flight can crowd out others; "+
			"raise hot_capacity or lower hot_max_class",
			"tenants", cfg.TenantShares(), "hot_capacity", cfg.HotCapacity.String(), "hot_max_class", cfg.HotMaxClass.String())
	}
	if cfg.TenantRequestBuffers == 0 && reqbuf*int64(cfg.TenantShares())+int64(config.PreSessionBuffers(cfg.MaxBatch)) > int64(cfg.RequestBuffers) {
		log.Warn("request_buffers is too small to give every tenant a share that holds its largest request: "+
			"the tenants' shares overlap, so one tenant's large requests can make others' wait and be RATE_LIMITED; "+
			"raise request_buffers or lower max_batch",
			"tenants", cfg.TenantShares(), "request_buffers", cfg.RequestBuffers.String(),
			"largest_request", config.MinRequestBuffers(cfg.MaxBatch).String())
	}
}

// applyTenantShares sets the caps of next (after a reload that may have
// changed the number of tenants) on the hot tier, the fill table and the
// server's request buffers; what tenants hold already is kept. A cap the
// running hot tier refuses (its hot_max_class applies until a restart)
// leaves that cap as it was, with a warning. The request-buffer share is
// computed over the running request_buffers and max_batch, which apply
// until a restart.
func applyTenantShares(log *slog.Logger, next config.Config, store *hot.Store, dir *directory.Directory, srv *server.Server) {
	if err := store.SetTenantLimits(next.TenantHoldCap(), next.TenantLeaseCap(hot.DefaultMaxLeases)); err != nil {
		log.Warn("reload: per-tenant hot-tier caps unchanged", "err", err)
	}
	if err := store.SetTenantQuotas(next.TenantDRAMQuotas()); err != nil {
		log.Warn("reload: per-tenant DRAM quotas unchanged", "err", err)
	}
	if err := dir.SetTenantFills(next.TenantFillCap()); err != nil {
		log.Warn("reload: per-tenant fill cap unchanged", "err", err)
	}
	total, _ := srv.RequestBuffers()
	next.RequestBuffers, next.MaxBatch = config.ByteSize(total), int(srv.Limits().MaxBatch)
	if err := srv.SetTenantRequestBuffers(next.TenantRequestBufferCap()); err != nil {
		log.Warn("reload: per-tenant request-buffer share unchanged", "err", err)
	}
	logTenantShares(log, next)
}
