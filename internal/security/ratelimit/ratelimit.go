package ratelimit

import (
	"fmt"
	"hash/maphash"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// Limit is a tenant's quota. A rate <= 0 means that dimension is unlimited.
// A zero burst with a positive rate defaults to max(1, ceil(rate)).
type Limit struct {
	OpsPerSec   float64
	OpsBurst    int
	BytesPerSec float64
	BytesBurst  int64
}

// Config configures a Limiter.
type Config struct {
	// Default applies to every tenant not listed in Tenants.
	Default Limit
	// Tenants holds per-tenant limits. These tenants are pinned: never evicted.
	Tenants map[string]Limit
	// MaxTenants bounds the number of buckets for tenants not in Tenants
	// (default 4096).
	MaxTenants int
	// Now is the clock (default time.Now).
	Now func() time.Time
}

const (
	defaultMaxTenants = 4096
	numShards         = 16
)

// Limiter is a set of per-tenant token buckets. It is safe for concurrent use.
type Limiter struct {
	now     func() time.Time
	def     Limit
	pinned  map[string]*bucket // immutable after New
	shards  []shard
	perCap  int
	seed    maphash.Seed
	clockNS atomic.Int64 // monotonic counter for LRU stamps
}

type shard struct {
	mu      sync.RWMutex
	buckets map[string]*bucket
}

type dim struct {
	rate   float64 // tokens per second; <= 0 = unlimited
	burst  float64
	tokens float64
}

type bucket struct {
	mu       sync.Mutex
	last     time.Time
	ops      dim
	bytes    dim
	lastUsed atomic.Int64 // LRU stamp; dynamic buckets only
}

func normalize(l Limit, who string) (Limit, error) {
	if math.IsNaN(l.OpsPerSec) || math.IsNaN(l.BytesPerSec) || math.IsInf(l.OpsPerSec, 0) || math.IsInf(l.BytesPerSec, 0) {
		return l, fmt.Errorf("ratelimit: %s: rate must be finite", who)
	}
	if l.OpsBurst < 0 || l.BytesBurst < 0 {
		return l, fmt.Errorf("ratelimit: %s: negative burst", who)
	}
	if l.OpsPerSec > 0 && l.OpsBurst == 0 {
		l.OpsBurst = int(max(1, math.Ceil(l.OpsPerSec)))
	}
	if l.BytesPerSec > 0 && l.BytesBurst == 0 {
		l.BytesBurst = int64(max(1, math.Ceil(l.BytesPerSec)))
	}
	return l, nil
}

// New builds a Limiter. It fails on negative bursts or non-finite rates.
func New(cfg Config) (*Limiter, error) {
	def, err := normalize(cfg.Default, "default limit")
	if err != nil {
		return nil, err
	}
	l := &Limiter{
		now:    cfg.Now,
		def:    def,
		pinned: make(map[string]*bucket, len(cfg.Tenants)),
		seed:   maphash.MakeSeed(),
	}
	if l.now == nil {
		l.now = time.Now
	}
	maxT := cfg.MaxTenants
	if maxT <= 0 {
		maxT = defaultMaxTenants
	}
	// Floor division keeps the total within maxT; fewer shards than
	// numShards when maxT is tiny.
	l.shards = make([]shard, min(numShards, maxT))
	l.perCap = maxT / len(l.shards)
	t0 := l.now()
	for name, lim := range cfg.Tenants {
		n, err := normalize(lim, fmt.Sprintf("tenant %q", name))
		if err != nil {
			return nil, err
		}
		l.pinned[name] = newBucket(n, t0)
	}
	for i := range l.shards {
		l.shards[i].buckets = make(map[string]*bucket)
	}
	return l, nil
}

func newBucket(l Limit, now time.Time) *bucket {
	b := &bucket{last: now}
	b.ops = dim{rate: l.OpsPerSec, burst: float64(l.OpsBurst), tokens: float64(l.OpsBurst)}
	b.bytes = dim{rate: l.BytesPerSec, burst: float64(l.BytesBurst), tokens: float64(l.BytesBurst)}
	return b
}

// Allow charges ops operations and bytes payload bytes to tenant. It returns
// ok=true if admitted; otherwise nothing is charged and retryAfter is the
// exact wait after which the same request would be admitted (absent other
// traffic from that tenant). Negative costs count as zero.
func (l *Limiter) Allow(tenant string, ops int, bytes int64) (ok bool, retryAfter time.Duration) {
	b := l.lockedBucket(tenant)
	defer b.mu.Unlock()
	oc, bc := float64(max(ops, 0)), float64(max(bytes, 0))
	w1, w2 := b.ops.wait(oc), b.bytes.wait(bc)
	if w1 > 0 || w2 > 0 {
		return false, max(w1, w2)
	}
	b.ops.take(oc)
	b.bytes.take(bc)
	return true, 0
}

// Charge takes ops and bytes from tenant's buckets unconditionally, going
// into debt if need be: for costs known only after a request is admitted,
// such as the bytes a GET served. A bucket in debt refuses every request
// that costs anything in that dimension until it has refilled.
func (l *Limiter) Charge(tenant string, ops int, bytes int64) {
	if ops <= 0 && bytes <= 0 {
		return
	}
	b := l.lockedBucket(tenant)
	defer b.mu.Unlock()
	b.ops.take(float64(max(ops, 0)))
	b.bytes.take(float64(max(bytes, 0)))
}

// lockedBucket returns tenant's bucket, locked and refilled up to now.
func (l *Limiter) lockedBucket(tenant string) *bucket {
	b := l.bucketFor(tenant)
	now := l.now()
	b.mu.Lock()
	if el := now.Sub(b.last); el > 0 {
		b.ops.refill(el)
		b.bytes.refill(el)
		b.last = now
	}
	return b
}

// Limit returns the effective (normalized) limit for tenant: the daemon
// exports it per configured tenant on /metrics (gpucache_tenant_ratelimit_*).
func (l *Limiter) Limit(tenant string) Limit {
	if b, ok := l.pinned[tenant]; ok {
		return Limit{OpsPerSec: b.ops.rate, OpsBurst: int(b.ops.burst), BytesPerSec: b.bytes.rate, BytesBurst: int64(b.bytes.burst)}
	}
	return l.def
}

// Len returns the number of dynamic (non-configured) buckets held, never
// more than Config.MaxTenants: the daemon's gauge
// gpucache_ratelimit_dynamic_buckets.
func (l *Limiter) Len() int {
	n := 0
	for i := range l.shards {
		s := &l.shards[i]
		s.mu.RLock()
		n += len(s.buckets)
		s.mu.RUnlock()
	}
	return n
}

func (d *dim) refill(el time.Duration) {
	if d.rate <= 0 {
		return
	}
	d.tokens = min(d.burst, d.tokens+el.Seconds()*d.rate)
}

// need is the balance required to admit cost: cost, capped at burst so
// oversized requests pass on a full bucket (and go into debt).
func (d *dim) need(cost float64) float64 { return min(cost, d.burst) }

func (d *dim) take(cost float64) {
	if d.rate > 0 {
		d.tokens -= cost
	}
}

// wait returns the minimal duration after which cost fits, or 0 if it fits now.
func (d *dim) wait(cost float64) time.Duration {
	if d.rate <= 0 || cost == 0 {
		return 0
	}
	need := d.need(cost)
	if d.tokens >= need {
		return 0
	}
	fits := func(w time.Duration) bool { return d.tokens+w.Seconds()*d.rate >= need }
	secs := (need - d.tokens) / d.rate
	if secs >= float64(math.MaxInt64/2)/1e9 {
		return time.Duration(math.MaxInt64 / 2)
	}
	w := time.Duration(math.Ceil(secs * 1e9))
	if w < 1 {
		w = 1
	}
	for !fits(w) {
		w++
	}
	for w > 1 && fits(w-1) {
		w--
	}
	return w
}

func (l *Limiter) bucketFor(tenant string) *bucket {
	if b, ok := l.pinned[tenant]; ok {
		return b
	}
	s := &l.shards[maphash.String(l.seed, tenant)%uint64(len(l.shards))]
	stamp := l.clockNS.Add(1)
	s.mu.RLock()
	b, ok := s.buckets[tenant]
	s.mu.RUnlock()
	if ok {
		b.lastUsed.Store(stamp)
		return b
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if b, ok := s.buckets[tenant]; ok {
		b.lastUsed.Store(stamp)
		return b
	}
	if len(s.buckets) >= l.perCap {
		var victim string
		oldest := int64(math.MaxInt64)
		for k, v := range s.buckets {
			if u := v.lastUsed.Load(); u < oldest {
				oldest, victim = u, k
			}
		}
		delete(s.buckets, victim)
	}
	b = newBucket(l.def, l.now())
	b.lastUsed.Store(stamp)
	s.buckets[tenant] = b
	return b
}
