// Package forward serves RESP operations on keys another cluster member
// owns (docs/RESP.md, "Cluster"): it implements server.Forwarder by sending
// each operation to the key's owner over the native protocol, as the
// caller's tenant, within the caller's deadline.
//
// # Routing
//
// The owner is control.Owner under this node's view (server.Cluster), the
// same placement every node checks ownership with, so Remote agrees with
// the owner's own check. An owner that refuses with WRONG_EPOCH (its view
// is newer) makes the forwarder refresh once: it takes this node's view if
// the membership watch has caught up, or else the refusing node's MEMBERS,
// and retries on the owner under that view. A second refusal, no owner,
// or an owner that turns out to be this node is a miss.
//
// # Failure semantics
//
// Every fault is a miss, never a hang: a dead owner (connection refused),
// a silent one (accepts and never answers), a broken connection, the
// caller's deadline (or Config.Timeout when the caller has none), a full
// GET byte budget. GET answers no hit, EXISTS false, DEL false, and SET
// "not stored" with a nil error. Only a refusal by a live owner (no space,
// too large, quota, rate limit, denied, unauthenticated) is a SET error,
// with a message the RESP client sees.
//
// # Bounds
//
//   - Clients: one client.Client per (owner address, tenant, credential),
//     each with Config.Conns connections, at most Config.MaxClients of
//     them (least recently used goes first; a client in use is closed
//     when its last operation ends), and a client idle for
//     Config.IdleClose is closed.
//   - Bytes: forwarded GET payloads are held in buffers charged to
//     Config.ByteBudget from the moment the owner's answer announces their
//     length until the payload has been handed to the RESP writer. A GET
//     whose payload does not fit the budget left is a miss (its bytes are
//     discarded on the owner's connection), so N concurrent 64 MiB
//     forwards never allocate more than the budget.
package forward

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpucache/gpucache/api/identity"
	"github.com/gpucache/gpucache/api/wire"
	"github.com/gpucache/gpucache/client"
	"github.com/gpucache/gpucache/internal/control"
	"github.com/gpucache/gpucache/internal/server"
)

// Sentinel errors.
var (
	// ErrConfig is a Config out of range.
	ErrConfig = errors.New("gpucache/forward: invalid config")
	// ErrRefused wraps an owner's refusal of a forwarded SET.
	ErrRefused = errors.New("gpucache/forward: owner refused the block")
	// errMiss is a fault that ends as a miss (no owner, refused twice).
	errMiss = errors.New("gpucache/forward: miss")
)

// Defaults of Config.
const (
	DefaultMaxClients  = 64
	DefaultIdleClose   = time.Minute
	DefaultConns       = 2
	DefaultByteBudget  = 256 << 20
	DefaultDialTimeout = time.Second
	DefaultTimeout     = 2 * time.Second
)

// Config configures a Forwarder.
type Config struct {
	// Cluster is this node's cluster state (required): its member ID and
	// its current view, which the daemon's membership watch updates.
	Cluster *server.Cluster
	// TLS, when set, is the client TLS config for dialing owners (the
	// cluster's listeners use TLS). Nil: plain TCP.
	TLS *tls.Config
	// MaxClients bounds the pooled clients, one per (owner, tenant,
	// credential). Default 64.
	MaxClients int
	// IdleClose closes a pooled client unused for this long. Default 1m.
	IdleClose time.Duration
	// Conns is the connections per pooled client. Default 2.
	Conns int
	// ByteBudget bounds the bytes of forwarded GET payloads held at once.
	// It must hold the largest block. Default 256 MiB.
	ByteBudget int64
	// DialTimeout bounds connecting to an owner plus HELLO. Default 1s.
	DialTimeout time.Duration
	// Timeout bounds an operation whose context has no deadline. Default 2s.
	Timeout time.Duration
	// Logger receives pool events at debug level. Default: none.
	Logger *slog.Logger
}

