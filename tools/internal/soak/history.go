package soak

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpucache/gpucache/api/wire"
	"github.com/gpucache/gpucache/client"
)

// Call kinds: one per client method the load calls.
const (
	callGet       = "get"
	callGetLeased = "get_leased"
	callLookup    = "lookup"
	callPut       = "put"
	callDelete    = "delete"
	callGetOrFill = "get_or_fill"
)

var callKinds = []string{callGet, callGetLeased, callLookup, callPut, callDelete, callGetOrFill}

// latBuckets is a log2 histogram of latencies in microseconds: bucket i
// counts latencies in [2^(i-1), 2^i) µs (bucket 0: under 1 µs).
const latBuckets = 40

// callStats are the counters of one call kind.
type callStats struct {
	calls    atomic.Int64
	overruns atomic.Int64
	worstNs  atomic.Int64 // longest latency
	overNs   atomic.Int64 // largest latency past the deadline (0 if none)
	lat      [latBuckets]atomic.Int64
}

// history is what the load saw: every call's latency against its deadline
// and every block's check. It is safe for concurrent use.
type history struct {
	oracle   Oracle
	deadline time.Duration
	slack    time.Duration

	calls map[string]*callStats // fixed at construction

	verified    atomic.Int64 // hits whose bytes equal the oracle's
	wrong       atomic.Int64 // hits whose bytes differ (length included)
	missReason  atomic.Int64 // misses with a reason
	unexplained atomic.Int64 // misses without a reason, or a hit with one
	computed    atomic.Int64 // GetOrFill blocks this process computed (led or local); checked but not served by a node
	leasedMiss  atomic.Int64 // blocks a lease covered that GetLeased missed (allowed: a lease is best effort across faults)
	lookupBad   atomic.Int64 // Lookup answers with more hits than keys
	putRefused  atomic.Int64 // PUT statuses KEY_MISMATCH or TOO_LARGE for a valid block
	fillErrors  atomic.Int64 // GetOrFill errors while its context was alive
	stored      atomic.Int64 // PUT blocks stored (or already there)
	notStored   atomic.Int64 // PUT blocks not stored (no space, busy, refused, unreachable): allowed

	mu       sync.Mutex
	reasons  map[string]int64 // guarded by mu: miss and error reasons by class
	examples []string         // guarded by mu: the first violations, for the report
}

const maxExamples = 20

func newHistory(o Oracle, deadline, slack time.Duration) *history {
	h := &history{oracle: o, deadline: deadline, slack: slack, calls: map[string]*callStats{}, reasons: map[string]int64{}}
	for _, k := range callKinds {
		h.calls[k] = &callStats{}
	}
	return h
}

// ctx returns the context of one call: its deadline is the soak's
// OpTimeout from now.
func (h *history) ctx(parent context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(parent, h.deadline)
}

// call records one call of kind that ran for el.
func (h *history) call(kind string, el time.Duration) {
	s := h.calls[kind]
	s.calls.Add(1)
	maxInto(&s.worstNs, int64(el))
	if over := el - h.deadline; over > 0 {
		maxInto(&s.overNs, int64(over))
		if over > h.slack {
			s.overruns.Add(1)
			h.violation(fmt.Sprintf("%s returned %v after its %v deadline (slack %v)", kind, over.Round(time.Microsecond), h.deadline, h.slack))
		}
	}
	us := uint64(el / time.Microsecond)
	s.lat[min(bits.Len64(us), latBuckets-1)].Add(1)
}

// block checks one block read from the cache by tenant.
func (h *history) block(kind, tenant string, k client.BlockKey, r client.GetResult) {
	switch {
	case r.Hit && r.Reason != nil:
		h.unexplained.Add(1)
		h.violation(fmt.Sprintf("%s: block %x is a hit with a reason (%v)", kind, k[:6], r.Reason))
	case r.Hit:
		if h.oracle.Check(k, r.Data) {
			h.verified.Add(1)
			return
		}
		h.wrong.Add(1)
		h.violation(fmt.Sprintf("%s: WRONG PAYLOAD for block %x: %d bytes, want %d", kind, k[:6], len(r.Data), h.oracle.Size(k)))
	case r.Reason == nil:
		h.unexplained.Add(1)
		h.violation(fmt.Sprintf("%s: block %x is a miss without a reason", kind, k[:6]))
	default:
		h.missReason.Add(1)
		h.reason(tenant + " miss:" + reasonClass(r.Reason))
	}
}

