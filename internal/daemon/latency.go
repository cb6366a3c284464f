package daemon

import (
	"github.com/gpucache/gpucache/internal/admin"
	"github.com/gpucache/gpucache/internal/server"
)

// latencyHistograms hands the server's latency histograms to the admin
// listener (gpucache_request_seconds, gpucache_fill_wait_seconds): read on
// each scrape, so the data path pays only its own observations.
func latencyHistograms(srv *server.Server) func() []admin.Histogram {
	bounds := server.LatencyBounds()
	return func() []admin.Histogram {
		snap := srv.Latencies()
		out := make([]admin.Histogram, len(snap))
		for i, h := range snap {
			out[i] = admin.Histogram{Name: h.Name, LabelNames: h.LabelNames, LabelValues: h.LabelValues,
				Bounds: bounds, Counts: h.Counts, Sum: h.Sum}
		}
		return out
	}
}