func (c Config) withDefaults() (Config, error) {
	if c.Cluster == nil {
		return c, fmt.Errorf("%w: no cluster", ErrConfig)
	}
	if c.MaxClients == 0 {
		c.MaxClients = DefaultMaxClients
	}
	if c.IdleClose == 0 {
		c.IdleClose = DefaultIdleClose
	}
	if c.Conns == 0 {
		c.Conns = DefaultConns
	}
	if c.ByteBudget == 0 {
		c.ByteBudget = DefaultByteBudget
	}
	if c.DialTimeout == 0 {
		c.DialTimeout = DefaultDialTimeout
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c, c.validate()
}

// validate checks a config with its defaults filled.
func (c Config) validate() error {
	switch {
	case c.MaxClients < 1:
		return fmt.Errorf("%w: MaxClients %d < 1", ErrConfig, c.MaxClients)
	case c.IdleClose < 0 || c.DialTimeout < 0 || c.Timeout < 0:
		return fmt.Errorf("%w: negative duration", ErrConfig)
	case c.Conns < 1 || c.Conns > 64:
		return fmt.Errorf("%w: Conns %d not in 1..64", ErrConfig, c.Conns)
	case c.ByteBudget < 1:
		return fmt.Errorf("%w: ByteBudget %d < 1", ErrConfig, c.ByteBudget)
	}
	return nil
}

// Forwarder implements server.Forwarder. Create it with New and stop it
// with Close.
type Forwarder struct {
	cfg   Config
	pool  *pool
	bytes budget
	stats struct {
		forwarded, retries, refused, overBudget atomic.Uint64
		missed                                  [numMissReasons]atomic.Uint64
	}
}

// missReason is why a forwarded operation ended as a miss.
type missReason int

const (
	missNotCached   missReason = iota // the owner does not hold the block (GET)
	missNoOwner                       // no other member owns the key under the view
	missUnavailable                   // the owner could not be reached, or the connection broke
	missTimeout                       // the caller's deadline (or Config.Timeout) passed
	missWrongEpoch                    // the owner refused with WRONG_EPOCH after the refresh
	missError                         // any other fault: an error answer, a protocol violation
	numMissReasons
)

var missNames = [numMissReasons]string{"not_cached", "no_owner", "unavailable", "timeout", "wrong_epoch", "error"}

// miss counts a miss of a forwarded operation under ctx that ended with
// err (nil: a plain miss, the owner does not hold the block). A fault
// once ctx is done is a timeout, whatever error it surfaced as. A GET
// refused by the byte budget counts as forward_get_over_budget instead.
func (f *Forwarder) miss(ctx context.Context, err error) {
	switch {
	case errors.Is(err, client.ErrShortBuffer):
		f.stats.overBudget.Add(1)
	case err != nil && !errors.Is(err, client.ErrNotCached) && ctx.Err() != nil:
		f.stats.missed[missTimeout].Add(1)
	default:
		f.stats.missed[classify(err)].Add(1)
	}
}

func classify(err error) missReason {
	if _, ok := client.WrongEpoch(err); ok {
		return missWrongEpoch
	}
	switch {
	case err == nil || errors.Is(err, client.ErrNotCached):
		return missNotCached
	case errors.Is(err, errMiss):
		return missNoOwner
	case errors.Is(err, client.ErrTimeout) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled):
		return missTimeout
	case errors.Is(err, client.ErrUnavailable) || errors.Is(err, client.ErrClosed) || errors.Is(err, errClosed):
		return missUnavailable
	}
	return missError
}

var _ server.Forwarder = (*Forwarder)(nil)

// New returns a Forwarder; it starts the pool's idle sweeper, which Close
// stops.
func New(cfg Config) (*Forwarder, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	f := &Forwarder{cfg: cfg}
	f.bytes.left = cfg.ByteBudget
	f.pool = newPool(cfg)
	return f, nil
}

// Close closes every pooled client and stops the sweeper. Operations in
// flight end as misses.
func (f *Forwarder) Close() error { return f.pool.close() }

// Remote reports whether key is another member's under this node's view
// (server.Cluster.Remote).
func (f *Forwarder) Remote(key identity.BlockKey) bool { return f.cfg.Cluster.Remote(key) }

// Stats returns the forwarder's STAT entries (server.Config.ForwardStats):
//
//   - forward_ops: operations forwarded to an owner (counter);
//   - forward_misses: those that ended as a miss, for any reason
//     (counter), and by reason forward_miss_not_cached (the owner does
//     not hold the block), _no_owner, _unavailable (owner unreachable or
//     connection broken), _timeout, _wrong_epoch (refused again after the
//     view refresh) and _error (any other fault), plus
//     forward_get_over_budget (a GET refused by the byte budget);
//   - forward_retries: retries after a WRONG_EPOCH (counter);
//   - forward_set_refused: SETs a live owner refused (counter);
//   - forward_clients: pooled clients (gauge);
//   - forward_bytes_held and forward_byte_budget: bytes of forwarded GET
//     payloads held now, and their bound (gauges).
func (f *Forwarder) Stats() []wire.StatEntry {
	var misses uint64
	byReason := make([]wire.StatEntry, 0, numMissReasons)
	for r := range numMissReasons {
		n := f.stats.missed[r].Load()
		misses += n
		byReason = append(byReason, wire.StatEntry{Name: "forward_miss_" + missNames[r], Value: n})
	}
	over := f.stats.overBudget.Load()
	e := []wire.StatEntry{
		{Name: "forward_ops", Value: f.stats.forwarded.Load()},
		{Name: "forward_misses", Value: misses + over},
	}
	e = append(e, byReason...)
	return append(e,
		wire.StatEntry{Name: "forward_get_over_budget", Value: over},
		wire.StatEntry{Name: "forward_retries", Value: f.stats.retries.Load()},
		wire.StatEntry{Name: "forward_set_refused", Value: f.stats.refused.Load()},
		wire.StatEntry{Name: "forward_clients", Value: uint64(f.pool.size())},
		wire.StatEntry{Name: "forward_bytes_held", Value: uint64(f.cfg.ByteBudget - f.bytes.remaining())},
		wire.StatEntry{Name: "forward_byte_budget", Value: uint64(f.cfg.ByteBudget)},
	)
}

// do runs op on the owner of r.Key under this node's view and, when the
// owner refuses with WRONG_EPOCH, once more under a refreshed view. op
// returns the error of its call; do returns the last one, or errMiss when
// no other member owns the key.
func (f *Forwarder) do(ctx context.Context, r *server.ForwardRequest, op func(ctx context.Context, c *client.Client) error) error {
	f.stats.forwarded.Add(1)
	view := f.cfg.Cluster.View()
	for attempt := 0; ; attempt++ {
		// A caller whose deadline has passed gets its miss without a
		// round trip: a pooled client may still answer a done context
		// when the reply is already there.
		if err := ctx.Err(); err != nil {
			return err
		}
		m, ok := control.Owner(view, r.Key)
		if !ok || m.ID == f.cfg.Cluster.Self() {
			return errMiss
		}
		c, release, err := f.pool.get(ctx, m.Addr, r.Tenant, r.Secret)
		if err != nil {
			return err
		}
		err = op(ctx, c)
		epoch, wrong := client.WrongEpoch(err)
		if !wrong || attempt > 0 {
			release()
			return err
		}
		f.stats.retries.Add(1)
		view = f.refresh(ctx, c, view, epoch)
		release()
	}
}

// refresh returns a view at least as new as epoch: this node's, if its
// watch has caught up, or else the refusing node's (MEMBERS). On failure
// it returns old, and the retry goes where the first try went (a second
// refusal is then a miss).
func (f *Forwarder) refresh(ctx context.Context, c *client.Client, old control.View, epoch uint64) control.View {
	if v := f.cfg.Cluster.View(); v.Epoch() >= epoch && v.Epoch() > old.Epoch() {
		return v
	}
	cv, err := c.Members(ctx)
	if err != nil || cv.Epoch <= old.Epoch() {
		return old
	}
	ms := make([]control.Member, len(cv.Members))
	for i, m := range cv.Members {
		ms[i] = control.Member{ID: control.MemberID(m.ID), Addr: m.Addr, FaultDomain: m.FaultDomain,
			ProtoVersion: m.ProtoVersion, CapacityBytes: m.CapacityBytes, Draining: m.Draining}
	}
	v, err := control.NewView(cv.Epoch, ms)
	if err != nil {
		return old
	}
	return v
}

// withTimeout applies Config.Timeout to a context without a deadline.
func (f *Forwarder) withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, f.cfg.Timeout)
}

// Get reads the block from its owner; on a hit it calls w once with the
// payload. Every fault is a miss (false, nil).
func (f *Forwarder) Get(ctx context.Context, r *server.ForwardRequest, w func(payload []byte) error) (bool, error) {
	ctx, cancel := f.withTimeout(ctx)
	defer cancel()
	hold := &holding{b: &f.bytes}
	defer hold.release()
	var res client.GetResult
	err := f.do(ctx, r, func(ctx context.Context, c *client.Client) error {
		res = c.Get(ctx, r.Namespace, []client.BlockKey{r.Key}, client.WithAlloc(hold.alloc))[0]
		return res.Reason
	})
	if err != nil || !res.Hit {
		f.miss(ctx, err)
		return false, nil
	}
	return true, w(res.Data)
}

