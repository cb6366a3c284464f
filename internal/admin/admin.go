package admin

import (
	"errors"
	"net/http"
	"net/http/pprof"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/gpucache/gpucache/api/wire"
)

// StatsFunc returns the named counters STAT reports.
type StatsFunc func() []wire.StatEntry

// gauges are STAT entries that go up and down; every other entry is a
// monotonic counter.
var gauges = map[string]bool{
	"conns_open": true, "hot_blocks": true, "hot_bytes_cached": true, "hot_bytes_reserved": true,
	"hot_bytes_mapped": true, "hot_capacity_bytes": true, "hot_leases_active": true, "hot_pinned": true,
	"fill_epoch": true, "fill_live": true, "fill_waiters": true,
	"cold_bytes_held": true, "cold_bytes_limit": true, "cold_bytes_batched": true, "cold_packs_pending": true,
	"cold_write_degraded": true, "cold_store_connected": true,
	"cold_index_entries": true, "cold_index_max": true, "cold_index_ready": true, "cold_hidden": true,
	"go_heap_inuse_bytes": true, "go_gc_pause_p50_ns": true, "go_gc_pause_p99_ns": true, "go_gc_pause_max_ns": true,
	"conns_unauthenticated": true, "request_buffer_bytes": true, "request_buffer_limit_bytes": true,
	"request_buffer_tenant_limit_bytes": true, "request_buffer_presession_bytes": true, "request_buffer_presession_limit_bytes": true,
	"forward_clients": true, "forward_bytes_held": true, "forward_byte_budget": true,
	"cluster_epoch": true, "control_mode": true, // levels: gauges never end in _total
	"cold_quota_tracked_packs":  true,                             // the cold quota ledger's size
	"ratelimit_dynamic_buckets": true, "antireplay_entries": true, // the guard's bounded tables (daemon guardStats)
	"audit_sources": true, "audit_file_bytes": true, // the audit throttle's table, the audit file's size
	"flash_bytes": true, "flash_live_bytes": true, "flash_segments": true, "flash_blocks": true, "flash_capacity_bytes": true,
	"flash_write_buffer_bytes": true, "flash_write_queue": true, "flash_degraded": true, "flash_direct": true, // the flash tier's levels
}

// collector exports STAT entries as gpucache_* metrics on each scrape, so
// the data path pays nothing for metrics.
type collector struct{ stats StatsFunc }

func (collector) Describe(chan<- *prometheus.Desc) {} // unchecked collector

func (c collector) Collect(ch chan<- prometheus.Metric) {
	for _, e := range c.stats() {
		if strings.HasPrefix(e.Name, "go_") {
			continue // the Go collector reports the runtime
		}
		kind, name := prometheus.CounterValue, "gpucache_"+e.Name+"_total"
		if gauges[e.Name] {
			kind, name = prometheus.GaugeValue, "gpucache_"+e.Name
		}
		desc := prometheus.NewDesc(name, "gpucache STAT "+e.Name, nil, nil)
		ch <- prometheus.MustNewConstMetric(desc, kind, float64(e.Value))
	}
}

// Handler is the admin HTTP handler.
type Handler struct {
	mux      *http.ServeMux
	statsFn  StatsFunc // the status page's STAT source
	ready    atomic.Bool
	authz    atomic.Pointer[Authorizer]
	degraded atomic.Pointer[func() string]
	control  atomic.Pointer[func() (ControlMode, string)]
	tenants  atomic.Pointer[func() []TenantUsage] // tenants.go
	certs    atomic.Pointer[func() []CertExpiry]  // certexpiry.go
	// histograms are the server's latency histograms (histograms.go).
	histograms atomic.Pointer[func() []Histogram]
}

// Authorizer decides whether a request to a protected endpoint (pprof and
// everything under /admin/) comes from an admin. It returns who the actor
// is, or an error that is answered 401 (no or bad credential) or 403 (not
// an admin). Without one, protected endpoints answer 403.
type Authorizer func(r *http.Request) (actor string, err error)

// ErrForbidden marks an Authorizer error as "authenticated, not an admin".
var ErrForbidden = errors.New("gpucache/admin: admin role required")

// New builds the admin handler. Readiness starts false; call SetReady.
func New(stats StatsFunc) *Handler {
	h := &Handler{mux: http.NewServeMux(), statsFn: stats}
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		collector{stats: stats},
		tenantCollector{h: h},
		certCollector{h: h},
		histogramCollector{h: h},
	)
	h.mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	h.mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Write([]byte("ok\n"))
	})
	h.mux.HandleFunc("/readyz", h.readyz)
	h.mux.Handle("/debug/pprof/", h.protect(http.HandlerFunc(pprof.Index)))
	h.mux.Handle("/debug/pprof/cmdline", h.protect(http.HandlerFunc(pprof.Cmdline)))
	h.mux.Handle("/debug/pprof/profile", h.protect(http.HandlerFunc(pprof.Profile)))
	h.mux.Handle("/debug/pprof/symbol", h.protect(http.HandlerFunc(pprof.Symbol)))
	h.mux.Handle("/debug/pprof/trace", h.protect(http.HandlerFunc(pprof.Trace)))
	return h
}

