package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/gpucache/gpucache/internal/admin"
	"github.com/gpucache/gpucache/internal/config"
	"github.com/gpucache/gpucache/internal/control"
	"github.com/gpucache/gpucache/internal/control/etcdmember"
	"github.com/gpucache/gpucache/internal/degrade"
	"github.com/gpucache/gpucache/internal/security/tlsconf"
	"github.com/gpucache/gpucache/internal/server"
)

// clusterNode is a daemon's part in a cluster: its etcd registration, the
// watch that feeds views to the server (fencing fills on every epoch), the
// control-plane health loop (live → read-only → unknown) and drain.
type clusterNode struct {
	cfg     config.Config
	log     *slog.Logger
	cli     *clientv3.Client
	self    control.Member
	cluster *server.Cluster
	faults  *degrade.Registry
	onMode  func(server.ControlMode)
	// unreachable is why the control plane is not live (the last failed
	// probe's error), "" while it is: /readyz's reason (readiness). Set
	// before the mode it explains.
	unreachable atomic.Pointer[string]

	mu sync.Mutex
	m  *etcdmember.Membership // replaced when the lease is lost and the node rejoins

	drainOnce sync.Once
	drained   chan struct{} // closed when a drain has deregistered the node
	drainErr  error
}

// joinTimeout bounds joining at startup, including waiting for a previous
// registration of the same node ID (a restart after kill -9) to expire.
func joinTimeout(cfg config.Config) time.Duration { return 2*cfg.MemberLeaseTTL + 10*time.Second }

// joinCluster connects to etcd and registers this node. listen is the bound
// data address (the advertise address defaults to it).
func joinCluster(ctx context.Context, cfg config.Config, listen string, log *slog.Logger, opts Options) (*clusterNode, error) {
	id, addr, domain, err := cfg.Member(listen)
	if err != nil {
		return nil, err
	}
	ecfg, err := etcdClientConfig(cfg)
	if err != nil {
		return nil, err
	}
	jctx, cancel := context.WithTimeout(ctx, joinTimeout(cfg))
	defer cancel()
	cli, err := dialEtcd(jctx, ecfg)
	if err != nil {
		return nil, fmt.Errorf("etcd %v: %w", cfg.Endpoints(), err)
	}
	n := &clusterNode{
		cfg: cfg, log: log, cli: cli, faults: opts.Faults, onMode: opts.OnControlMode, drained: make(chan struct{}),
		self: control.Member{ID: control.MemberID(id), Addr: addr, FaultDomain: domain,
			ProtoVersion: uint8(cfg.ProtocolMax), CapacityBytes: uint64(cfg.HotCapacity)},
	}
	m, err := n.register(jctx)
	if err != nil {
		cli.Close()
		return nil, err
	}
	n.m = m
	n.cluster = server.NewCluster(n.self.ID, m.Current())
	return n, nil
}

// dialEtcd makes the etcd client, bounded by ctx (the join's deadline and
// the daemon's shutdown) and by nothing shorter. With a user name,
// clientv3.New authenticates before it returns, under the client's
// DialTimeout when one is set: etcd's answer to a password (a bcrypt
// compare, seconds of CPU on a loaded machine) would race that deadline
// and could lose to it, so that a wrong password read as "context deadline
// exceeded". So New runs without a DialTimeout, in a client context that is
// cancelled if ctx ends first; once New has returned, the client lives
// until Close, whatever ctx does.
func dialEtcd(ctx context.Context, ec clientv3.Config) (*clientv3.Client, error) {
	// The grpc dial does not block and ctx bounds authentication. (Without
	// a DialTimeout the lease client waits its default 5 s, not 6 s, for
	// the first keep-alive answer.)
	ec.DialTimeout = 0
	life, kill := context.WithCancel(context.WithoutCancel(ctx))
	ec.Context = life
	stop := context.AfterFunc(ctx, kill)
	cli, err := clientv3.New(ec)
	if !stop() {
		// ctx ended first: the client's context is cancelled, and
		// authentication, if it was still waiting, failed with it.
		if err == nil {
			cli.Close()
		}
		return nil, fmt.Errorf("gave up waiting for etcd to answer: %w", context.Cause(ctx))
	}
	if err != nil {
		kill()
		return nil, err
	}
	return cli, nil // Close cancels the client's context, derived from life
}