// Set stores payload at the owner with PUT_OPAQUE. stored: this call
// stored it; existed: the owner already held it (its bytes stay). A fault
// is (false, false, nil): nothing stored, which a cache may do. A refusal
// by a live owner is an error wrapping ErrRefused.
func (f *Forwarder) Set(ctx context.Context, r *server.ForwardRequest, payload []byte) (stored, existed bool, err error) {
	ctx, cancel := f.withTimeout(ctx)
	defer cancel()
	var st client.Status
	err = f.do(ctx, r, func(ctx context.Context, c *client.Client) error {
		var err error
		st, err = c.PutOpaque(ctx, r.Namespace, r.Name, payload)
		return err
	})
	switch {
	case err == nil && st == client.StatusStored:
		return true, false, nil
	case err == nil && st == client.StatusExists:
		return false, true, nil
	case err == nil:
		f.stats.refused.Add(1)
		return false, false, fmt.Errorf("%w: %s", ErrRefused, st)
	case refusal(err):
		f.stats.refused.Add(1)
		return false, false, fmt.Errorf("%w: %w", ErrRefused, err)
	}
	f.cfg.Logger.Debug("forwarded SET missed", "err", err)
	f.miss(ctx, err)
	return false, false, nil
}

// refusal reports whether err is a live owner's refusal of the request
// (as opposed to a fault: no answer, a deadline, a stale view).
func refusal(err error) bool {
	if !errors.Is(err, client.ErrServer) {
		return false
	}
	switch wire.ErrCode(err) {
	case wire.CodeDenied, wire.CodeRateLimited, wire.CodeUnauthenticated, wire.CodeTenantMismatch,
		wire.CodeInvalidIdentity, wire.CodeReplay:
		return true
	}
	return false
}

// Exists asks the owner with LOOKUP, without a lease; the owner counts a
// block in DRAM or, with a cold index, in the cold tier.
func (f *Forwarder) Exists(ctx context.Context, r *server.ForwardRequest) bool {
	ctx, cancel := f.withTimeout(ctx)
	defer cancel()
	var hits int
	err := f.do(ctx, r, func(ctx context.Context, c *client.Client) error {
		var err error
		hits, _, err = c.Lookup(ctx, r.Namespace, []client.BlockKey{r.Key}, 0)
		return err
	})
	if err != nil {
		f.miss(ctx, err)
		return false
	}
	return hits == 1
}

// Del removes the block at the owner and reports whether it was there.
func (f *Forwarder) Del(ctx context.Context, r *server.ForwardRequest) bool {
	ctx, cancel := f.withTimeout(ctx)
	defer cancel()
	var st []client.Status
	err := f.do(ctx, r, func(ctx context.Context, c *client.Client) error {
		var err error
		st, err = c.Delete(ctx, r.Namespace, []client.BlockKey{r.Key})
		return err
	})
	if err != nil {
		f.miss(ctx, err)
		return false
	}
	return st[0] == client.StatusDeleted
}

// budget is the byte budget of forwarded GET payloads.
type budget struct {
	mu   sync.Mutex
	left int64 // guarded by mu
}

func (b *budget) take(n int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if n > b.left {
		return false
	}
	b.left -= n
	return true
}

func (b *budget) remaining() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.left
}

func (b *budget) put(n int64) {
	b.mu.Lock()
	b.left += n
	b.mu.Unlock()
}

// holding is what one forwarded GET holds of the budget. The client's
// reader calls alloc; the GET releases everything once it has handed the
// payload on. An alloc after the release (a reader still filling an
// abandoned call) is refused, so nothing is charged that nobody releases.
type holding struct {
	b    *budget
	mu   sync.Mutex
	held int64 // guarded by mu
	done bool  // guarded by mu
}

func (h *holding) alloc(n int) []byte {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.done || !h.b.take(int64(n)) {
		return nil
	}
	h.held += int64(n)
	return make([]byte, n)
}

func (h *holding) release() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.done = true
	h.b.put(h.held)
	h.held = 0
}