// SetAuthorizer installs the check protected endpoints run.
func (h *Handler) SetAuthorizer(a Authorizer) { h.authz.Store(&a) }

// HandleAdmin registers a state-changing endpoint under /admin/ that only
// answers POST from an admin; fn gets the actor's name.
func (h *Handler) HandleAdmin(path string, fn func(w http.ResponseWriter, r *http.Request, actor string)) {
	h.mux.Handle("/admin/"+path, h.protectActor(func(w http.ResponseWriter, r *http.Request, actor string) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			http.Error(w, "use POST\n", http.StatusMethodNotAllowed)
			return
		}
		fn(w, r, actor)
	}))
}

// HandleView registers a read-only endpoint at /path that answers GET to
// whoever may read the protected endpoints (pprof's rule).
func (h *Handler) HandleView(path string, fn http.HandlerFunc) {
	h.mux.Handle("/"+path, h.protect(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			w.Header().Set("Allow", http.MethodGet)
			http.Error(w, "use GET\n", http.StatusMethodNotAllowed)
			return
		}
		fn(w, r)
	})))
}

func (h *Handler) protect(next http.Handler) http.Handler {
	return h.protectActor(func(w http.ResponseWriter, r *http.Request, _ string) { next.ServeHTTP(w, r) })
}

func (h *Handler) protectActor(fn func(w http.ResponseWriter, r *http.Request, actor string)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a := h.authz.Load()
		if a == nil {
			http.Error(w, "admin endpoints are not configured\n", http.StatusForbidden)
			return
		}
		actor, err := (*a)(r)
		switch {
		case errors.Is(err, ErrForbidden):
			http.Error(w, err.Error()+"\n", http.StatusForbidden)
			return
		case err != nil:
			w.Header().Set("WWW-Authenticate", `Bearer realm="gpucached"`)
			http.Error(w, err.Error()+"\n", http.StatusUnauthorized)
			return
		}
		fn(w, r, actor)
	})
}

// SetReady sets whether the node is up (false while it starts and once it
// drains: /readyz answers 503 "not ready" whatever the control mode).
func (h *Handler) SetReady(ready bool) { h.ready.Store(ready) }

// SetDegraded installs what /readyz asks, when ready, for a reason the node
// is degraded ("" when it is not). A degraded node is still ready: /readyz
// answers 200 with "ready, degraded: <reason>".
func (h *Handler) SetDegraded(why func() string) { h.degraded.Store(&why) }

// ControlMode is what a clustered node's control plane lets it serve, as
// /readyz reports it; the values are STAT control_mode's.
type ControlMode uint8

const (
	// ControlLive: etcd answers; the node serves reads and writes.
	ControlLive ControlMode = iota
	// ControlReadOnly: etcd is unreachable; the node serves reads of the
	// keys it owned under the last known view and refuses writes.
	ControlReadOnly
	// ControlUnknown: etcd has been unreachable past control_grace; the
	// owner of every key is unknown and the node serves nothing.
	ControlUnknown
)

// SetControl installs what /readyz asks, when ready, for the node's control
// mode and, when it is not live, why. Without it (a single node) the mode
// is live. /readyz then answers, by mode:
//
//	live       200 "ready" (or "ready, degraded: <reason>", SetDegraded)
//	read-only  200 "ready-read-only: <reason>"; with ?write=1 (a probe for
//	           nodes that must take writes) 503 "not ready for writes:
//	           read-only (<reason>)"
//	unknown    503 "not ready: control plane unreachable for longer than
//	           control_grace"
func (h *Handler) SetControl(mode func() (ControlMode, string)) { h.control.Store(&mode) }

// readyz is GET /readyz: 503 while starting or draining (SetReady), then
// by control mode (SetControl), then degraded or not (SetDegraded).
func (h *Handler) readyz(w http.ResponseWriter, r *http.Request) {
	if !h.ready.Load() {
		http.Error(w, "not ready", http.StatusServiceUnavailable)
		return
	}
	write := false
	if v := r.URL.Query().Get("write"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			http.Error(w, "readyz: write="+strconv.Quote(v)+" is not a boolean; use /readyz?write=1 to ask whether the node takes writes", http.StatusBadRequest)
			return
		}
		write = b
	}
	mode, why := ControlLive, ""
	if f := h.control.Load(); f != nil {
		mode, why = (*f)()
	}
	switch mode {
	case ControlLive:
	case ControlReadOnly:
		if write {
			http.Error(w, "not ready for writes: read-only ("+why+")", http.StatusServiceUnavailable)
			return
		}
		// Still 200: reads of the keys the node owned are served, and a
		// reader's load balancer keeps it; ?write=1 is for writers.
		w.Write([]byte("ready-read-only: " + why + "\n"))
		return
	default: // unknown: every read is a miss, every write refused
		http.Error(w, "not ready: control plane unreachable for longer than control_grace", http.StatusServiceUnavailable)
		return
	}
	if f := h.degraded.Load(); f != nil {
		if why := (*f)(); why != "" {
			// Still 200: a degraded node serves (its hot tier hits,
			// its faults are misses), so a load balancer keeps it.
			w.Write([]byte("ready, degraded: " + why + "\n"))
			return
		}
	}
	w.Write([]byte("ready\n"))
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }
