package admin

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// CertExpiry names a serving certificate's listener and its NotAfter.
type CertExpiry struct {
	Listener string // "data", "admin", "resp"
	NotAfter time.Time
}

// SetCertExpiry installs the source of gpucache_tls_cert_expiry_timestamp_seconds:
// one gauge per TLS listener with the current (reloaded) certificate's
// expiry as Unix seconds, so an alert needs no TLS probe of its own. nil,
// or a source that returns nothing (plain TCP), exports no series.
func (h *Handler) SetCertExpiry(fn func() []CertExpiry) {
	if fn == nil {
		h.certs.Store(nil)
		return
	}
	h.certs.Store(&fn)
}

var certExpiryDesc = prometheus.NewDesc("gpucache_tls_cert_expiry_timestamp_seconds",
	"NotAfter of the certificate a TLS listener serves now, as Unix seconds", []string{"listener"}, nil)

// certCollector exports the certificate expiries on each scrape.
type certCollector struct{ h *Handler }

func (certCollector) Describe(chan<- *prometheus.Desc) {} // unchecked collector

func (c certCollector) Collect(ch chan<- prometheus.Metric) {
	fn := c.h.certs.Load()
	if fn == nil {
		return
	}
	for _, e := range (*fn)() {
		ch <- prometheus.MustNewConstMetric(certExpiryDesc, prometheus.GaugeValue, float64(e.NotAfter.Unix()), e.Listener)
	}
}