// etcdClientConfig builds the etcd client's config: endpoints, TLS (the
// server is always verified against etcd_ca; etcd_cert/etcd_key add a
// client certificate) and etcd user authentication.
func etcdClientConfig(cfg config.Config) (clientv3.Config, error) {
	ec := clientv3.Config{
		Endpoints:   cfg.Endpoints(),
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
		Username:    cfg.EtcdUsername,
	}
	if cfg.EtcdCA != "" {
		tc, err := tlsconf.NewClient(tlsconf.ClientFiles{CAFile: cfg.EtcdCA, CertFile: cfg.EtcdCert, KeyFile: cfg.EtcdKey})
		if err != nil {
			return ec, fmt.Errorf("etcd TLS: %w", err)
		}
		ec.TLS = tc
	}
	p, err := cfg.EtcdPassword()
	if err != nil {
		return ec, err
	}
	ec.Password = p
	return ec, nil
}

// register joins under a fresh lease. A registration of the same ID that
// is still alive (this node restarted before its old lease expired) is
// waited out: the old key vanishes when its lease expires, and the node
// then joins under a new epoch.
func (n *clusterNode) register(ctx context.Context) (*etcdmember.Membership, error) {
	backoff := 100 * time.Millisecond
	warned := false
	for {
		self := n.self
		m, err := etcdmember.New(ctx, etcdmember.Config{
			Client: n.cli, Prefix: n.cfg.EtcdPrefix, Self: &self, LeaseTTL: n.cfg.MemberLeaseTTL, Logger: n.log,
		})
		if err == nil {
			return m, nil
		}
		if !errors.Is(err, control.ErrDuplicateMember) {
			return nil, fmt.Errorf("joining the cluster at %v: %w", n.cfg.Endpoints(), err)
		}
		if !warned {
			n.log.Warn("a previous registration of this node is still alive; waiting for its lease to expire",
				"node_id", n.self.ID, "lease_ttl", n.cfg.MemberLeaseTTL)
			warned = true
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("joining the cluster: node_id %q is still registered (another node with the same id, or a previous run whose lease has not expired): %w", n.self.ID, err)
		case <-t.C:
		}
		backoff = min(2*backoff, time.Second)
	}
}

func (n *clusterNode) membership() *etcdmember.Membership {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.m
}

// run feeds every view to the server (fencing fills on each new epoch) and
// rejoins when the lease is lost, until ctx ends.
func (n *clusterNode) run(ctx context.Context, srv *server.Server) {
	for ctx.Err() == nil {
		m := n.membership()
		w := m.Watch(ctx)
	feed:
		for {
			select {
			case <-ctx.Done():
				return
			case v, ok := <-w:
				if !ok {
					return // closed: the node is leaving
				}
				n.apply(srv, v)
			case <-m.LeaseLost():
				break feed
			}
		}
		select {
		case <-n.drained:
			return // a drained node does not come back
		default:
		}
		n.log.Warn("cluster lease lost (etcd unreachable longer than the lease TTL); rejoining", "node_id", n.self.ID)
		m.Close()
		nm, err := n.register(ctx)
		if err != nil {
			if ctx.Err() == nil {
				n.log.Error("rejoin failed; serving as a non-member until restart", "err", err)
			}
			return
		}
		n.mu.Lock()
		n.m = nm
		n.mu.Unlock()
	}
}

func (n *clusterNode) apply(srv *server.Server, v control.View) {
	prev := n.cluster.View()
	fenced, err := srv.AdvanceView(v)
	if err != nil {
		n.log.Error("cannot advance the directory epoch", "epoch", v.Epoch(), "err", err)
	}
	if v.Epoch() > prev.Epoch() {
		logViewChange(n.log, prev, v, n.self.ID, fenced)
	}
}

