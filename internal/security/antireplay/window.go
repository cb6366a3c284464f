package antireplay

import (
	"container/heap"
	"errors"
	"fmt"
	"math/bits"
	"strings"
	"sync"
	"time"
)

// Sentinel errors. All carry the package prefix and are tested with errors.Is.
var (
	// ErrStale: the timestamp is older than now-Window.
	ErrStale = errors.New("gpucache/antireplay: timestamp too old")
	// ErrFuture: the timestamp is newer than now+MaxFuture.
	ErrFuture = errors.New("gpucache/antireplay: timestamp too far in the future")
	// ErrReplay: the tenant already used this nonce inside the window.
	ErrReplay = errors.New("gpucache/antireplay: nonce already seen")
	// ErrWindowFull: the tenant's nonce budget is full and the timestamp is
	// not newer than every nonce it remembers (or is at or below its floor),
	// so a replay could not be ruled out; or every tenant slot holds live
	// nonces and this tenant has none. Either way only this tenant is
	// refused.
	ErrWindowFull = errors.New("gpucache/antireplay: window full, timestamp too old for bounded memory")
	// ErrByteOrder is wrapped, with ErrStale or ErrFuture, when the refused
	// timestamp read the other way round would have been inside the window:
	// the stamp was almost surely written big-endian, as Go clients did
	// before ADR 0012.
	ErrByteOrder = errors.New("gpucache/antireplay: stamp timestamp reads as big-endian; stamps are little-endian (ADR 0012): upgrade the client")
	// ErrConfig: a Config field is out of range.
	ErrConfig = errors.New("gpucache/antireplay: invalid config")
)

// Defaults.
const (
	DefaultWindow       = 5 * time.Minute
	DefaultMaxFuture    = 5 * time.Second
	DefaultMaxNonces    = 1 << 20
	DefaultTenantNonces = 1 << 16
)