// filled checks one GetOrFill block and reports whether it is correct;
// the caller counts correct blocks as served or computed.
func (h *history) filled(k client.BlockKey, data []byte) bool {
	switch {
	case data == nil:
		h.unexplained.Add(1)
		h.violation(fmt.Sprintf("get_or_fill: block %x missing from a successful answer", k[:6]))
	case !h.oracle.Check(k, data):
		h.wrong.Add(1)
		h.violation(fmt.Sprintf("get_or_fill: WRONG PAYLOAD for block %x", k[:6]))
	default:
		return true
	}
	return false
}

// reason counts one miss or error by its class.
func (h *history) reason(class string) {
	h.mu.Lock()
	h.reasons[class]++
	h.mu.Unlock()
}

func (h *history) violation(s string) {
	h.mu.Lock()
	if len(h.examples) < maxExamples {
		h.examples = append(h.examples, time.Now().UTC().Format("15:04:05.000")+" "+s)
	}
	h.mu.Unlock()
}

// totalCalls is the number of client calls checked so far.
func (h *history) totalCalls() int64 {
	var n int64
	for _, s := range h.calls {
		n += s.calls.Load()
	}
	return n
}

// blocksChecked is the number of blocks checked so far: verified hits,
// wrong payloads, misses (with or without a reason) and computed blocks.
func (h *history) blocksChecked() int64 {
	return h.verified.Load() + h.wrong.Load() + h.missReason.Load() + h.unexplained.Load() + h.computed.Load()
}

// reasonClass names the class of a miss or error: not_cached, timeout,
// unavailable, server:<CODE>, protocol, closed, invalid or other.
func reasonClass(err error) string {
	var we *wire.Error
	switch {
	case errors.Is(err, client.ErrNotCached):
		return "not_cached"
	case errors.As(err, &we):
		return "server:" + we.Code.String()
	case errors.Is(err, client.ErrTimeout), errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, client.ErrUnavailable):
		return "unavailable"
	case errors.Is(err, client.ErrProtocol):
		return "protocol"
	case errors.Is(err, client.ErrClosed):
		return "closed"
	case errors.Is(err, client.ErrInvalid):
		return "invalid"
	case errors.Is(err, client.ErrServer):
		return "server"
	}
	return "other"
}

func maxInto(a *atomic.Int64, v int64) {
	for {
		old := a.Load()
		if v <= old || a.CompareAndSwap(old, v) {
			return
		}
	}
}

// CallSummary is the report of one call kind.
type CallSummary struct {
	Kind        string  `json:"kind"`
	Calls       int64   `json:"calls"`
	Overruns    int64   `json:"overruns"`
	WorstMs     float64 `json:"worst_ms"`
	WorstOverMs float64 `json:"worst_over_deadline_ms"`
	P50Ms       float64 `json:"p50_ms"`
	P99Ms       float64 `json:"p99_ms"`
	P999Ms      float64 `json:"p999_ms"`
}

// quantileMs returns an upper bound of the q-quantile of the histogram, in
// ms (the top of its log2 bucket).
func quantileMs(lat *[latBuckets]atomic.Int64, q float64) float64 {
	var total int64
	for i := range lat {
		total += lat[i].Load()
	}
	if total == 0 {
		return 0
	}
	want := int64(q*float64(total) + 0.5)
	var seen int64
	for i := range lat {
		seen += lat[i].Load()
		if seen >= want && seen > 0 {
			return float64(uint64(1)<<i) / 1000
		}
	}
	return float64(uint64(1)<<(latBuckets-1)) / 1000
}

func (h *history) summaries() []CallSummary {
	var out []CallSummary
	for _, k := range callKinds {
		s := h.calls[k]
		out = append(out, CallSummary{Kind: k, Calls: s.calls.Load(), Overruns: s.overruns.Load(),
			WorstMs: ms(time.Duration(s.worstNs.Load())), WorstOverMs: ms(time.Duration(s.overNs.Load())),
			P50Ms: quantileMs(&s.lat, 0.50), P99Ms: quantileMs(&s.lat, 0.99), P999Ms: quantileMs(&s.lat, 0.999)})
	}
	return out
}

func (h *history) reasonList() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for k, v := range h.reasons {
		out = append(out, fmt.Sprintf("%s=%d", k, v))
	}
	sort.Strings(out)
	return out
}

func (h *history) exampleList() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.examples...)
}

// line is a one-line progress summary.
func (h *history) line() string {
	var b strings.Builder
	fmt.Fprintf(&b, "calls=%d blocks=%d verified=%d wrong=%d unexplained=%d overruns=%d",
		h.totalCalls(), h.blocksChecked(), h.verified.Load(), h.wrong.Load(), h.unexplained.Load(), h.overruns())
	return b.String()
}

func (h *history) overruns() int64 {
	var n int64
	for _, s := range h.calls {
		n += s.overruns.Load()
	}
	return n
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
