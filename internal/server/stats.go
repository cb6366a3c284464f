package server

import (
	"math"
	"runtime/metrics"
	"sync"
	"time"

	"github.com/gpucache/gpucache/api/wire"
	"github.com/gpucache/gpucache/internal/hot"
	"github.com/gpucache/gpucache/internal/security/audit"
)

// leaseRegistry remembers which tenant each live lease belongs to, so a GET
// releases only its own tenant's leases, and Shutdown releases them all.
type leaseRegistry struct {
	sync.Mutex
	m         map[hot.LeaseID]leaseRec // guarded by the mutex
	lastSweep time.Time                // guarded by the mutex
}

type leaseRec struct {
	tenant  string
	expires time.Time
}

// sweepAbove is the registry size above which expired records are swept.
const sweepAbove = 4096

func (s *Server) addLease(id hot.LeaseID, tenant string, ttl time.Duration) {
	now := time.Now()
	s.leases.Lock()
	defer s.leases.Unlock()
	if s.leases.m == nil {
		s.leases.m = make(map[hot.LeaseID]leaseRec)
	}
	s.leases.m[id] = leaseRec{tenant: tenant, expires: now.Add(ttl)}
	if len(s.leases.m) > sweepAbove && now.Sub(s.leases.lastSweep) > time.Second {
		s.leases.lastSweep = now
		for id, r := range s.leases.m {
			if now.After(r.expires) {
				delete(s.leases.m, id)
			}
		}
	}
}

// takeLease removes a live lease of tenant from the registry and reports
// whether the caller may release it.
func (s *Server) takeLease(id hot.LeaseID, tenant string) bool {
	s.leases.Lock()
	defer s.leases.Unlock()
	r, ok := s.leases.m[id]
	if !ok || r.tenant != tenant {
		return false
	}
	delete(s.leases.m, id)
	return true
}

// releaseAllLeases releases every lease granted through this server.
func (s *Server) releaseAllLeases() int {
	s.leases.Lock()
	defer s.leases.Unlock()
	n := 0
	for id := range s.leases.m {
		if s.store.ReleaseLease(id) {
			n++
		}
	}
	clear(s.leases.m)
	return n
}

