package admin

import (
	"net/http"
	"net/http/pprof"
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
	"go_heap_inuse_bytes": true, "go_gc_pause_p50_ns": true, "go_gc_pause_p99_ns": true, "go_gc_pause_max_ns": true,
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
	mux   *http.ServeMux
	ready atomic.Bool
}

// New builds the admin handler. Readiness starts false; call SetReady.
func New(stats StatsFunc) *Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		collector{stats: stats},
	)
	h := &Handler{mux: http.NewServeMux()}
	h.mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	h.mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Write([]byte("ok\n"))
	})
	h.mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !h.ready.Load() {
			http.Error(w, "not ready\n", http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ready\n"))
	})
	h.mux.HandleFunc("/debug/pprof/", pprof.Index)
	h.mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	h.mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	h.mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	h.mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return h
}

// SetReady sets what /readyz answers.
func (h *Handler) SetReady(ready bool) { h.ready.Store(ready) }

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }
