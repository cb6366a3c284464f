package daemon

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/gpucache/gpucache/internal/admin"
	"github.com/gpucache/gpucache/internal/cold/tier"
	"github.com/gpucache/gpucache/internal/config"
	"github.com/gpucache/gpucache/internal/directory"
	"github.com/gpucache/gpucache/internal/flash"
	"github.com/gpucache/gpucache/internal/hot"
	"github.com/gpucache/gpucache/internal/lower"
	"github.com/gpucache/gpucache/internal/policy"
	"github.com/gpucache/gpucache/internal/server"
)

// Node is a running gpucached node, the handle Start returns (the shape of
// etcd's embed.Etcd). Start builds it in phases (security, cold tier, hot
// tier, fill directory and server, cluster membership, admin, listeners);
// each phase registers how to undo what it built as it builds it, so a
// failed phase releases the ones before it in reverse order, and a node
// that stops releases them all the same way, after its drain.
//
// A node stops on Close, on POST /admin/drain, or when its data or admin
// listener fails; Done is closed once it has drained and released
// everything, and Err then says why it stopped.
type Node struct {
	cfg    config.Config
	log    *slog.Logger
	opts   Options
	hotPol policy.Policy

	addrs Addrs // complete when Start returns; read-only after

	// The phases' parts, set by Start and read-only once it returns (the
	// run goroutine reads them after Start has handed them over).
	sec       *secure
	cold      *coldNode
	flash     *flash.Tier // the local flash tier (flash.go); nil when flash_dir is off
	lower     lower.Tier  // below DRAM: flash, then cold (lower.go); nil: DRAM only
	store     *hot.Store
	dir       *directory.Directory
	scfg      server.Config
	life      *nodeLifecycle // nil without a cold store
	ln        net.Listener   // the data listener (TLS-wrapped when tls is on)
	member    *clusterNode   // nil unless clustered
	srv       *server.Server
	adm       *admin.Handler
	tenantUse *tenantMetrics
	hs        *http.Server // nil when admin_listen is off
	hup       chan os.Signal
	respWait  func() // waits for the RESP listener's goroutine after srv.Shutdown
	unixWait  func() // waits for the Unix listener's goroutine after srv.Shutdown

	drainReq chan string // POST /admin/drain's actor
	serveErr chan error  // the data listener's Serve result
	adminErr chan error  // the admin listener's Serve result

	// cleanups undo the phases; release runs them last to first. Only
	// Start (while it builds) and the run goroutine (once it stops) touch
	// them, never both.
	cleanups []func()

	closeOnce sync.Once
	closing   chan struct{} // closed by Close: drain and stop
	// drainCtx bounds the drain beyond drain_timeout: cutDrain, called
	// when a Close's context ends, cuts it short.
	drainCtx context.Context
	cutDrain context.CancelFunc
	// stopCtx is the drain's deadline, for release (closeCtx); set by run.
	stopCtx context.Context

	ready chan struct{} // closed when the node serves
	done  chan struct{} // closed when the node has stopped and released everything
	err   error         // why it stopped; written before done is closed
}

// Start builds a node from cfg and starts serving. It returns once the
// node serves (Ready is closed and the "gpucached serving" line logged), or
// with an error a user can act on, having released what it had built.
// ctx bounds the start (joining the cluster, checking the cold store); it
// does not stop the node afterwards: Close does.
func Start(ctx context.Context, cfg config.Config, opts Options) (*Node, error) {
	if opts.Stderr == nil {
		opts.Stderr = os.Stderr
	}
	if opts.Logger == nil {
		opts.Logger = NewLogger(cfg, opts.Stderr)
	}
	n := &Node{
		cfg: cfg, log: opts.Logger, opts: opts,
		drainReq: make(chan string, 1), serveErr: make(chan error, 1), adminErr: make(chan error, 1),
		closing: make(chan struct{}), ready: make(chan struct{}), done: make(chan struct{}),
	}
	phases := []func(context.Context) error{
		n.preflight,
		n.startSecure,
		n.startCold,
		n.startFlash,
		n.startHot,
		n.startColdLoop,
		n.startServerConfig,
		n.listenData,
		n.startMembership,
		n.startServer,
		n.startAdmin,
		n.startBackground,
		n.listenAdmin,
		n.watchSIGHUP,
		n.listenRESP,
		n.listenUnix,
		n.serve,
	}
	for _, phase := range phases {
		if err := phase(ctx); err != nil {
			n.release()
			return nil, err
		}
	}
	n.drainCtx, n.cutDrain = context.WithCancel(context.Background())
	close(n.ready)
	go n.run()
	return n, nil
}

