package server

import (
	"math/bits"
	"sync/atomic"
	"time"

	"github.com/gpucache/gpucache/api/wire"
)

// Latency histograms (exported by the admin listener as
// gpucache_request_seconds{op,tier} and gpucache_fill_wait_seconds{path,outcome}).
//
// A request's latency is the time it spends in the server: from its
// header read (the body of a request read whole follows at once; the
// payloads of PUT, PUT_FROM and FILL_COMMIT stream into their slots, so
// that reading is part of it) to its response handed to the writer (the
// write itself, which the client's reading paces, is not). A RESP GET or
// SET is timed from its command read (a SET's value streams in as part of
// it) to its reply written to the connection's buffer.
//
// Each histogram is lock-free: fixed exponential buckets and atomic
// counters, so an observation takes no lock and allocates nothing. The
// label sets are fixed here, never taken from what a client sends.

// latBounds is the number of finite bucket bounds: latBase·2^i for i in
// [0, latBounds), 16 µs to 16.8 s; a last bucket holds what is slower.
const latBounds = 21

// latBase is the first bucket's upper bound.
const latBase = 16 * time.Microsecond

// LatencyBounds returns the buckets' upper bounds in seconds, ascending,
// without the last (+Inf) one.
func LatencyBounds() []float64 {
	b := make([]float64, latBounds)
	for i := range b {
		b[i] = (latBase << i).Seconds()
	}
	return b
}

// latHist is one lock-free latency histogram.
type latHist struct {
	counts [latBounds + 1]atomic.Uint64 // not cumulative; the last is +Inf
	sum    atomic.Uint64                // nanoseconds
}

// latBucket is the index of the bucket that holds d: the first whose
// upper bound is at least d.
func latBucket(d time.Duration) int {
	if d <= latBase {
		return 0
	}
	return min(bits.Len64(uint64((d-1)/latBase)), latBounds)
}

// observe records one latency.
func (h *latHist) observe(d time.Duration) {
	d = max(d, 0)
	h.counts[latBucket(d)].Add(1)
	h.sum.Add(uint64(d))
}

// latOp is the operation a request latency is recorded under.
type latOp uint8

const (
	latGet latOp = iota
	latPut
	latLookup
	latGetInto
	latPutFrom
	latFillCommit
	latAcquire
	latRESPGet
	latRESPSet
	latOps
	latNone latOp = 255 // an operation that is not timed
)

var latOpNames = [latOps]string{"get", "put", "lookup", "get_into", "put_from", "fill_commit", "acquire", "resp_get", "resp_set"}

// latTier says which tier served a request. For a read (GET, GET_INTO,
// RESP GET) it is the lowest tier that served one of its blocks (a GET
// of a DRAM hit and a flash refill is flash), or miss when none did; a
// read that waited for another session's refill of the block is labelled
// by where the block is below DRAM (flash when the flash tier holds it,
// else cold). A RESP command on a key another member owns is forwarded.
// Every other operation is dram (a LOOKUP that reads flash blocks into
// DRAM for its lease is flash).
type latTier uint8

const (
	tierDRAM latTier = iota
	tierFlash
	tierCold
	tierMiss
	tierForwarded
	latTiers
)

var latTierNames = [latTiers]string{"dram", "flash", "cold", "miss", "forwarded"}

// latTiersOf are the tiers each operation is exported with: the label
// set is fixed, so every series exists from the start.
var latTiersOf = [latOps][]latTier{
	latGet:        {tierDRAM, tierFlash, tierCold, tierMiss},
	latPut:        {tierDRAM},
	latLookup:     {tierDRAM, tierFlash},
	latGetInto:    {tierDRAM, tierFlash, tierCold, tierMiss},
	latPutFrom:    {tierDRAM},
	latFillCommit: {tierDRAM},
	latAcquire:    {tierDRAM},
	latRESPGet:    {tierDRAM, tierFlash, tierCold, tierMiss, tierForwarded},
	latRESPSet:    {tierDRAM, tierForwarded},
}

// opLat maps a wire operation to the operation it is timed as.
var opLat = func() (m [wire.OpMax + 1]latOp) {
	for i := range m {
		m[i] = latNone
	}
	m[wire.OpGet], m[wire.OpPut], m[wire.OpPutOpaque] = latGet, latPut, latPut
	m[wire.OpLookup], m[wire.OpGetInto] = latLookup, latGetInto
	m[wire.OpPutFrom], m[wire.OpPutOpaqueFrom] = latPutFrom, latPutFrom
	m[wire.OpFillCommit], m[wire.OpAcquire] = latFillCommit, latAcquire
	return m
}()

