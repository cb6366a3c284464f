package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"syscall"
	"time"

	"github.com/gpucache/gpucache/api/identity"
	"github.com/gpucache/gpucache/api/wire"
	"github.com/gpucache/gpucache/internal/cold"
	"github.com/gpucache/gpucache/internal/cold/tier"
	"github.com/gpucache/gpucache/internal/config"
	"github.com/gpucache/gpucache/internal/degrade"
	"github.com/gpucache/gpucache/internal/directory"
	"github.com/gpucache/gpucache/internal/hot"
	"github.com/gpucache/gpucache/internal/policy"
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
	Unix  string // the socket path; "" when unix_listen is off (unix.go)
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

// Options are Start's optional parts.
type Options struct {
	// Logger receives the node's log. Default: NewLogger(cfg, Stderr).
	Logger *slog.Logger
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
	// ColdStore, when set, wraps the cold store the cold tier uses (tests
	// hold its writes with it).
	ColdStore func(cold.Store) cold.Store
	// DrainDeadline, when set, makes the drain's deadlines instead of
	// context.WithTimeout (tests decide when each passes): "drain" is
	// drain_timeout less its margin, bounding the whole stop; "spill" is
	// half of drain_timeout, bounding the spill.
	DrainDeadline func(what string, parent context.Context, d time.Duration) (context.Context, context.CancelFunc)
}

// serverConfig is the server's config for the node: limits, timeouts,
// security and protocol settings (the cold tier's and the cluster's hooks
// are added by the phases that build them).
func serverConfig(cfg config.Config, dir *directory.Directory, store *hot.Store, sec *secure, log *slog.Logger) server.Config {
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
		RegionBytes:          int64(cfg.RegionBytes),
		TenantRegionBytes:    int64(cfg.TenantRegionBytes),

		MaxVersion:   uint8(cfg.ProtocolMax),
		RESPProfiles: respProfiles(cfg),
	}
	if cfg.SealHotReads {
		scfg.HotSeal = sec.keyring
	}
	return scfg
}

// logServing logs what the node serves with, ending with the
// "gpucached serving" line.
func (n *Node) logServing() {
	cfg, log := n.cfg, n.log
	coldDesc := cfg.ColdStore
	switch cfg.ColdStore {
	case "fs":
		coldDesc = "fs:" + cfg.ColdDir
	case "s3":
		coldDesc = "s3:" + cfg.S3Endpoint + "/" + cfg.S3Bucket
	}
	if node := n.member; node != nil {
		log.Info("cluster member", "node_id", node.self.ID, "advertise", node.self.Addr, "fault_domain", node.self.FaultDomain,
			"epoch", node.cluster.View().Epoch(), "members", node.cluster.View().Len(), "etcd", cfg.Endpoints(), "protocol_max", cfg.ProtocolMax)
	}
	// A size is logged in bytes and binary units, so "1GB" (10^9 bytes)
	// is not mistaken for 1GiB.
	log.Info("size settings", config.SizeAttrs(cfg)...)
	log.Info("gpucached serving", "data", n.addrs.Data, "admin", n.addrs.Admin, "cold", coldDesc, "hot_capacity", cfg.HotCapacity.String(),
		"auth", authDesc(cfg), "tls", tlsDesc(cfg), "sealed", len(cfg.SealKeys) > 0,
		"classes", cfg.HotMinClass.String()+".."+cfg.HotMaxClass.String(), "prefault", cfg.HotPrefault, "policy", cfg.HotPolicy, "cost_model", cfg.HotCostModel, "version", Version)
}

// spillBlocks runs the drain spill (tier.Tier.Spill) over the hot tier
// within ctx (the spill's deadline), logs what it did and returns how many
// blocks it copied into packs. Packs the deadline left queued are written
// by the drain's final flush (coldDrain), which logs what was written in
// the end. A spill cut short loses nothing that was not already going to
// be lost: the blocks it did not write are recomputed, as without a spill.
func spillBlocks(ctx context.Context, ct *tier.Tier, store *hot.Store, log *slog.Logger) int {
	start := time.Now()
	rep := ct.Spill(ctx, func(from uint32, max int, fn func(ns identity.NamespaceDigest, key, parent identity.BlockKey, tokens uint32, payload []byte) bool) (uint32, bool) {
		return store.Export(from, max, fn)
	})
	attrs := []any{"blocks", rep.Blocks, "bytes", rep.Bytes, "skipped", rep.Skipped, "packs", rep.Packs,
		"failed", rep.Failed, "queued", rep.Pending, "took", time.Since(start).Round(time.Millisecond)}
	switch {
	case rep.Failed > 0 || !rep.Walked:
		log.Warn("drain spill incomplete: the blocks not copied or not written will be recomputed (the drain's last line counts them)", append(attrs, "err", rep.Err)...)
	case rep.Complete && rep.Pending == 0:
		log.Info("drain spill: DRAM blocks written to the cold tier", attrs...)
	default:
		// Every block was copied into a pack; the spill's deadline (or a
		// stalled store) left some packs queued for the final flush.
		log.Info("drain spill: DRAM blocks copied to the cold tier; the packs queued are written by the final flush", append(attrs, "reason", rep.Err)...)
	}
	return rep.Blocks
}

// coldDrain counts what a drain wrote to the cold tier, from the spill to
// its final flush, for the drain's last cold tier line.
type coldDrain struct {
	ct      *tier.Tier
	start   time.Time
	written uint64 // ct.Stats().BlocksWritten when the drain started
	packs   uint64 // ct.Stats().SinkCompleted when the drain started
	spilled int    // blocks the spill copied into packs
}

func newColdDrain(ct *tier.Tier) *coldDrain {
	st := ct.Stats()
	return &coldDrain{ct: ct, start: time.Now(), written: st.BlocksWritten, packs: st.SinkCompleted}
}

// flush writes what the cold tier holds, within ctx.
func (d *coldDrain) flush(ctx context.Context) { d.ct.Flush(ctx, true) }

// report logs what the drain wrote to the cold tier and, if the deadline
// (or the store) left some unwritten, how many blocks will be recomputed.
func (d *coldDrain) report(log *slog.Logger) {
	st := d.ct.Stats()
	lost := st.BatchedBlocks + st.SinkBlocks
	attrs := []any{"blocks_written", st.BlocksWritten - d.written, "packs_written", st.SinkCompleted - d.packs,
		"blocks_spilled", d.spilled, "blocks_lost", lost, "packs_lost", st.SinkPending, "took", time.Since(d.start).Round(time.Millisecond)}
	if lost == 0 && st.SinkPending == 0 {
		log.Info("drain: cold tier flushed", attrs...)
		return
	}
	log.Warn("drain: cold tier not flushed by the drain's deadline: the blocks lost will be recomputed", attrs...)
}

// hotPolicy builds the hot tier's policy named by hot_policy: nil for the
// store's built-in order.
func hotPolicy(cfg config.Config) (policy.Policy, error) {
	if cfg.HotPolicy == config.BuiltinHotPolicy {
		return nil, nil
	}
	switch cfg.HotPolicy {
	case policy.CostName, policy.AdaptiveName:
		m, err := policy.CostModelByName(cfg.HotCostModel)
		if err != nil {
			return nil, fmt.Errorf("hot_cost_model: %w", err)
		}
		if cfg.HotPolicy == policy.AdaptiveName {
			return policy.NewAdaptiveModel(m), nil
		}
		return policy.NewCostModel(m), nil
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
