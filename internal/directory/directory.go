package directory

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpucache/gpucache/api/identity"
)

// Defaults for Config fields left zero.
const (
	DefaultEpoch        Epoch = 1
	DefaultFillDeadline       = 10 * time.Second
	DefaultMaxTurns           = 3
	DefaultJoinCredits        = 4096
	DefaultMaxFills           = 65536
	DefaultStripes            = 64
	maxStripes                = 4096
)

// flightKey is the identity of a flight. The tenant is part of it so that
// another tenant never joins a fill, even for an equal key.
type flightKey struct {
	tenant string
	ns     identity.NamespaceDigest
	key    identity.BlockKey
}

// stripe is one lock of the shard and the fills whose keys hash to it.
type stripe struct {
	mu     sync.Mutex
	fills  map[flightKey]*fill // guarded by mu; live fills only
	timers timerHeap           // guarded by mu; one entry per live fill
}

// Directory coordinates the fills of one shard. It is safe for concurrent
// use. See the package comment for the state machine and the locks.
type Directory struct {
	cfg     Config   // immutable after New
	stripes []stripe // the slice is immutable; see stripe for its fields
	shift   uint     // 64 - log2(len(stripes)); hash >> shift picks a stripe

	// admin serializes AdvanceEpoch and Close, the two sweeps over every
	// stripe. Taken before any stripe lock.
	admin  sync.Mutex
	epoch  atomic.Uint64 // current epoch; written under admin
	closed atomic.Bool   // written under admin

	nextID atomic.Uint64 // last FillID handed out
	ids    sync.Map      // FillID → *fill, live fills only; written under the fill's stripe lock
	live   atomic.Int64  // live fills, reserved before insertion (MaxFills)

	credits     credits // join credits in use, per tenant
	tenantFills credits // live fills, per tenant (TenantFills)
	stats       counters
}

// New returns a Directory for cfg.Shard, with defaults filled in for zero
// fields. A negative setting is ErrInvalidConfig.
func New(cfg Config) (*Directory, error) {
	if cfg.FillDeadline < 0 || cfg.MaxTurns < 0 || cfg.JoinCredits < 0 || cfg.MaxFills < 0 || cfg.TenantFills < 0 ||
		cfg.Stripes < 0 || cfg.Stripes > maxStripes || cfg.MaxTurns > 1<<31 {
		return nil, fmt.Errorf("%w: %+v", ErrInvalidConfig, cfg)
	}
	cfg = cfg.withDefaults()
	log2 := bits.Len(uint(cfg.Stripes - 1)) // rounds up to a power of two
	cfg.Stripes = 1 << log2
	d := &Directory{cfg: cfg, stripes: make([]stripe, cfg.Stripes), shift: uint(64 - log2)}
	for i := range d.stripes {
		d.stripes[i].fills = make(map[flightKey]*fill)
	}
	d.epoch.Store(uint64(cfg.Epoch))
	d.credits.init(cfg.JoinCredits)
	d.tenantFills.init(cfg.TenantFills)
	return d, nil
}