// Addrs returns the addresses the node listens on.
func (n *Node) Addrs() Addrs { return n.addrs }

// Ready is closed when the node serves; Start closes it before it
// returns the node.
func (n *Node) Ready() <-chan struct{} { return n.ready }

// Done is closed when the node has stopped: drained, its listeners
// closed, its goroutines gone and its resources released.
func (n *Node) Done() <-chan struct{} { return n.done }

// Err is nil while the node runs and after a stop that Close or POST
// /admin/drain asked for; after a listener failed it says which and why.
func (n *Node) Err() error {
	select {
	case <-n.done:
		return n.err
	default:
		return nil
	}
}

// Close drains the node (as SIGTERM does: readiness off, the drain spill,
// leaving the cluster, connections given drain_timeout to finish) and
// releases it. It returns Err once the node is done, or ctx.Err() if ctx
// ends first; the drain is then cut short and the node finishes releasing
// in the background (Done says when). Close may be called more than once
// and after the node stopped on its own.
func (n *Node) Close(ctx context.Context) error {
	n.closeOnce.Do(func() { close(n.closing) })
	stop := context.AfterFunc(ctx, n.cutDrain)
	defer stop()
	select {
	case <-n.done:
		return n.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// onClose registers what undoes the phase being built.
func (n *Node) onClose(f func()) { n.cleanups = append(n.cleanups, f) }

// release undoes the phases built so far, last first.
func (n *Node) release() {
	for i := len(n.cleanups) - 1; i >= 0; i-- {
		n.cleanups[i]()
	}
	n.cleanups = nil
}

// run serves until a stop is asked for or a listener fails, then drains
// and releases the node.
func (n *Node) run() {
	defer close(n.done)
	defer n.cutDrain()
	n.err = n.wait()
	// One deadline for the drain and the tiers' closes after it
	// (closeCtx): the whole stop keeps drain_timeout.
	dctx, cancel := n.deadline("drain", n.drainCtx, n.cfg.DrainTimeout-drainMargin(n.cfg.DrainTimeout))
	defer cancel()
	n.drain(dctx)
	n.stopCtx = dctx
	n.release()
}

// closeCtx bounds what the phases' undo flushes: the drain's deadline once
// the node drained, none when a failed Start releases it.
func (n *Node) closeCtx() context.Context {
	if n.stopCtx != nil {
		return n.stopCtx
	}
	return context.Background()
}

// wait serves SIGHUP reloads until the node is to stop; it returns why
// (nil for a stop that was asked for).
func (n *Node) wait() error {
	for {
		select {
		case <-n.closing:
			n.log.Info("shutting down: draining connections", "timeout", n.cfg.DrainTimeout)
			return nil
		case actor := <-n.drainReq:
			n.log.Info("drain requested", "actor", actor, "timeout", n.cfg.DrainTimeout)
			return nil
		case <-n.hup:
			if err := n.reload("SIGHUP"); err != nil {
				n.log.Warn("reload on SIGHUP failed; the running configuration is unchanged", "err", err)
			}
		case err := <-n.serveErr:
			return fmt.Errorf("data listener: %w", err)
		case err := <-n.adminErr:
			return fmt.Errorf("admin listener: %w", err)
		}
	}
}

// preflight checks what needs no resource: the config, the file
// descriptor limit, the hot policy's name.
func (n *Node) preflight(context.Context) error {
	cfg, log := n.cfg, n.log
	if err := cfg.Validate(); err != nil {
		return err
	}
	logAblation(cfg, log)
	if soft, hard, err := raiseFDLimit(); err != nil {
		log.Warn("cannot read RLIMIT_NOFILE; max_conns is not checked against it", "err", err)
	} else if err := checkFDLimit(cfg, soft, hard); err != nil {
		return err
	} else {
		log.Debug("file descriptor limit", "soft", soft, "hard", hard, "needed", fdsNeeded(cfg))
	}
	pol, err := hotPolicy(cfg)
	n.hotPol = pol
	return err
}

// startSecure builds the node's security: audit sink, tenants and their
// rights, seal and cold keys, TLS.
func (n *Node) startSecure(context.Context) error {
	sec, err := newSecure(n.cfg, n.log, n.opts.Stderr, n.opts.Getenv)
	if err != nil {
		return err
	}
	n.onClose(func() { sec.Close() })
	n.sec = sec
	if n.cfg.AuthEnabled() && !n.cfg.TLSEnabled() && !hostLoopback(n.cfg.Listen) {
		n.log.Warn("authentication without TLS on a non-loopback address: bearer secrets and payloads cross the network in plaintext; set tls_cert and tls_key")
	}
	return nil
}

// startCold opens the cold store and builds the cold tier over it (cold.go)
// unless cold_store is off; nothing runs yet (startColdLoop).
func (n *Node) startCold(ctx context.Context) error {
	cn := &coldNode{log: n.log, onChange: n.opts.OnColdConnected}
	cn.connected.Store(true)
	n.cold = cn
	if n.cfg.ColdStore == "off" {
		return nil
	}
	store, releaseStore, err := openColdStore(ctx, n.cfg, cn)
	if err != nil {
		return err
	}
	n.onClose(releaseStore)
	if n.opts.ColdStore != nil {
		store = n.opts.ColdStore(store)
	}
	tcfg, err := coldTierConfig(n.cfg, store, n.log, n.sec, n.opts.Faults)
	if err != nil {
		return err
	}
	ct, err := tier.New(tcfg)
	if err != nil {
		return fmt.Errorf("cold tier: %w", err)
	}
	n.onClose(func() { ct.Close() }) // idempotent: startColdLoop closes it first
	if err := ct.SetColdQuotas(n.cfg.TenantColdQuotas()); err != nil {
		return fmt.Errorf("cold tier: %w", err)
	}
	// Deletes through cn.store (the admin lifecycle's) keep the tenants'
	// cold bytes current (cold/tier/quota.go).
	cn.tier, cn.store = ct, ct.AccountedStore()
	return nil
}

// startHot builds the DRAM tier; with write-behind its evictions go to the
// cold tier.
func (n *Node) startHot(context.Context) error {
	cfg := n.cfg
	var onEvict func(hot.Namespace, hot.Key, hot.Key, uint32, []byte) bool
	if n.lower = n.lowerTiers(); n.lower != nil { // lower.go: flash, then cold
		onEvict = n.lower.Evicted
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
		Policy:          n.hotPol,
		TenantHoldBytes: cfg.TenantHoldCap(),
		TenantLeases:    cfg.TenantLeaseCap(hot.DefaultMaxLeases),
	})
	if err != nil {
		return fmt.Errorf("hot tier: %w", err)
	}
	n.onClose(func() { store.Close() })
	n.store = store
	if err := store.SetTenantQuotas(cfg.TenantDRAMQuotas()); err != nil {
		return fmt.Errorf("hot tier: %w", err)
	}
	return nil
}

// startColdLoop runs the cold tier's write-behind, index and usage loops
// (coldNode.run); the drain flushes what is pending (coldDrain), not the
// loop's stop.
func (n *Node) startColdLoop(context.Context) error {
	ct := n.cold.tier
	if ct == nil {
		return nil
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		n.cold.run(ctx, n.cfg.ColdFlushInterval)
	}()
	n.onClose(func() {
		// The drain flushed within its deadline (coldDrain): Close first,
		// so the loop stops without a final flush of its own, unbounded.
		ct.Close()
		stop()
		<-done
	})
	return nil
}

// startServerConfig builds the fill directory and the server's config:
// limits, security, the cold tier's hooks, the lifecycle operations.
func (n *Node) startServerConfig(context.Context) error {
	cfg, sec, cn := n.cfg, n.sec, n.cold
	// The fill table is the daemon's, so a reload can change a tenant's
	// share of it; the server does not close a directory it was given.
	dir, err := directory.New(directory.Config{MaxFills: config.FillSlots, TenantFills: cfg.TenantFillCap()})
	if err != nil {
		return fmt.Errorf("fill directory: %w", err)
	}
	n.onClose(func() { dir.Close() })
	n.dir = dir
	logTenantShares(n.log, cfg)
	n.scfg = serverConfig(cfg, dir, n.store, sec, n.log)
	n.life = newNodeLifecycle(cfg, cn, n.store, sec, n.log, n.opts.LifecycleStore) // lifecycle.go: backfill sink, purge, retention
	n.scfg.Lower = n.lower
	return nil
}

// listenData binds the data listener; its address is the default
// advertise address, so it is bound before the node joins a cluster.
func (n *Node) listenData(context.Context) error {
	ln, err := listen("listen", n.cfg.Listen)
	if err != nil {
		return err
	}
	n.onClose(func() { ln.Close() }) // srv.Shutdown closes it first once it serves
	n.ln = ln
	n.addrs.Data = ln.Addr().String()
	return nil
}

// startMembership joins the cluster (cluster.go) and builds the RESP
// forwarder to the other members, when clustered.
func (n *Node) startMembership(ctx context.Context) error {
	if !n.cfg.Clustered() {
		return nil
	}
	node, err := joinCluster(ctx, n.cfg, n.addrs.Data, n.log, n.opts)
	if err != nil {
		return err
	}
	n.onClose(node.close)
	n.member = node
	n.scfg.Cluster = node.cluster
	fw, err := newForwarder(n.cfg, node, n.log) // RESP keys other members own
	if err != nil {
		return err
	}
	n.onClose(func() { fw.Close() })
	n.scfg.Forwarder, n.scfg.ForwardStats = fw, fw.Stats
	return nil
}

// startServer builds the server; it serves once the listeners are up.
func (n *Node) startServer(context.Context) error {
	srv, err := server.New(n.scfg)
	if err != nil {
		return err
	}
	n.srv = srv
	if n.life != nil {
		n.life.srv = srv
	}
	if tc := n.sec.tlsConfig(); tc != nil {
		n.ln = tls.NewListener(n.ln, tc)
	}
	return nil
}

// startAdmin builds the admin handler: metrics, readiness, the status
// page, reload, the lifecycle operations and the cluster's endpoints.
func (n *Node) startAdmin(context.Context) error {
	cfg, sec := n.cfg, n.sec
	adm := admin.New(guardStats(sec.guard, liveStats(n.store, n.srv.Stats)))
	adm.SetAuthorizer(sec.authorizeAdmin)
	adm.SetDegraded(func() string {
		if r := n.cold.degraded(); r != "" {
			return r
		}
		return n.flashDegraded()
	})
	adm.SetCertExpiry(sec.certExpiry)                                    // gpucache_tls_cert_expiry_timestamp_seconds
	n.tenantUse = newTenantMetrics(cfg, n.store, n.cold.tier, sec.guard) // tenantusage.go: per-tenant /metrics
	adm.SetTenantUsage(n.tenantUse.usage)
	// latency.go: gpucache_request_seconds, gpucache_fill_wait_seconds
	adm.SetHistograms(latencyHistograms(n.srv))
	if n.life != nil { // gpucache admin inventory|purge|expire|backfill
		adm.RegisterLifecycle(n.life.lc)
	}
	adm.HandleAdmin("reload", n.handleReload)
	if n.member != nil {
		adm.SetControl(n.member.readiness) // /readyz by control mode: live, read-only, unknown
		n.member.routes(adm, n.requestDrain)
	} else {
		staticRoutes(adm, cfg, n.addrs.Data) // GET /cluster: the one-member static view
	}
	n.adm = adm
	return nil
}

// requestDrain is POST /admin/drain: the node drains and stops.
func (n *Node) requestDrain(actor string) {
	select {
	case n.drainReq <- actor:
	default: // already draining
	}
}

// startBackground starts the node's background loops: the cluster's view
// feed and health probe, the status page's hit rates, cold retention.
func (n *Node) startBackground(context.Context) error {
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	if node := n.member; node != nil {
		wg.Go(func() { node.run(ctx, n.srv) })
		wg.Go(func() { node.health(ctx) })
	}
	n.onClose(func() {
		stop()
		wg.Wait()
	})
	rates := admin.NewHitRates() // the status page's hit ratios over the last minutes
	n.adm.HandlePage(pageSource(n.cfg, n.member, n.sec, n.addrs.Data, rates))
	wg.Go(func() { rates.Run(ctx, liveStats(n.store, n.srv.Stats)) }) // every admin.RateSample: also the lease sweep
	wg.Go(func() { n.life.runRetention(ctx, n.opts.Retention) })
	return nil
}

// listenAdmin binds admin_listen (unless off) and serves the admin
// handler on it.
func (n *Node) listenAdmin(context.Context) error {
	if n.cfg.AdminListen == "off" {
		return nil
	}
	aln, err := listen("admin_listen", n.cfg.AdminListen)
	if err != nil {
		return err
	}
	n.addrs.Admin = aln.Addr().String()
	aln = newCapListener(aln, n.cfg.AdminMaxConns) // inside TLS: handshakes count too
	if tc := n.sec.adminTLSConfig(); tc != nil {
		aln = tls.NewListener(aln, tc)
	}
	hs := newAdminServer(n.adm, n.cfg)
	n.hs = hs
	go func() { n.adminErr <- hs.Serve(aln) }()
	n.onClose(func() {
		hs.Close() // the drain shuts it down first
		// hs.Close closes only the listeners Serve has started tracking;
		// when a later phase fails, Serve may not have run yet, and its own
		// deferred Close would free the port only after Start returned.
		aln.Close()
	})
	return nil
}

// watchSIGHUP reloads the configuration on SIGHUP when the node has a
// config source.
func (n *Node) watchSIGHUP(context.Context) error {
	if n.opts.Reload == nil {
		return nil
	}
	n.hup = make(chan os.Signal, 1)
	signal.Notify(n.hup, syscall.SIGHUP)
	n.onClose(func() { signal.Stop(n.hup) })
	return nil
}

// listenRESP opens resp_listen when configured (resp.go).
func (n *Node) listenRESP(context.Context) error {
	wait, err := startRESP(n.cfg, n.srv, n.sec.tlsConfig(), &n.addrs, n.log)
	if err != nil {
		return err
	}
	n.respWait = wait
	return nil
}

// listenUnix opens unix_listen when configured (unix.go).
func (n *Node) listenUnix(context.Context) error {
	wait, err := startUnix(n.cfg, n.srv, &n.addrs, n.log)
	if err != nil {
		return err
	}
	n.unixWait = wait
	return nil
}

// serve starts serving the data listener, turns readiness on and logs
// what the node runs with.
func (n *Node) serve(context.Context) error {
	go func() { n.serveErr <- n.srv.Serve(n.ln) }()
	n.adm.SetReady(true)
	n.logServing()
	return nil
}

// reload reads the configuration again and applies what may change while
// the node runs: security (secure.reload), the tenants' shares of DRAM,
// fills and cold bytes.
func (n *Node) reload(actor string) error {
	if n.opts.Reload == nil {
		return errors.New("this node was started without a config source to reload")
	}
	next, err := n.opts.Reload()
	if err != nil {
		n.sec.audit.AdminAction(actor, "reload_refused", slog.String("reason", err.Error()))
		return err
	}
	if err := n.sec.reload(next, actor); err != nil {
		return err
	}
	applyTenantShares(n.log, next, n.store, n.dir, n.srv)
	n.tenantUse.set(next)
	if n.cold.tier != nil {
		if err := n.cold.tier.SetColdQuotas(next.TenantColdQuotas()); err != nil {
			n.log.Warn("reload: per-tenant cold quotas unchanged", "err", err)
		}
	}
	if n.flash != nil {
		n.flash.SetTenantQuotas(next.TenantFlashQuotas())
	}
	return nil
}

// handleReload is POST /admin/reload.
func (n *Node) handleReload(w http.ResponseWriter, _ *http.Request, actor string) {
	if err := n.reload(actor); err != nil {
		n.log.Warn("reload failed; the running configuration is unchanged", "actor", actor, "err", err)
		http.Error(w, "reload failed: "+err.Error()+"\n", http.StatusUnprocessableEntity)
		return
	}
	w.Write([]byte("reloaded\n"))
}

// drainMargin is the part of drain_timeout the drain's steps leave to
// releasing the node after them (closing the tiers, the listeners, the
// cluster client), so that the whole stop keeps drain_timeout on a loaded
// machine: a tenth of it, at most a second.
func drainMargin(timeout time.Duration) time.Duration { return min(timeout/10, time.Second) }

// deadline bounds parent by d: context.WithTimeout, unless a test sets
// Options.DrainDeadline to decide itself when the deadline named what
// passes ("drain" or "spill").
func (n *Node) deadline(what string, parent context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if n.opts.DrainDeadline != nil {
		return n.opts.DrainDeadline(what, parent, d)
	}
	return context.WithTimeout(parent, d)
}

// drain turns readiness off, spills DRAM to the flash and cold tiers when
// asked to, leaves the cluster, gives connections the rest of ctx to
// finish, closes the listeners, and flushes the flash and cold tiers
// within ctx. Every step is bounded by ctx (drain_timeout less
// drainMargin), the spill by half of drain_timeout: what is not written by
// then is recomputed, and the log says how many blocks that is.
func (n *Node) drain(dctx context.Context) {
	n.adm.SetReady(false)
	ct := n.cold.tier
	var cd *coldDrain
	if ct != nil && n.cfg.ColdWriteBehind {
		cd = newColdDrain(ct)
	}
	if n.cfg.ColdSpillOnDrain && (n.flash != nil || cd != nil) {
		sctx, cancel := n.deadline("spill", dctx, n.cfg.DrainTimeout/2)
		if n.flash != nil {
			// Flash first: it is faster than the cold store, and this node,
			// restarted, serves from it at once (flash.go).
			spillToFlash(sctx, n.flash, n.store, n.log)
		}
		coldSpill := n.flash == nil || n.cfg.FlashCold == config.FlashColdThrough
		if cd != nil && coldSpill && sctx.Err() == nil {
			// While this node still owns its keys, hand what DRAM holds to the
			// cold tier: the next owners (or this node, restarted) refill it.
			cd.spilled = spillBlocks(sctx, ct, n.store, n.log)
		}
		cancel()
	}
	if n.member != nil {
		// Leave the cluster before closing connections: mark draining (no
		// new fills, keys move to the other members under a new epoch),
		// let granted fills finish, flush the cold tier, deregister.
		var flush func(context.Context)
		if cd != nil {
			flush = cd.flush
		}
		if err := n.member.drain(dctx, n.srv, flush); err != nil {
			n.log.Warn("cluster drain failed; the node's lease expires on its own", "err", err)
		}
	}
	if err := n.srv.Shutdown(dctx); err != nil {
		n.log.Warn("drain deadline passed; connections closed", "err", err)
	}
	n.respWait()
	if n.unixWait != nil {
		n.unixWait()
	}
	if n.hs != nil {
		n.hs.Shutdown(dctx)
	}
	// The final flushes: what the connections and evictions queued since
	// the spill, and the spill's packs its deadline left queued. The
	// tiers' closes (release) write nothing past dctx.
	if n.flash != nil {
		if err := n.flash.Flush(dctx); err != nil {
			n.log.Warn("drain: flash tier not flushed; the records not written are recomputed", "err", err)
		}
	}
	if cd != nil {
		cd.flush(dctx)
		cd.report(n.log)
	}
	n.log.Info("gpucached stopped")
}