// logViewChange logs one "cluster view" line for a new view: its epoch and
// the previous one, and which members joined, left (a member whose lease
// expired: stopped, killed or cut off from etcd) or started draining, each
// as id@addr, so an operator reading one node's log sees who went away.
func logViewChange(log *slog.Logger, prev, next control.View, self control.MemberID, fenced int) {
	var joined, left, draining []string
	name := func(m control.Member) string { return string(m.ID) + "@" + m.Addr }
	for _, m := range next.Members() {
		old, ok := prev.Member(m.ID)
		switch {
		case !ok || old.Addr != m.Addr:
			joined = append(joined, name(m))
		case m.Draining && !old.Draining:
			draining = append(draining, name(m))
		}
	}
	for _, m := range prev.Members() {
		if now, ok := next.Member(m.ID); !ok || now.Addr != m.Addr {
			left = append(left, name(m))
		}
	}
	_, member := next.Member(self)
	attrs := []any{"epoch", next.Epoch(), "prev_epoch", prev.Epoch(), "members", next.Len()}
	for _, g := range []struct {
		key string
		ids []string
	}{{"joined", joined}, {"left", left}, {"draining", draining}} {
		if len(g.ids) > 0 {
			attrs = append(attrs, g.key, strings.Join(g.ids, ","))
		}
	}
	attrs = append(attrs, "self_member", member, "fills_fenced", fenced)
	lvl := slog.LevelInfo
	if len(left) > 0 {
		lvl = slog.LevelWarn // keys moved: the members that left owned them
	}
	log.Log(context.Background(), lvl, "cluster view", attrs...)
}

// health probes etcd every ControlProbe and sets the control mode: live
// while etcd answers; read-only from the first failure until ControlGrace
// has passed since the last success; then unknown (every key's owner is
// unknown, every read a miss) until etcd answers again. Each probe is
// bounded by degrade.Do and the control_plane_loss failpoint.
func (n *clusterNode) health(ctx context.Context) {
	t := time.NewTicker(n.cfg.ControlProbe)
	defer t.Stop()
	lastOK := time.Now()
	mode := server.ControlLive
	budget := min(n.cfg.ControlProbe, 2*time.Second)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		_, err := degrade.Do(ctx, n.faults, degrade.ControlPlaneLoss, budget, func(ctx context.Context) (struct{}, error) {
			return struct{}{}, n.membership().Probe(ctx)
		})
		now := time.Now()
		next := server.ControlLive
		switch {
		case err == nil:
			lastOK = now
		case now.Sub(lastOK) < n.cfg.ControlGrace:
			next = server.ControlReadOnly
		default:
			next = server.ControlUnknown
		}
		if ctx.Err() != nil {
			return
		}
		why := ""
		if next != server.ControlLive {
			why = fmt.Sprintf("etcd unreachable since %s (%v)", lastOK.UTC().Format(time.RFC3339), err)
		}
		n.unreachable.Store(&why)
		if next != mode {
			mode = next
			n.cluster.SetMode(mode)
			lvl := slog.LevelWarn
			if mode == server.ControlLive {
				lvl = slog.LevelInfo
			}
			n.log.Log(ctx, lvl, "control plane", "mode", mode.String(), "err", err, "last_ok", lastOK.Format(time.RFC3339Nano))
			if n.onMode != nil {
				n.onMode(mode)
			}
		}
	}
}

// readiness is /readyz's control mode and, when it is not live, why
// (admin.Handler.SetControl).
func (n *clusterNode) readiness() (admin.ControlMode, string) {
	why := ""
	if p := n.unreachable.Load(); p != nil {
		why = *p
	}
	switch n.cluster.Mode() {
	case server.ControlLive:
		return admin.ControlLive, ""
	case server.ControlReadOnly:
		return admin.ControlReadOnly, why
	}
	return admin.ControlUnknown, why
}