// withDefaults fills the zero fields of a checked config.
func (cfg Config) withDefaults() Config {
	if cfg.Epoch == 0 {
		cfg.Epoch = DefaultEpoch
	}
	if cfg.FillDeadline == 0 {
		cfg.FillDeadline = DefaultFillDeadline
	}
	if cfg.MaxTurns == 0 {
		cfg.MaxTurns = DefaultMaxTurns
	}
	if cfg.JoinCredits == 0 {
		cfg.JoinCredits = DefaultJoinCredits
	}
	if cfg.MaxFills == 0 {
		cfg.MaxFills = DefaultMaxFills
	}
	if cfg.TenantFills == 0 {
		cfg.TenantFills = max(cfg.MaxFills/2, 1)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Stripes == 0 {
		cfg.Stripes = DefaultStripes
	}
	return cfg
}

// Shard returns the shard this directory owns.
func (d *Directory) Shard() ShardID { return d.cfg.Shard }

// Epoch returns the current epoch.
func (d *Directory) Epoch() Epoch { return Epoch(d.epoch.Load()) }

func (d *Directory) stripeFor(fk *flightKey) *stripe {
	le := binary.LittleEndian
	h := le.Uint64(fk.key[0:]) ^ bits.RotateLeft64(le.Uint64(fk.key[8:]), 13) ^
		bits.RotateLeft64(le.Uint64(fk.key[16:]), 29) ^ bits.RotateLeft64(le.Uint64(fk.key[24:]), 43) ^
		le.Uint64(fk.ns[0:])
	h ^= h >> 31
	h *= 0x9e3779b97f4a7c15
	if d.shift == 64 {
		return &d.stripes[0]
	}
	return &d.stripes[h>>d.shift]
}

// Acquire answers a hot-tier miss for req. Under the key's stripe lock it
// first calls present (if not nil): true means the block arrived since the
// caller looked, and the answer is Hit. present runs under the lock and must
// not call into the Directory. Otherwise, with no live fill of the flight,
// the caller leads it (Lead, with a token of turn 1 under the current
// epoch); with a live fill of the same tenant it joins it (Joined, charging
// one of the tenant's credits). Out of credits, over MaxFills, over the
// tenant's TenantFills, or closed: Denied, and no fill changes.
func (d *Directory) Acquire(req Request, present func() bool) Result {
	if d.closed.Load() {
		d.stats.denied.Add(1)
		return Result{Outcome: Denied}
	}
	fk := flightKey{tenant: req.Tenant, ns: req.Namespace, key: req.Key}
	s := d.stripeFor(&fk)
	s.mu.Lock()
	defer s.mu.Unlock()
	if d.closed.Load() { // Close swept this stripe already
		d.stats.denied.Add(1)
		return Result{Outcome: Denied}
	}
	if present != nil && present() {
		d.stats.hits.Add(1)
		return Result{Outcome: Hit}
	}
	cur := Epoch(d.epoch.Load())
	f := s.fills[fk]
	if f != nil && f.epoch < cur {
		// AdvanceEpoch has not swept this stripe yet: fence now rather
		// than join a fill that is already stale.
		d.fence(f)
		f = nil
	}
	if f == nil {
		if d.live.Add(1) > int64(d.cfg.MaxFills) {
			d.live.Add(-1)
			d.stats.denied.Add(1)
			d.stats.deniedFills.Add(1)
			return Result{Outcome: Denied}
		}
		if !d.tenantFills.take(req.Tenant) {
			d.live.Add(-1)
			d.stats.denied.Add(1)
			d.stats.deniedTenantFills.Add(1)
			return Result{Outcome: Denied}
		}
		f = &fill{
			id:       FillID(d.nextID.Add(1)),
			key:      fk,
			s:        s,
			epoch:    cur,
			turn:     1,
			owner:    req.Owner,
			deadline: d.cfg.Now().Add(d.cfg.FillDeadline),
			hidx:     -1,
		}
		s.fills[fk] = f
		s.timers.push(f)
		d.ids.Store(f.id, f)
		d.stats.leads.Add(1)
		return Result{Outcome: Lead, Token: d.token(f)}
	}
	if !d.credits.take(req.Tenant) {
		d.stats.denied.Add(1)
		d.stats.deniedCredits.Add(1)
		return Result{Outcome: Denied}
	}
	w := &Waiter{d: d, f: f, owner: req.Owner, ch: make(chan Notice, 1)}
	f.enqueue(w)
	d.stats.waiters.Add(1)
	d.stats.joins.Add(1)
	return Result{Outcome: Joined, Waiter: w}
}

// Finish records that the leader published the block: every waiter gets
// Finished, their credits are released and the fill is removed. A token of
// an older epoch gets ErrStaleEpoch (and its fill, if still live, is fenced:
// the waiters get Fenced); a token that is not the live leader's gets
// ErrNotLeader.
func (d *Directory) Finish(t Token) error {
	return d.withLeader(t, d.finish)
}

// finish ends a fill whose block is stored: every waiter gets Finished and
// the fill is removed. Requires the fill's stripe lock.
func (d *Directory) finish(f *fill) {
	for w := f.head; w != nil; w = f.head {
		d.endWaiter(w, Notice{Kind: Finished})
	}
	d.remove(f)
	d.stats.finished.Add(1)
}

// Publish records that the block of a flight was stored by other means
// than its leader's Finish: a plain PUT of the same block by the same
// tenant (an engine whose scheduler leads the fill while its worker
// process writes the bytes, or any writer that got there first). The
// block is in the hot tier, so a live fill of the flight is done: every
// waiter gets Finished and reads it, and the fill is removed; the
// leader's later Finish or Fail gets ErrNotLeader. A fill of an older
// epoch is fenced instead. It reports whether a live fill ended.
func (d *Directory) Publish(tenant string, ns identity.NamespaceDigest, key identity.BlockKey) bool {
	if d.closed.Load() {
		return false
	}
	fk := flightKey{tenant: tenant, ns: ns, key: key}
	s := d.stripeFor(&fk)
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.fills[fk]
	if f == nil || d.closed.Load() {
		return false
	}
	if f.epoch < Epoch(d.epoch.Load()) {
		d.fence(f)
		return false
	}
	d.finish(f)
	d.stats.published.Add(1)
	return true
}

// Fail records that the leader gives up its turn. The next waiter in FIFO
// order gets Promoted with a token for turn Turn+1; the others keep waiting.
// With no waiter the fill is removed; when the fill has had MaxTurns
// leaders, every waiter gets Failed and the fill is removed. Errors as for
// Finish.
func (d *Directory) Fail(t Token) error {
	return d.withLeader(t, func(f *fill) {
		d.failover(f, d.cfg.Now())
	})
}

// Check returns nil iff t is the token of the live leader of its fill at the
// current epoch. It changes nothing.
func (d *Directory) Check(t Token) error {
	return d.checkToken(t, false, nil)
}

// withLeader runs fn under the fill's stripe lock if t is the live leader's
// token; a fill found stale is fenced.
func (d *Directory) withLeader(t Token, fn func(*fill)) error {
	return d.checkToken(t, true, fn)
}

func (d *Directory) checkToken(t Token, fenceStale bool, fn func(*fill)) error {
	if d.closed.Load() {
		return ErrClosed
	}
	if t.Shard != d.cfg.Shard {
		return ErrWrongShard
	}
	v, ok := d.ids.Load(t.Fill)
	if !ok {
		if t.Epoch < Epoch(d.epoch.Load()) {
			return ErrStaleEpoch
		}
		return ErrNotLeader
	}
	f := v.(*fill)
	f.s.mu.Lock()
	defer f.s.mu.Unlock()
	if d.closed.Load() {
		return ErrClosed
	}
	cur := Epoch(d.epoch.Load())
	if !f.removed && f.epoch < cur && fenceStale {
		d.fence(f)
	}
	switch {
	case t.Epoch < cur:
		return ErrStaleEpoch
	case f.removed || t.Epoch != f.epoch || t.Turn != f.turn:
		return ErrNotLeader
	}
	if fn != nil {
		fn(f)
	}
	return nil
}

// AdvanceEpoch moves the shard to epoch to, which must be above the current
// one, and fences every fill started under an older epoch: its waiters get
// Fenced and release their credits, the fill is removed, and its leader's
// later Finish gets ErrStaleEpoch. It returns how many fills it fenced. At
// the largest epoch it returns ErrEpochOverflow; for to <= current,
// ErrEpochRegress; closed, ErrClosed. On error nothing changes.
func (d *Directory) AdvanceEpoch(to Epoch) (fenced int, err error) {
	d.admin.Lock()
	defer d.admin.Unlock()
	if d.closed.Load() {
		return 0, ErrClosed
	}
	cur := Epoch(d.epoch.Load())
	if cur == ^Epoch(0) {
		return 0, ErrEpochOverflow
	}
	if to <= cur {
		return 0, fmt.Errorf("%w: %d is not above %d", ErrEpochRegress, to, cur)
	}
	d.epoch.Store(uint64(to))
	for i := range d.stripes {
		s := &d.stripes[i]
		s.mu.Lock()
		for _, f := range s.fills {
			if f.epoch < to {
				d.fence(f)
				fenced++
			}
		}
		s.mu.Unlock()
	}
	return fenced, nil
}

// Close fails every waiter and removes every fill. Afterwards Acquire
// answers Denied, token calls and AdvanceEpoch return ErrClosed, and Expire
// and LeaveOwner do nothing. Close is idempotent.
func (d *Directory) Close() {
	d.admin.Lock()
	defer d.admin.Unlock()
	if d.closed.Swap(true) {
		return
	}
	for i := range d.stripes {
		s := &d.stripes[i]
		s.mu.Lock()
		for _, f := range s.fills {
			for w := f.head; w != nil; w = f.head {
				d.endWaiter(w, Notice{Kind: Failed})
			}
			d.remove(f)
		}
		s.mu.Unlock()
	}
}
