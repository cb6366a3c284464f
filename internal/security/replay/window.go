package replay

import (
	"container/heap"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
)

// Sentinel errors. All carry the package prefix and are tested with errors.Is.
var (
	// ErrStale: the timestamp is older than now-Window.
	ErrStale = errors.New("gpucache/replay: timestamp too old")
	// ErrFuture: the timestamp is newer than now+Window.
	ErrFuture = errors.New("gpucache/replay: timestamp too far in the future")
	// ErrReplay: the tenant already used this nonce inside the window.
	ErrReplay = errors.New("gpucache/replay: nonce already seen")
	// ErrWindowFull: the nonce memory is full and the timestamp is not newer
	// than every remembered nonce's, so a replay could not be ruled out.
	ErrWindowFull = errors.New("gpucache/replay: window full, timestamp too old for bounded memory")
	// ErrConfig: a Config field is out of range.
	ErrConfig = errors.New("gpucache/replay: invalid config")
)

// Config configures a Window.
type Config struct {
	// Window is the accepted clock distance, either way, between a request's
	// timestamp and now. Default 5m.
	Window time.Duration
	// MaxNonces bounds the nonces remembered across all tenants.
	// Default 1<<20 (roughly 100 bytes each, so about 100 MiB at worst).
	MaxNonces int
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

// Default returns the default configuration.
func Default() Config {
	return Config{Window: 5 * time.Minute, MaxNonces: 1 << 20, Now: time.Now}
}

// Validate reports an out-of-range field. Zero fields are valid: New fills
// in the defaults.
func (c Config) Validate() error {
	if c.Window < 0 {
		return fmt.Errorf("%w: Window %v < 0", ErrConfig, c.Window)
	}
	if c.MaxNonces < 0 {
		return fmt.Errorf("%w: MaxNonces %d < 0", ErrConfig, c.MaxNonces)
	}
	return nil
}

// Window rejects mutating requests that are stale, too far in the future, or
// repeat a nonce (see the package doc for the full argument).
//
// Every accepted (tenant, nonce) is remembered, with its timestamp, until the
// timestamp is older than now-Window; from then on the timestamp alone makes
// a replay fail with ErrStale, so forgetting is safe.
//
// Memory is bounded by MaxNonces. When it is full, the nonce with the oldest
// timestamp is evicted and its timestamp becomes the floor: from then on
// every request with a timestamp at or below the floor gets ErrWindowFull.
// Invariant: every accepted nonce whose timestamp is above the floor and
// inside the window is still remembered. So the effective window shrinks
// under a flood, but a replay is never accepted.
//
// A Window is safe for concurrent use.
type Window struct {
	window int64            // nanoseconds; immutable
	max    int              // immutable
	now    func() time.Time // immutable

	mu struct {
		sync.Mutex
		tenants map[string]*tenantSet // guarded by mu; entries removed when empty
		byAge   ageHeap               // guarded by mu; one entry per remembered nonce
		floor   int64                 // guarded by mu; unix nanos; reject ts <= floor
		hasFlr  bool                  // guarded by mu; floor is set
	}
}

type tenantSet struct {
	name string                // private copy of the tenant name
	seen map[[16]byte]struct{} // guarded by Window.mu
}

type entry struct {
	ts    int64 // unix nanos
	t     *tenantSet
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
	old[len(old)-1] = entry{}
	*h = old[:len(old)-1]
	return e
}

// New returns a Window. Zero fields of cfg take their defaults.
func New(cfg Config) (*Window, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	d := Default()
	if cfg.Window == 0 {
		cfg.Window = d.Window
	}
	if cfg.MaxNonces == 0 {
		cfg.MaxNonces = d.MaxNonces
	}
	if cfg.Now == nil {
		cfg.Now = d.Now
	}
	w := &Window{window: int64(cfg.Window), max: cfg.MaxNonces, now: cfg.Now}
	w.mu.tenants = make(map[string]*tenantSet)
	return w, nil
}

// Check accepts or rejects one request stamped (ts, nonce) from tenant.
// It returns nil, and remembers the nonce, only if ts is within
// [now-Window, now+Window], the tenant has not used nonce inside the
// window, and bounded memory can still vouch for ts (see Window).
// Errors wrap ErrStale, ErrFuture, ErrWindowFull or ErrReplay.
func (w *Window) Check(tenant string, ts time.Time, nonce [16]byte) error {
	return w.check(tenant, ts.UnixNano(), nonce)
}

// CheckStamp is Check with a parsed Stamp.
func (w *Window) CheckStamp(tenant string, s Stamp) error {
	return w.check(tenant, s.UnixNano, s.Nonce)
}

func (w *Window) check(tenant string, ts int64, nonce [16]byte) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	// Read the clock under the lock so that "now" never goes backwards
	// between two Checks (given a monotonic clock).
	now := w.now().UnixNano()
	lo, hi := satSub(now, w.window), satAdd(now, w.window)
	if ts < lo {
		return fmt.Errorf("%w: %v before window start", ErrStale, time.Duration(lo-ts))
	}
	if ts > hi {
		return fmt.Errorf("%w: %v past window end", ErrFuture, time.Duration(ts-hi))
	}
	w.expireLocked(lo)
	if w.mu.hasFlr && ts <= w.mu.floor {
		return fmt.Errorf("%w: floor %v", ErrWindowFull, time.Unix(0, w.mu.floor).UTC())
	}
	t := w.mu.tenants[tenant]
	if t != nil {
		if _, dup := t.seen[nonce]; dup {
			return ErrReplay
		}
	}
	if len(w.mu.byAge) >= w.max {
		// Full: evict the oldest, unless the new request is not newer than
		// it; then keeping what we have is the cheaper safe choice.
		if ts <= w.mu.byAge[0].ts {
			return fmt.Errorf("%w: older than every remembered nonce", ErrWindowFull)
		}
		old := heap.Pop(&w.mu.byAge).(entry)
		w.forgetLocked(old)
		w.mu.floor, w.mu.hasFlr = old.ts, true
		t = w.mu.tenants[tenant] // forgetLocked may have dropped it
	}
	if t == nil {
		t = &tenantSet{name: strings.Clone(tenant), seen: make(map[[16]byte]struct{})}
		w.mu.tenants[t.name] = t
	}
	t.seen[nonce] = struct{}{}
	heap.Push(&w.mu.byAge, entry{ts: ts, t: t, nonce: nonce})
	return nil
}

// expireLocked forgets nonces whose timestamp is before lo: they are stale.
func (w *Window) expireLocked(lo int64) {
	for len(w.mu.byAge) > 0 && w.mu.byAge[0].ts < lo {
		w.forgetLocked(heap.Pop(&w.mu.byAge).(entry))
	}
	if w.mu.hasFlr && w.mu.floor < lo {
		w.mu.hasFlr = false // the window start has passed the floor
	}
}

func (w *Window) forgetLocked(e entry) {
	delete(e.t.seen, e.nonce)
	if len(e.t.seen) == 0 {
		delete(w.mu.tenants, e.t.name)
	}
}

// Len returns how many nonces are remembered (never more than MaxNonces).
func (w *Window) Len() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.mu.byAge)
}

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