// Stats returns the server's counters, the hot tier's, and the Go runtime's
// heap and GC-pause figures, as STAT reports them.
func (s *Server) Stats() []wire.StatEntry {
	st := s.store.Stats()
	e := []wire.StatEntry{
		{Name: "conns_accepted", Value: s.stats.connsAccepted.Load()},
		{Name: "conns_rejected", Value: s.stats.connsRejected.Load()},
		{Name: "conns_open", Value: uint64(max(s.stats.connsOpen.Load(), 0))},
		{Name: "bytes_in", Value: s.stats.bytesIn.Load()},
		{Name: "bytes_out", Value: s.stats.bytesOut.Load()},
		{Name: "blocks_hit", Value: s.stats.blocksHit.Load()},
		{Name: "blocks_miss", Value: s.stats.blocksMiss.Load()},
		{Name: "cold_refill_hits", Value: s.stats.coldHits.Load()},
		{Name: "cold_refill_misses", Value: s.stats.coldMisses.Load()},
		{Name: "lookup_promoted", Value: s.stats.promoted.Load()},
		{Name: "key_mismatches", Value: s.stats.keyMismatch.Load()},
		{Name: "auth_failures", Value: s.stats.authFailures.Load()},
		{Name: "acl_denied", Value: s.stats.denied.Load()},
		{Name: "rate_limited", Value: s.stats.rateLimited.Load()},
		{Name: "replays_rejected", Value: s.stats.replays.Load()},
		{Name: "hot_seal_failures", Value: s.stats.hotSealFailures.Load()},
		{Name: "hot_hits", Value: st.Hits},
		{Name: "hot_misses", Value: st.Misses},
		{Name: "hot_identity_mismatches", Value: st.IdentityMismatches},
		{Name: "hot_puts", Value: st.Puts},
		{Name: "hot_put_rejects", Value: st.PutRejects},
		{Name: "hot_not_admitted", Value: st.NotAdmitted},
		{Name: "hot_evictions", Value: st.Evictions},
		{Name: "hot_deletes", Value: st.Deletes},
		{Name: "hot_blocks", Value: st.Blocks},
		{Name: "hot_bytes_cached", Value: st.BytesCached},
		{Name: "hot_bytes_reserved", Value: st.BytesReserved},
		{Name: "hot_bytes_mapped", Value: st.BytesMapped},
		{Name: "hot_capacity_bytes", Value: st.CapacityBytes},
		{Name: "hot_leases_active", Value: st.LeasesActive},
		{Name: "hot_leases_granted", Value: st.LeasesGranted},
		{Name: "hot_leases_expired", Value: st.LeasesExpired},
		{Name: "hot_pinned", Value: st.Pinned},
		{Name: "hot_tenant_rejects", Value: st.TenantRejects},
		{Name: "hot_quota_evictions", Value: st.QuotaEvictions},
		{Name: "hot_leases_refused", Value: st.LeasesRefused},
	}
	e = append(e, s.regionStats()...)
	ds := s.dir.Stats()
	e = append(e,
		wire.StatEntry{Name: "fill_epoch", Value: uint64(ds.Epoch)},
		wire.StatEntry{Name: "fill_live", Value: uint64(ds.Fills)},
		wire.StatEntry{Name: "fill_waiters", Value: uint64(ds.Waiters)},
		wire.StatEntry{Name: "fill_leads", Value: ds.Leads},
		wire.StatEntry{Name: "fill_joins", Value: ds.Joins},
		wire.StatEntry{Name: "fill_hits", Value: ds.Hits},
		wire.StatEntry{Name: "fill_denied", Value: ds.Denied},
		wire.StatEntry{Name: "fill_denied_tenant", Value: ds.DeniedTenantFills},
		wire.StatEntry{Name: "fill_finished", Value: ds.Finished},
		wire.StatEntry{Name: "fill_published", Value: ds.Published},
		wire.StatEntry{Name: "fill_failed", Value: ds.Failed},
		wire.StatEntry{Name: "fill_fenced", Value: ds.Fenced},
		wire.StatEntry{Name: "fill_promotions", Value: ds.Promotions},
		wire.StatEntry{Name: "fill_expired", Value: ds.Expired},
	)
	for op := wire.OpHello; op <= wire.OpMax; op++ {
		e = append(e, wire.StatEntry{Name: "requests_" + asciiLower(op.String()), Value: s.stats.requests[op].Load()})
	}
	for code := wire.CodeBadMagic; code <= wire.CodeMax; code++ {
		e = append(e, wire.StatEntry{Name: "errors_" + asciiLower(code.String()), Value: s.stats.errors[code].Load()})
	}
	rt := ReadRuntime()
	e = append(e,
		wire.StatEntry{Name: "go_heap_inuse_bytes", Value: rt.HeapInUse},
		wire.StatEntry{Name: "go_gc_cycles", Value: rt.GCCycles},
		wire.StatEntry{Name: "go_gc_pause_p50_ns", Value: rt.PauseP50Nanos},
		wire.StatEntry{Name: "go_gc_pause_p99_ns", Value: rt.PauseP99Nanos},
		wire.StatEntry{Name: "go_gc_pause_max_ns", Value: rt.PauseMaxNanos},
		wire.StatEntry{Name: "go_gc_pauses", Value: rt.Pauses},
		wire.StatEntry{Name: "go_gc_stop_p99_ns", Value: rt.StopP99Nanos},
		wire.StatEntry{Name: "go_gc_stop_max_ns", Value: rt.StopMaxNanos},
		wire.StatEntry{Name: "go_other_pause_p99_ns", Value: rt.OtherPauseP99Nanos},
		wire.StatEntry{Name: "go_other_pause_max_ns", Value: rt.OtherPauseMaxNanos},
	)
	var epoch, mode uint64
	if cl := s.cfg.Cluster; cl != nil {
		st := cl.state.Load()
		epoch, mode = st.view.Epoch(), uint64(st.mode)
	}
	// Cluster figures come last, so the entries of before keep their order.
	e = append(e,
		wire.StatEntry{Name: "wrong_epoch", Value: s.stats.wrongEpoch.Load()},
		wire.StatEntry{Name: "cluster_epoch", Value: epoch},
		wire.StatEntry{Name: "control_mode", Value: mode},
		wire.StatEntry{Name: "readonly_refused", Value: s.stats.modeRefused.Load()},
	)
	if s.cfg.Lower != nil {
		e = append(e, s.cfg.Lower.Stats()...)
	}
	e = append(e, s.connStats()...)
	e = append(e, s.resp.Stats()...)
	e = append(e, auditStats(s.guard.Audit().Stats())...)
	if s.cfg.ForwardStats != nil {
		e = append(e, s.cfg.ForwardStats()...)
	}
	return e
}