// drain marks this node draining (it owns no key from the next epoch and
// takes no new fill), waits for the fills it granted to finish (bounded by
// the drain timeout), flushes the cold tier, and deregisters. It is run
// once; later calls return the first result.
func (n *clusterNode) drain(ctx context.Context, srv *server.Server, flush func(context.Context)) error {
	n.drainOnce.Do(func() {
		defer close(n.drained)
		if mode := n.cluster.Mode(); mode != server.ControlLive {
			n.drainErr = fmt.Errorf("drain: etcd is unreachable (control mode %s); the node's lease expires on its own after %v", mode, n.cfg.MemberLeaseTTL)
			return
		}
		m := n.membership()
		if _, err := m.Drain(ctx, n.self.ID); err != nil {
			n.drainErr = fmt.Errorf("drain: %w", err)
			return
		}
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for srv.InFlightFills() > 0 {
			select {
			case <-ctx.Done():
				n.log.Warn("drain: fills still in flight at the deadline", "fills", srv.InFlightFills())
				goto leave
			case <-t.C:
			}
		}
	leave:
		if flush != nil {
			flush(ctx)
		}
		if err := m.Close(); err != nil { // leaves: key deleted, epoch +1
			n.drainErr = fmt.Errorf("drain: leave: %w", err)
			return
		}
		n.log.Info("drained and deregistered", "node_id", n.self.ID)
	})
	return n.drainErr
}

// close deregisters (if still registered) and closes the etcd client.
// Without etcd (control mode not live) it does not try to leave: the lease
// expires on its own and the others remove this node then.
func (n *clusterNode) close() {
	if n.cluster.Mode() == server.ControlLive {
		n.membership().Close()
	} else {
		n.membership().Abandon()
	}
	n.cli.Close()
}

// viewJSON is the admin /cluster answer.
type viewJSON struct {
	Self    string        `json:"self"`
	Epoch   uint64        `json:"epoch"`
	Mode    string        `json:"control_mode"`
	Members []memberJSON  `json:"members"`
	Plan    *control.Plan `json:"isolated,omitempty"`
}

type memberJSON struct {
	ID            string `json:"id"`
	Addr          string `json:"addr"`
	FaultDomain   string `json:"fault_domain"`
	ProtoVersion  uint8  `json:"proto_version"`
	CapacityBytes uint64 `json:"capacity_bytes"`
	Draining      bool   `json:"draining,omitempty"`
}

func (n *clusterNode) viewJSON(plan *control.Plan) viewJSON {
	v := n.cluster.View()
	out := viewJSON{Self: string(n.self.ID), Epoch: v.Epoch(), Mode: n.cluster.Mode().String(), Plan: plan}
	for _, m := range v.Members() {
		out.Members = append(out.Members, memberJSON{string(m.ID), m.Addr, m.FaultDomain, m.ProtoVersion, m.CapacityBytes, m.Draining})
	}
	return out
}

// routes registers the cluster's admin endpoints: GET /cluster (the view),
// POST /admin/drain (drain this node, then stop), POST
// /admin/isolate?domain=D[&budget=N] (remove every member of a fault
// domain in one transaction, or nothing).
func (n *clusterNode) routes(h interface {
	HandleAdmin(string, func(http.ResponseWriter, *http.Request, string))
	HandleView(string, http.HandlerFunc)
}, startDrain func(actor string)) {
	h.HandleView("cluster", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(n.viewJSON(nil))
	})
	h.HandleAdmin("drain", func(w http.ResponseWriter, _ *http.Request, actor string) {
		startDrain(actor)
		w.Write([]byte("draining: no new fills; in-flight fills finish, then the node deregisters and stops\n"))
	})
	h.HandleAdmin("isolate", func(w http.ResponseWriter, r *http.Request, actor string) {
		domain := r.URL.Query().Get("domain")
		budget := uint64(math.MaxUint64)
		if b := r.URL.Query().Get("budget"); b != "" {
			if _, err := fmt.Sscan(b, &budget); err != nil {
				http.Error(w, "budget is not a number\n", http.StatusBadRequest)
				return
			}
		}
		ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
		defer cancel()
		p, err := n.membership().Isolate(ctx, domain, budget)
		switch {
		case errors.Is(err, control.ErrUnknownDomain):
			http.Error(w, err.Error()+"\n", http.StatusNotFound)
			return
		case errors.Is(err, control.ErrEpochOverflow):
			http.Error(w, err.Error()+"; nothing changed\n", http.StatusConflict)
			return
		case err != nil:
			http.Error(w, err.Error()+"\n", http.StatusServiceUnavailable)
			return
		}
		n.log.Warn("fault domain isolated", "actor", actor, "domain", domain, "victims", len(p.Victims), "epoch", p.To)
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(n.viewJSON(&p))
	})
}
