package admin

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Histogram is one latency histogram the server keeps, exported as a
// classic Prometheus histogram gpucache_<Name> (_bucket, _sum, _count).
// Its label names and values come from the server's fixed sets (op and
// tier, path and outcome), never from what clients send.
type Histogram struct {
	// Name is the metric's name without the gpucache_ prefix, e.g.
	// request_seconds.
	Name string
	// Help is the metric's help text ("" for a default).
	Help string
	// LabelNames and LabelValues are the series' labels, in order; every
	// histogram of a Name has the same LabelNames.
	LabelNames, LabelValues []string
	// Bounds are the buckets' upper bounds in seconds, ascending, without
	// +Inf; Counts are the observations per bucket, not cumulative,
	// len(Bounds)+1 of them (the last is +Inf).
	Bounds []float64
	Counts []uint64
	// Sum is the observations' total, in seconds.
	Sum float64
}

// histogramHelp is the help text of the server's histograms.
var histogramHelp = map[string]string{
	"request_seconds":   "time a request spends in the server, from its header read to its response handed to the writer, by operation and the tier that served it",
	"fill_wait_seconds": "time a session waited for another session's fill of a block: a read's refill or an ACQUIRE (from JOINED to its notice), by how the wait ended",
}

// histogramCollector exports the histograms on each scrape.
type histogramCollector struct{ h *Handler }

func (histogramCollector) Describe(chan<- *prometheus.Desc) {} // unchecked collector

func (c histogramCollector) Collect(ch chan<- prometheus.Metric) {
	f := c.h.histograms.Load()
	if f == nil {
		return
	}
	descs := make(map[string]*prometheus.Desc)
	for _, h := range (*f)() {
		if len(h.Counts) != len(h.Bounds)+1 || len(h.LabelNames) != len(h.LabelValues) {
			continue // malformed: skip rather than fail the scrape
		}
		d := descs[h.Name]
		if d == nil {
			help := h.Help
			if help == "" {
				help = histogramHelp[h.Name]
			}
			if help == "" {
				help = "gpucache histogram " + h.Name
			}
			d = prometheus.NewDesc("gpucache_"+h.Name, help, h.LabelNames, nil)
			descs[h.Name] = d
		}
		buckets := make(map[float64]uint64, len(h.Bounds))
		var cum uint64
		for i, b := range h.Bounds {
			cum += h.Counts[i]
			buckets[b] = cum
		}
		cum += h.Counts[len(h.Bounds)]
		ch <- prometheus.MustNewConstHistogram(d, cum, h.Sum, buckets, h.LabelValues...)
	}
}

// SetHistograms installs the source of the latency histograms; nil
// removes them.
func (h *Handler) SetHistograms(fn func() []Histogram) {
	if fn == nil {
		h.histograms.Store(nil)
		return
	}
	h.histograms.Store(&fn)
}