// auditStats are the audit sink's counters: every failed authentication
// the node saw (HELLO, RESP AUTH, the admin listener's bearer and
// certificate checks, sessions a reload ended), written or not; those
// the per-source throttle did not write and the summaries that reported
// them; the sources it tracks; events the sink lost (a full disk); and
// the audit file's rotations and size.
func auditStats(a audit.Stats) []wire.StatEntry {
	return []wire.StatEntry{
		{Name: "audit_auth_failures", Value: a.AuthFailures},
		{Name: "audit_auth_failures_suppressed", Value: a.Suppressed},
		{Name: "audit_summaries", Value: a.Summaries},
		{Name: "audit_sources", Value: a.Sources},
		{Name: "audit_write_errors", Value: a.WriteErrors},
		{Name: "audit_rotations", Value: a.Rotations},
		{Name: "audit_file_bytes", Value: a.FileBytes},
	}
}

func asciiLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c >= 'A' && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// Runtime is a snapshot of the Go runtime's heap and GC figures. A GC
// stop-the-world pause has two parts: stopping (from the request to stop
// until every P has stopped: the time goroutines take to reach a safe point
// and the OS takes to run the threads that must see the request) and the
// work done while stopped. The "Pause" figures are the whole pause, the
// "Stop" figures the stopping part alone; their difference is the work.
type Runtime struct {
	HeapInUse          uint64 // bytes of live and not-yet-swept heap objects
	GCCycles           uint64 // completed GC cycles
	Pauses             uint64 // GC stop-the-world pauses recorded (two per cycle)
	PauseP50Nanos      uint64 // upper bound of the bucket holding the median stop-the-world GC pause
	PauseP99Nanos      uint64 // same for the 99th percentile
	PauseMaxNanos      uint64 // upper bound of the highest non-empty bucket
	StopP99Nanos       uint64 // p99 of the stopping part of GC pauses (bucket upper bound)
	StopMaxNanos       uint64 // highest non-empty bucket of the stopping part
	OtherPauseP99Nanos uint64 // p99 of stop-the-world pauses not for GC (e.g. ReadMemStats, traces)
	OtherPauseMaxNanos uint64 // highest non-empty bucket of those
}

// ReadRuntime reads heap and GC pause figures from runtime/metrics.
func ReadRuntime() Runtime {
	samples := []metrics.Sample{
		{Name: "/memory/classes/heap/objects:bytes"},
		{Name: "/gc/cycles/total:gc-cycles"},
		{Name: "/sched/pauses/total/gc:seconds"},
		{Name: "/sched/pauses/stopping/gc:seconds"},
		{Name: "/sched/pauses/total/other:seconds"},
	}
	metrics.Read(samples)
	var rt Runtime
	if samples[0].Value.Kind() == metrics.KindUint64 {
		rt.HeapInUse = samples[0].Value.Uint64()
	}
	if samples[1].Value.Kind() == metrics.KindUint64 {
		rt.GCCycles = samples[1].Value.Uint64()
	}
	if h := histogram(samples[2]); h != nil {
		rt.Pauses = histCount(h)
		rt.PauseP50Nanos = quantileNanos(h, 0.50)
		rt.PauseP99Nanos = quantileNanos(h, 0.99)
		rt.PauseMaxNanos = quantileNanos(h, 1)
	}
	if h := histogram(samples[3]); h != nil {
		rt.StopP99Nanos = quantileNanos(h, 0.99)
		rt.StopMaxNanos = quantileNanos(h, 1)
	}
	if h := histogram(samples[4]); h != nil {
		rt.OtherPauseP99Nanos = quantileNanos(h, 0.99)
		rt.OtherPauseMaxNanos = quantileNanos(h, 1)
	}
	return rt
}

// histogram returns s's histogram, or nil when the runtime lacks the metric.
func histogram(s metrics.Sample) *metrics.Float64Histogram {
	if s.Value.Kind() != metrics.KindFloat64Histogram {
		return nil
	}
	return s.Value.Float64Histogram()
}

// histCount returns the number of samples in h.
func histCount(h *metrics.Float64Histogram) uint64 {
	var total uint64
	for _, c := range h.Counts {
		total += c
	}
	return total
}

// quantileNanos returns the upper bound, in ns, of the bucket holding the
// q-quantile; 0 for an empty histogram.
func quantileNanos(h *metrics.Float64Histogram, q float64) uint64 {
	total := histCount(h)
	if total == 0 {
		return 0
	}
	want := uint64(math.Ceil(q * float64(total)))
	var cum uint64
	for i, c := range h.Counts {
		cum += c
		if cum >= want && c > 0 {
			upper := h.Buckets[i+1]
			if math.IsInf(upper, 1) {
				upper = h.Buckets[i]
			}
			return uint64(upper * 1e9)
		}
	}
	return 0
}
