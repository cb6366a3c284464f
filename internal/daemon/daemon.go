package daemon

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/gpucache/gpucache/api/wire"
	"github.com/gpucache/gpucache/internal/admin"
	"github.com/gpucache/gpucache/internal/cold"
	"github.com/gpucache/gpucache/internal/coldtier"
	"github.com/gpucache/gpucache/internal/config"
	"github.com/gpucache/gpucache/internal/degrade"
	"github.com/gpucache/gpucache/internal/directory"
	"github.com/gpucache/gpucache/internal/hot"
	"github.com/gpucache/gpucache/internal/hot/policy"
	"github.com/gpucache/gpucache/internal/identity"
	"github.com/gpucache/gpucache/internal/server"
	"github.com/gpucache/gpucache/internal/version"
)

// Version is the daemon's version string (the same as gpucache's).
const Version = version.Number

// Addrs are the addresses a running node listens on.
type Addrs struct {
	Data  string
	Admin string // "" when the admin listener is off
	RESP  string // "" when resp_listen is off (resp.go)
}

// NewLogger builds the structured logger the config asks for.
func NewLogger(cfg config.Config, w io.Writer) *slog.Logger {
	var lvl slog.Level
	_ = lvl.UnmarshalText([]byte(cfg.LogLevel))
	opts := &slog.HandlerOptions{Level: lvl}
	if cfg.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// Run starts a node and blocks until ctx ends, then drains and stops it.
// ready, if not nil, is called with the bound addresses once the node
// serves. Startup errors are returned with a message a user can act on.
func Run(ctx context.Context, cfg config.Config, log *slog.Logger, ready func(Addrs)) error {
	return RunWith(ctx, cfg, log, Options{Ready: ready})
}

// Options are Run's optional parts.
type Options struct {
	// Ready is called with the bound addresses once the node serves.
	Ready func(Addrs)
	// Reload reads the configuration again, for SIGHUP and POST
	// /admin/reload. Nil: reload is not available.
	Reload func() (config.Config, error)
	// Stderr receives audit events when audit_log is "stderr". Default
	// os.Stderr.
	Stderr io.Writer
	// Getenv reads secrets named by env. Default os.LookupEnv.
	Getenv func(string) (string, bool)
	// Faults injects failpoints (tests only); nil injects nothing.
	Faults *degrade.Registry
	// OnControlMode is called when a cluster node's control mode changes
	// (tests observe it instead of sleeping).
	OnControlMode func(server.ControlMode)
	// OnColdConnected is called with true when a cold store that was
	// unreachable at start answers (tests observe it instead of sleeping).
	OnColdConnected func(connected bool)
	// Retention drives the cold_retention loop (tests; lifecycle.go).
	Retention RetentionHooks
	// LifecycleStore, when set, wraps the cold store the admin lifecycle
	// operations use (tests interrupt a purge with it).
	LifecycleStore func(cold.Store) cold.Store
}

// RunWith is Run with options.
func RunWith(ctx context.Context, cfg config.Config, log *slog.Logger, opts Options) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	if opts.Stderr == nil {
		opts.Stderr = os.Stderr
	}
	logAblation(cfg, log)
	if soft, hard, err := raiseFDLimit(); err != nil {
		log.Warn("cannot read RLIMIT_NOFILE; max_conns is not checked against it", "err", err)
	} else if err := checkFDLimit(cfg, soft, hard); err != nil {
		return err
	} else {
		log.Debug("file descriptor limit", "soft", soft, "hard", hard, "needed", fdsNeeded(cfg))
	}
	hotPol, err := hotPolicy(cfg)
	if err != nil {
		return err
	}
	sec, err := newSecure(cfg, log, opts.Stderr, opts.Getenv)
	if err != nil {
		return err
	}
	defer sec.Close()
	if cfg.AuthEnabled() && !cfg.TLSEnabled() && !hostLoopback(cfg.Listen) {
		log.Warn("authentication without TLS on a non-loopback address: bearer secrets and payloads cross the network in plaintext; set tls_cert and tls_key")
	}
	cn, releaseCold, err := openCold(ctx, cfg, log, sec, opts.Faults)
	if err != nil {
		return err
	}
	defer releaseCold()
	cn.onChange = opts.OnColdConnected
	tier := cn.tier
	var onEvict func(hot.Namespace, hot.Key, hot.Key, uint32, []byte)
	if tier != nil && cfg.ColdWriteBehind {
		onEvict = tier.Evicted
	}
	store, err := hot.New(hot.Config{
		OnEvict:         onEvict,
		CapacityBytes:   int64(cfg.HotCapacity),
		MinClass:        int(cfg.HotMinClass),
		MaxClass:        int(cfg.HotMaxClass),
		SlabBytes:       int(cfg.HotSlab),
		Prefault:        hot.Prefault(cfg.HotPrefault),
		DefaultLeaseTTL: cfg.LeaseTTL,
		MaxLeaseTTL:     cfg.MaxLeaseTTL,
		TagSize:         hotTagSize(cfg),
		Policy:          hotPol,
		TenantHoldBytes: cfg.TenantHoldCap(),
		TenantLeases:    cfg.TenantLeaseCap(hot.DefaultMaxLeases),
	})
	if err != nil {
		if tier != nil {
			tier.Close()
		}
		return fmt.Errorf("hot tier: %w", err)
	}
	defer store.Close()
	if err := store.SetTenantQuotas(cfg.TenantDRAMQuotas()); err != nil {
		return fmt.Errorf("hot tier: %w", err)
	}
	coldDone := make(chan struct{})
	coldCtx, stopCold := context.WithCancel(context.Background())
	if tier != nil {
		go func() {
			defer close(coldDone)
			cn.run(coldCtx, cfg.ColdFlushInterval) // flushes what is pending when stopped
		}()
	} else {
		close(coldDone)
	}
	defer func() {
		stopCold()
		<-coldDone
		if tier != nil {
			tier.Close()
		}
	}()

	// The fill table is the daemon's, so a reload can change a tenant's
	// share of it; the server does not close a directory it was given.
	dir, err := directory.New(directory.Config{MaxFills: config.FillSlots, TenantFills: cfg.TenantFillCap()})
	if err != nil {
		return fmt.Errorf("fill directory: %w", err)
	}
	defer dir.Close()
	logTenantShares(log, cfg)
	scfg := server.Config{
		Directory:    dir,
		Store:        store,
		Limits:       wire.Limits{MaxFrame: uint32(cfg.MaxFrame), MaxBatch: uint32(cfg.MaxBatch), MaxInFlight: uint32(cfg.MaxInFlight)},
		Name:         "gpucached/" + Version,
		Logger:       log,
		ReadTimeout:  cfg.ReadTimeout,
		WriteTimeout: cfg.WriteTimeout,
		IdleTimeout:  cfg.IdleTimeout,
		MaxConns:     cfg.MaxConns,
		Guard:        sec.guard,

		HelloTimeout:     cfg.HelloTimeout,
		MaxUnauthPerAddr: cfg.MaxUnauthPerAddr,
		RequestBuffers:   int64(cfg.RequestBuffers),

		TenantRequestBuffers: cfg.TenantRequestBufferCap(),
	}
	if cfg.SealHotReads {
		scfg.HotSeal = sec.keyring
	}
	if tier != nil {
		if cfg.ColdWriteBehind {
			scfg.OnStored = func(id identity.CacheIdentity, d identity.NamespaceDigest, key identity.BlockKey, _ []byte) {
				tier.RememberKeyed(id, d, key)
			}
		}
		scfg.ColdRefill = cn.refill
		scfg.ColdStats = cn.stats
	}
	nl := newNodeLifecycle(cfg, cn, store, sec, log, opts.LifecycleStore) // lifecycle.go: backfill sink, purge, retention
	if tier != nil {
		scfg.ColdStats = nl.withStats(cn.stats)
		wireColdIndex(&scfg, cn)   // coldindex.go: ColdPresent, ColdDelete, index STATs
		wireColdQuota(&scfg, tier) // tenantusage.go: per-tenant cold bytes in STAT
	}
	scfg.MaxVersion = uint8(cfg.ProtocolMax)
	scfg.RESPProfiles = respProfiles(cfg)
	ln, err := listen("listen", cfg.Listen)
	if err != nil {
		return err
	}
	addrs := Addrs{Data: ln.Addr().String()}
	var node *clusterNode
	if cfg.Clustered() {
		if node, err = joinCluster(ctx, cfg, addrs.Data, log, opts); err != nil {
			ln.Close()
			return err
		}
		scfg.Cluster = node.cluster
		fw, err := newForwarder(cfg, node, log) // RESP keys other members own
		if err != nil {
			ln.Close()
			node.close()
			return err
		}
		defer fw.Close()
		scfg.Forwarder, scfg.ForwardStats = fw, fw.Stats
	}
	srv, err := server.New(scfg)
	if err != nil {
		ln.Close()
		if node != nil {
			node.close()
		}
		return err
	}
	if tc := sec.tlsConfig(); tc != nil {
		ln = tls.NewListener(ln, tc)
	}

	adm := admin.New(srv.Stats)
	adm.SetAuthorizer(sec.authorizeAdmin)
	adm.SetDegraded(cn.degraded)
	adm.SetCertExpiry(sec.certExpiry)                  // gpucache_tls_cert_expiry_timestamp_seconds
	tenantUse := newTenantMetrics(cfg, store, cn.tier) // tenantusage.go: per-tenant /metrics
	adm.SetTenantUsage(tenantUse.usage)
	if nl != nil { // issue 15 item 5: gpucache admin inventory|purge|expire|backfill
		nl.srv = srv
		adm.RegisterLifecycle(nl.lc)
	}
	reload := func(actor string) error {
		if opts.Reload == nil {
			return errors.New("this node was started without a config source to reload")
		}
		next, err := opts.Reload()
		if err != nil {
			sec.audit.AdminAction(actor, "reload_refused", slog.String("reason", err.Error()))
			return err
		}
		if err := sec.reload(next, actor); err != nil {
			return err
		}
		applyTenantShares(log, next, store, dir, srv)
		tenantUse.set(next)
		if cn.tier != nil {
			if err := cn.tier.SetColdQuotas(next.TenantColdQuotas()); err != nil {
				log.Warn("reload: per-tenant cold quotas unchanged", "err", err)
			}
		}
		return nil
	}
	adm.HandleAdmin("reload", func(w http.ResponseWriter, _ *http.Request, actor string) {
		if err := reload(actor); err != nil {
			log.Warn("reload failed; the running configuration is unchanged", "actor", actor, "err", err)
			http.Error(w, "reload failed: "+err.Error()+"\n", http.StatusUnprocessableEntity)
			return
		}
		w.Write([]byte("reloaded\n"))
	})
	drainReq := make(chan string, 1)
	clusterCtx, stopCluster := context.WithCancel(context.Background())
	var clusterDone sync.WaitGroup
	if node != nil {
		node.routes(adm, func(actor string) {
			select {
			case drainReq <- actor:
			default: // already draining
			}
		})
		clusterDone.Add(2)
		go func() { defer clusterDone.Done(); node.run(clusterCtx, srv) }()
		go func() { defer clusterDone.Done(); node.health(clusterCtx) }()
	} else {
		staticRoutes(adm, cfg, addrs.Data) // GET /cluster: the one-member static view
	}
	defer func() {
		stopCluster()
		clusterDone.Wait()
		if node != nil {
			node.close()
		}
	}()
	rates := admin.NewHitRates() // the status page's hit ratios over the last minutes
	adm.HandlePage(pageSource(cfg, node, sec, addrs.Data, rates))
	clusterDone.Add(1)
	go func() { defer clusterDone.Done(); rates.Run(clusterCtx, srv.Stats) }()
	clusterDone.Add(1)
	go func() { defer clusterDone.Done(); nl.runRetention(clusterCtx, opts.Retention) }()
	var hs *http.Server
	adminErr := make(chan error, 1)
	if cfg.AdminListen != "off" {
		aln, err := listen("admin_listen", cfg.AdminListen)
		if err != nil {
			ln.Close()
			return err
		}
		addrs.Admin = aln.Addr().String()
		aln = newCapListener(aln, cfg.AdminMaxConns) // inside TLS: handshakes count too
		if tc := sec.adminTLSConfig(); tc != nil {
			aln = tls.NewListener(aln, tc)
		}
		hs = newAdminServer(adm, cfg)
		go func() { adminErr <- hs.Serve(aln) }()
	}
	hup := make(chan os.Signal, 1)
	if opts.Reload != nil {
		signal.Notify(hup, syscall.SIGHUP)
		defer signal.Stop(hup)
	}

	respWait, err := startRESP(cfg, srv, sec.tlsConfig(), &addrs, log)
	if err != nil {
		ln.Close()
		if hs != nil {
			hs.Close()
		}
		return err
	}
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	adm.SetReady(true)
	coldDesc := cfg.ColdStore
	switch cfg.ColdStore {
	case "fs":
		coldDesc = "fs:" + cfg.ColdDir
	case "s3":
		coldDesc = "s3:" + cfg.S3Endpoint + "/" + cfg.S3Bucket
	}
	if node != nil {
		log.Info("cluster member", "node_id", node.self.ID, "advertise", node.self.Addr, "fault_domain", node.self.FaultDomain,
			"epoch", node.cluster.View().Epoch(), "members", node.cluster.View().Len(), "etcd", cfg.Endpoints(), "protocol_max", cfg.ProtocolMax)
	}
	// A size is logged in bytes and binary units, so "1GB" (10^9 bytes)
	// is not mistaken for 1GiB.
	log.Info("size settings", config.SizeAttrs(cfg)...)
	log.Info("gpucached serving", "data", addrs.Data, "admin", addrs.Admin, "cold", coldDesc, "hot_capacity", cfg.HotCapacity.String(),
		"auth", authDesc(cfg), "tls", tlsDesc(cfg), "sealed", len(cfg.SealKeys) > 0,
		"classes", cfg.HotMinClass.String()+".."+cfg.HotMaxClass.String(), "prefault", cfg.HotPrefault, "policy", cfg.HotPolicy, "version", Version)
	if opts.Ready != nil {
		opts.Ready(addrs)
	}

	var runErr error
wait:
	for {
		select {
		case <-ctx.Done():
			log.Info("shutting down: draining connections", "timeout", cfg.DrainTimeout)
			break wait
		case actor := <-drainReq:
			log.Info("drain requested", "actor", actor, "timeout", cfg.DrainTimeout)
			break wait
		case <-hup:
			if err := reload("SIGHUP"); err != nil {
				log.Warn("reload on SIGHUP failed; the running configuration is unchanged", "err", err)
			}
		case err := <-serveErr:
			runErr = fmt.Errorf("data listener: %w", err)
			break wait
		case err := <-adminErr:
			runErr = fmt.Errorf("admin listener: %w", err)
			break wait
		}
	}
	adm.SetReady(false)
	dctx, cancel := context.WithTimeout(context.Background(), cfg.DrainTimeout)
	defer cancel()
	if tier != nil && cfg.ColdWriteBehind && cfg.ColdSpillOnDrain {
		// While this node still owns its keys, hand what DRAM holds to the
		// cold tier: the next owners (or this node, restarted) refill it.
		spillBlocks(dctx, cfg.DrainTimeout/2, tier, store, log)
	}
	if node != nil {
		// Leave the cluster before closing connections: mark draining (no
		// new fills, keys move to the other members under a new epoch),
		// let granted fills finish, flush the cold tier, deregister.
		var flush func(context.Context)
		if tier != nil {
			flush = func(ctx context.Context) { tier.Flush(ctx, true) }
		}
		if err := node.drain(dctx, srv, flush); err != nil {
			log.Warn("cluster drain failed; the node's lease expires on its own", "err", err)
		}
	}
	if err := srv.Shutdown(dctx); err != nil {
		log.Warn("drain deadline passed; connections closed", "err", err)
	}
	respWait()
	if hs != nil {
		hs.Shutdown(dctx)
	}
	log.Info("gpucached stopped")
	return runErr
}

// spillBlocks runs the drain spill (coldtier.Tier.Spill) over the hot
// tier, bounded by budget within ctx, and logs what it did. A spill cut
// short loses nothing that was not already going to be lost: the blocks
// it did not write are recomputed, as without a spill.
func spillBlocks(ctx context.Context, budget time.Duration, tier *coldtier.Tier, store *hot.Store, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(ctx, budget)
	defer cancel()
	start := time.Now()
	rep := tier.Spill(ctx, func(from uint32, max int, fn func(ns identity.NamespaceDigest, key, parent identity.BlockKey, tokens uint32, payload []byte) bool) (uint32, bool) {
		return store.Export(from, max, fn)
	})
	attrs := []any{"blocks", rep.Blocks, "bytes", rep.Bytes, "skipped", rep.Skipped, "packs", rep.Packs,
		"failed", rep.Failed, "pending", rep.Pending, "took", time.Since(start).Round(time.Millisecond)}
	if rep.Complete && rep.Failed == 0 {
		log.Info("drain spill: DRAM blocks written to the cold tier", attrs...)
		return
	}
	log.Warn("drain spill incomplete: the blocks not written will be recomputed", append(attrs, "err", rep.Err)...)
}

// hotPolicy builds the hot tier's policy named by hot_policy: nil for the
// store's built-in order.
func hotPolicy(cfg config.Config) (policy.Policy, error) {
	if cfg.HotPolicy == config.BuiltinHotPolicy {
		return nil, nil
	}
	p, err := policy.New(cfg.HotPolicy)
	if err != nil {
		return nil, fmt.Errorf("hot_policy: %w", err)
	}
	return p, nil
}

func hotTagSize(cfg config.Config) int {
	if cfg.SealHotReads {
		return server.HotTagSize
	}
	return 0
}

func authDesc(cfg config.Config) string {
	if !cfg.AuthEnabled() {
		return "off (open mode, loopback only)"
	}
	return fmt.Sprintf("%d tenants", len(cfg.Tenants))
}

func tlsDesc(cfg config.Config) string {
	switch {
	case cfg.TLSClientCA != "":
		return "mtls"
	case cfg.TLSEnabled():
		return "tls"
	}
	return "off"
}

func hostLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	return err == nil && config.IsLoopback(host)
}

func listen(name, addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return nil, fmt.Errorf("%s %s: address already in use (is another gpucached running? choose another with --%s)", name, addr, config.FlagName(name))
		}
		return nil, fmt.Errorf("%s %s: %w", name, addr, err)
	}
	return ln, nil
}