// isRead reports whether op's tier starts at miss and is raised by each
// block served.
func (op latOp) isRead() bool { return op == latGet || op == latGetInto || op == latRESPGet }

// fillPath is where a session waited for another's fill: a read's refill
// (GET, GET_INTO, RESP GET, a leasing LOOKUP: refillMiss) or a client's
// ACQUIRE, from JOINED to the notice a WAIT took.
type fillPath uint8

const (
	fillRefill fillPath = iota
	fillAcquire
	fillPaths
)

var fillPathNames = [fillPaths]string{"refill", "acquire"}

// fillOutcome is how a fill wait ended: the block was filled, the waiter
// was promoted to lead the fill, the fill failed (or was fenced), or the
// wait timed out (a refill's; a WAIT that times out leaves the session
// waiting, so only its notice ends the wait).
type fillOutcome uint8

const (
	fillFinished fillOutcome = iota
	fillPromoted
	fillFailed
	fillTimeout
	fillOutcomes
)

var fillOutcomeNames = [fillOutcomes]string{"finished", "promoted", "failed", "timeout"}

// latencies are the server's histograms.
type latencies struct {
	req  [latOps][latTiers]latHist
	fill [fillPaths][fillOutcomes]latHist
}

func (l *latencies) observe(op latOp, t latTier, d time.Duration) {
	if op < latOps && t < latTiers {
		l.req[op][t].observe(d)
	}
}

func (l *latencies) fillWait(p fillPath, o fillOutcome, d time.Duration) {
	l.fill[p][o].observe(d)
}

// HistogramSnapshot is one histogram as the admin listener exports it.
type HistogramSnapshot struct {
	// Name is the metric's name without its gpucache_ prefix:
	// request_seconds or fill_wait_seconds.
	Name string
	// LabelNames and LabelValues are the series' labels: op and tier for
	// request_seconds, path and outcome for fill_wait_seconds.
	LabelNames, LabelValues []string
	// Counts are the observations per bucket, not cumulative, for the
	// bounds of LatencyBounds and a last +Inf bucket.
	Counts []uint64
	// Sum is the observations' total, in seconds.
	Sum float64
}

// Count is the number of observations.
func (h HistogramSnapshot) Count() uint64 {
	var n uint64
	for _, c := range h.Counts {
		n += c
	}
	return n
}

func (h *latHist) snapshot(name string, names, values []string) HistogramSnapshot {
	s := HistogramSnapshot{Name: name, LabelNames: names, LabelValues: values, Counts: make([]uint64, latBounds+1)}
	for i := range h.counts {
		s.Counts[i] = h.counts[i].Load()
	}
	s.Sum = time.Duration(h.sum.Load()).Seconds()
	return s
}

var (
	reqLabels  = []string{"op", "tier"}
	fillLabels = []string{"path", "outcome"}
)

// Latencies returns a snapshot of the latency histograms: every
// (op, tier) of request_seconds and every (path, outcome) of
// fill_wait_seconds, empty or not, in a fixed order. Each bucket is read
// atomically, the whole not at one instant.
func (s *Server) Latencies() []HistogramSnapshot {
	var out []HistogramSnapshot
	for op := range latOps {
		for _, t := range latTiersOf[op] {
			out = append(out, s.lat.req[op][t].snapshot("request_seconds", reqLabels, []string{latOpNames[op], latTierNames[t]}))
		}
	}
	for p := range fillPaths {
		for o := range fillOutcomes {
			if p == fillAcquire && o == fillTimeout {
				continue // a WAIT's timeout does not end the wait
			}
			out = append(out, s.lat.fill[p][o].snapshot("fill_wait_seconds", fillLabels, []string{fillPathNames[p], fillOutcomeNames[o]}))
		}
	}
	return out
}

// reqTiming is the reader's record of the request it is timing.
type reqTiming struct {
	start time.Time
	op    latOp // latNone: not timing
	tier  latTier
}

// startTiming begins timing a request of op (latNone: none).
func (c *conn) startTiming(op latOp) {
	c.timing.op = op
	if op == latNone {
		return
	}
	c.timing.start = time.Now()
	c.timing.tier = tierDRAM
	if op.isRead() {
		c.timing.tier = tierMiss
	}
}

// served notes that tier t served one of the timed request's blocks.
func (c *conn) served(t latTier) {
	if cur := c.timing.tier; cur == tierMiss || (t > cur && t < tierMiss) {
		c.timing.tier = t
	}
}

// endTiming records the timed request, if any, once.
func (c *conn) endTiming() {
	if op := c.timing.op; op != latNone {
		c.timing.op = latNone
		c.s.lat.observe(op, c.timing.tier, time.Since(c.timing.start))
	}
}