// Config configures a Window.
type Config struct {
	// Window is how old a request's timestamp may be: the accepted delay
	// plus the clock skew of a client that runs behind. Default 5m.
	Window time.Duration
	// MaxFuture is how far ahead of now a timestamp may be: the clock skew
	// of a client that runs ahead. Default 5s. At most Window.
	MaxFuture time.Duration
	// MaxNonces bounds the nonces remembered across all tenants.
	// Default 1<<20 (roughly 100 bytes each, so about 100 MiB at worst).
	MaxNonces int
	// TenantNonces bounds the nonces remembered for one tenant. Default
	// 1<<16, or MaxNonces if that is smaller. At most MaxNonces. The window
	// holds MaxNonces/TenantNonces tenants' nonces at a time (MaxTenants).
	TenantNonces int
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

// Default returns the default configuration.
func Default() Config {
	return Config{Window: DefaultWindow, MaxFuture: DefaultMaxFuture, MaxNonces: DefaultMaxNonces,
		TenantNonces: DefaultTenantNonces, Now: time.Now}
}

// Validate reports an out-of-range field. Zero fields are valid: New fills
// in the defaults.
func (c Config) Validate() error {
	switch {
	case c.Window < 0:
		return fmt.Errorf("%w: Window %v < 0", ErrConfig, c.Window)
	case c.MaxFuture < 0:
		return fmt.Errorf("%w: MaxFuture %v < 0", ErrConfig, c.MaxFuture)
	case c.MaxNonces < 0:
		return fmt.Errorf("%w: MaxNonces %d < 0", ErrConfig, c.MaxNonces)
	case c.TenantNonces < 0:
		return fmt.Errorf("%w: TenantNonces %d < 0", ErrConfig, c.TenantNonces)
	}
	c = c.withDefaults()
	if c.MaxFuture > c.Window {
		return fmt.Errorf("%w: MaxFuture %v > Window %v", ErrConfig, c.MaxFuture, c.Window)
	}
	if c.TenantNonces > c.MaxNonces {
		return fmt.Errorf("%w: TenantNonces %d > MaxNonces %d", ErrConfig, c.TenantNonces, c.MaxNonces)
	}
	return nil
}

func (c Config) withDefaults() Config {
	d := Default()
	if c.Window == 0 {
		c.Window = d.Window
	}
	if c.MaxFuture == 0 {
		c.MaxFuture = min(d.MaxFuture, c.Window)
	}
	if c.MaxNonces == 0 {
		c.MaxNonces = d.MaxNonces
	}
	if c.TenantNonces == 0 {
		c.TenantNonces = min(d.TenantNonces, c.MaxNonces)
	}
	if c.Now == nil {
		c.Now = d.Now
	}
	return c
}

// Window rejects mutating requests that are stale, too far in the future, or
// repeat a nonce (see the package doc for the full argument).
//
// Every accepted (tenant, nonce) is remembered, with its timestamp, until the
// timestamp is older than now-Window; from then on the timestamp alone makes
// a replay fail with ErrStale, so forgetting is safe.
//
// Memory is bounded per tenant by TenantNonces, and in total by giving at
// most MaxTenants = MaxNonces/TenantNonces tenants state at a time. When a
// tenant's budget is full, its nonce with the oldest timestamp is evicted
// and that timestamp becomes the tenant's floor: from then on every request
// of that tenant with a timestamp at or below the floor gets ErrWindowFull.
// Invariant, per tenant: every accepted nonce whose timestamp is above the
// tenant's floor and inside the window is still remembered. So a flood
// shrinks the flooding tenant's effective window, never another's, and a
// replay is never accepted.
//
// A Window is safe for concurrent use.
type Window struct {
	past       int64            // nanoseconds; immutable
	future     int64            // nanoseconds; immutable
	perTenant  int              // immutable
	maxTenants int              // immutable
	now        func() time.Time // immutable

	mu struct {
		sync.Mutex
		tenants map[string]*tenantSet // guarded by mu; see sweepLocked
		total   int                   // guarded by mu; sum of the tenants' nonces
		// sweepAfter: no tenant can be dropped before the window start
		// passes it (a lower bound on every tenant's newest), so a full
		// table is not swept again in vain. Guarded by mu.
		sweepAfter int64
	}
}

// tenantSet is one tenant's nonce memory. All fields are guarded by
// Window.mu.
type tenantSet struct {
	name   string                // private copy of the tenant name
	seen   map[[16]byte]struct{} // one entry per element of byAge
	byAge  ageHeap               // remembered nonces, oldest timestamp first
	floor  int64                 // unix nanos; reject ts <= floor while hasFlr
	hasFlr bool
	newest int64 // unix nanos; the newest timestamp ever accepted
}

type entry struct {
	ts    int64 // unix nanos
	nonce [16]byte
}

type ageHeap []entry

func (h ageHeap) Len() int           { return len(h) }
func (h ageHeap) Less(i, j int) bool { return h[i].ts < h[j].ts }
func (h ageHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *ageHeap) Push(x any)        { *h = append(*h, x.(entry)) }
func (h *ageHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

// New returns a Window. Zero fields of cfg take their defaults.
func New(cfg Config) (*Window, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	w := &Window{past: int64(cfg.Window), future: int64(cfg.MaxFuture), perTenant: cfg.TenantNonces,
		maxTenants: cfg.MaxNonces / cfg.TenantNonces, now: cfg.Now}
	w.mu.tenants = make(map[string]*tenantSet)
	w.mu.sweepAfter = -1 << 63
	return w, nil
}

// CheckStamp accepts or rejects one request stamped s (time ts, nonce)
// from tenant. It returns nil, and remembers the nonce, only if ts is within
// [now-Window, now+MaxFuture], the tenant has not used nonce inside the
// window, and the tenant's bounded memory can still vouch for ts (see
// Window). Errors wrap ErrStale, ErrFuture, ErrWindowFull or ErrReplay.
func (w *Window) CheckStamp(tenant string, s Stamp) error {
	return w.check(tenant, s.UnixNano, s.Nonce)
}

func (w *Window) check(tenant string, ts int64, nonce [16]byte) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	// Read the clock under the lock so that "now" never goes backwards
	// between two Checks (given a monotonic clock).
	now := w.now().UnixNano()
	lo, hi := satSub(now, w.past), satAdd(now, w.future)
	if ts < lo {
		return byteOrderHint(fmt.Errorf("%w: %v before window start", ErrStale, time.Duration(lo-ts)), ts, lo, hi)
	}
	if ts > hi {
		return byteOrderHint(fmt.Errorf("%w: %v past window end", ErrFuture, time.Duration(ts-hi)), ts, lo, hi)
	}
	t := w.mu.tenants[tenant]
	if t == nil {
		if len(w.mu.tenants) >= w.maxTenants && lo > w.mu.sweepAfter {
			w.sweepLocked(lo)
		}
		if len(w.mu.tenants) >= w.maxTenants {
			return fmt.Errorf("%w: all %d tenant slots hold live nonces", ErrWindowFull, w.maxTenants)
		}
		t = &tenantSet{name: strings.Clone(tenant), seen: make(map[[16]byte]struct{})}
		w.mu.tenants[t.name] = t
		w.mu.sweepAfter = min(w.mu.sweepAfter, ts)
	} else {
		w.expireLocked(t, lo)
	}
	if t.hasFlr && ts <= t.floor {
		return fmt.Errorf("%w: tenant floor %v", ErrWindowFull, time.Unix(0, t.floor).UTC())
	}
	if _, dup := t.seen[nonce]; dup {
		return ErrReplay
	}
	if len(t.byAge) >= w.perTenant {
		// The tenant's budget is full: evict its oldest, unless the new
		// request is not newer than it; then keeping what we have is the
		// cheaper safe choice.
		if ts <= t.byAge[0].ts {
			return fmt.Errorf("%w: tenant budget of %d full and older than every remembered nonce", ErrWindowFull, w.perTenant)
		}
		old := heap.Pop(&t.byAge).(entry)
		delete(t.seen, old.nonce)
		w.mu.total--
		t.floor, t.hasFlr = old.ts, true
	}
	t.seen[nonce] = struct{}{}
	heap.Push(&t.byAge, entry{ts: ts, nonce: nonce})
	t.newest = max(t.newest, ts)
	w.mu.total++
	return nil
}

// byteOrderHint wraps ErrByteOrder into err when ts, read with its bytes
// reversed, falls inside [lo, hi]: a big-endian stamp, not a bad clock.
func byteOrderHint(err error, ts, lo, hi int64) error {
	if r := int64(bits.ReverseBytes64(uint64(ts))); r >= lo && r <= hi {
		return fmt.Errorf("%w (%w)", err, ErrByteOrder)
	}
	return err
}

// expireLocked forgets t's nonces whose timestamp is before lo: they are
// stale. It clears t's floor once lo has passed it.
func (w *Window) expireLocked(t *tenantSet, lo int64) {
	for len(t.byAge) > 0 && t.byAge[0].ts < lo {
		delete(t.seen, heap.Pop(&t.byAge).(entry).nonce)
		w.mu.total--
	}
	if t.hasFlr && t.floor < lo {
		t.hasFlr = false
	}
}

// sweepLocked expires every tenant and drops those that vouch for nothing
// any more: no remembered nonce and no live floor. Only such a tenant may be
// dropped, since its floor is part of what keeps its replays out. That is
// the case exactly when lo has passed the tenant's newest timestamp (its
// floor is below its remembered timestamps), which sets sweepAfter.
func (w *Window) sweepLocked(lo int64) {
	next := int64(1<<63 - 1)
	for name, t := range w.mu.tenants {
		w.expireLocked(t, lo)
		if len(t.byAge) == 0 && !t.hasFlr {
			delete(w.mu.tenants, name)
			continue
		}
		next = min(next, t.newest)
	}
	w.mu.sweepAfter = next
}

// Len returns how many nonces are remembered, all tenants together (never
// more than TenantNonces × MaxTenants ≤ MaxNonces): the daemon's gauge
// gpucache_antireplay_entries.
func (w *Window) Len() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.mu.total
}

// TenantLen returns how many nonces are remembered for tenant (never more
// than TenantNonces): the daemon's per-tenant gauge
// gpucache_antireplay_tenant_entries, for its configured tenants.
func (w *Window) TenantLen(tenant string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	if t := w.mu.tenants[tenant]; t != nil {
		return len(t.byAge)
	}
	return 0
}

// MaxTenants returns how many tenants can hold nonces at once:
// MaxNonces/TenantNonces. A server with authentication needs at least as
// many as it has tenants, or a tenant may find every slot taken.
func (w *Window) MaxTenants() int { return w.maxTenants }

func satAdd(a, b int64) int64 {
	if c := a + b; c >= a {
		return c
	}
	return 1<<63 - 1
}

func satSub(a, b int64) int64 {
	if c := a - b; c <= a {
		return c
	}
	return -1 << 63
}
