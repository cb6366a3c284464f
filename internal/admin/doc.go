// Package admin serves the daemon's HTTP admin endpoints: Prometheus
// metrics, health and readiness probes, and pprof.
package admin
