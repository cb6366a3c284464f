// Package etcdmember is the etcd-backed control.Membership.
//
// # Layout
//
// Under a prefix (default "/gpucache/"):
//
//	<prefix>epoch            the epoch, a decimal uint64
//	<prefix>roster           JSON array of the member IDs the epoch accounts for
//	<prefix>members/<id>     JSON of one control.Member, attached to the
//	                         member's lease
//
// # Changes
//
// Every change (join, leave, drain) is one etcd transaction computed from a
// snapshot of the whole prefix read at one revision: it compares the epoch
// key's mod revision with the one read (plus the touched member key's
// create/mod revision), and writes the member key, the epoch and the roster
// together. On a failed compare the snapshot is re-read and the change
// recomputed. The epoch advances by exactly one per membership change.
//
// # Lease expiry
//
// A member's key is attached to its lease (KeepAlive keeps it alive). When
// the process dies, the lease expires and etcd deletes the key without any
// transaction, so the epoch key does not move. The roster records which
// members the current epoch accounts for: any snapshot in which the live
// member keys differ from the roster has pending, unaccounted changes.
// Every Membership (node or client-only watcher) watches the prefix; on
// seeing such a snapshot it commits a reconcile transaction — compare the
// epoch key's mod revision with the one read, write epoch+k (k = number of
// IDs that differ) and the live roster. Only one instance's transaction
// succeeds; the others fail the compare, re-read, and find nothing left to
// do. Any other change racing with the expiry also folds the pending
// differences into its own step count, so no expiry is ever lost or counted
// twice.
//
// # Views
//
// A view is published only from a consistent snapshot (roster equal to the
// live member keys) and only when its epoch is newer than the last one
// published, so a given epoch always names one member set. Watch delivers
// views drop-to-latest; publishing never blocks the etcd watch loop.
// Invalid member keys (bad JSON, an ID that does not match the key, a
// member NewView rejects) are left out of the view and reported to the
// configured logger, never fatal.
//
// # Unreachable etcd
//
// Current never touches the network: while etcd is unreachable it keeps
// returning the last view it published (read-only; Drain fails with the
// etcd error). The watch loop retries with backoff and catches up from a
// fresh snapshot when etcd is back. If this node's lease expires meanwhile
// its key is gone; LeaseLost is closed and the node stays a watcher.
package etcdmember

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/gpucache/gpucache/internal/control"
)

// DefaultPrefix is the key prefix used when Config.Prefix is empty.
const DefaultPrefix = "/gpucache/"

// DefaultLeaseTTL is the lease TTL used when Config.LeaseTTL is zero.
const DefaultLeaseTTL = 10 * time.Second

// opTimeout bounds each etcd request of the background loop and of Close.
const opTimeout = 5 * time.Second

// Config configures New.
type Config struct {
	// Client is the etcd client. Required; the Membership does not close it.
	Client *clientv3.Client
	// Prefix of every key; default DefaultPrefix. A trailing "/" is added
	// if missing.
	Prefix string
	// Self is this node's registration; nil for a client-only watcher.
	Self *control.Member
	// LeaseTTL of Self's lease; default DefaultLeaseTTL. It is rounded up
	// to whole seconds, and etcd raises it to its minimum TTL (1.5 election
	// timeouts, 2s with the default 1s election timeout).
	LeaseTTL time.Duration
	// NoDeregister makes Close stop the keepalive without leaving or
	// revoking the lease: the key vanishes when the lease expires, as if
	// the process had died.
	NoDeregister bool
	// Logger receives reports of invalid member keys and of etcd errors in
	// the background loop; default slog.Default().
	Logger *slog.Logger
}

// Membership is the etcd-backed control.Membership.
type Membership struct {
	control.Hub

	cli    *clientv3.Client
	prefix string
	self   *control.Member
	lease  clientv3.LeaseID
	cfg    Config
	log    *slog.Logger

	cancel   context.CancelFunc // stops the loop and the keepalive
	done     sync.WaitGroup
	lost     chan struct{}
	closeMu  sync.Mutex
	isClosed bool
	closeErr error
}

var _ control.Membership = (*Membership)(nil)

// New registers cfg.Self (if any) and starts watching. ctx bounds only the
// setup (the initial read, the lease grant and the join transaction); the
// background loop runs until Close. After New returns, Current includes
// Self. Joining an ID that is already registered (e.g. a restart before the
// old lease expired) is control.ErrDuplicateMember.
func New(ctx context.Context, cfg Config) (*Membership, error) {
	if cfg.Client == nil {
		return nil, errors.New("gpucache/etcdmember: nil Client")
	}
	if cfg.Prefix == "" {
		cfg.Prefix = DefaultPrefix
	}
	if !strings.HasSuffix(cfg.Prefix, "/") {
		cfg.Prefix += "/"
	}
	if cfg.LeaseTTL <= 0 {
		cfg.LeaseTTL = DefaultLeaseTTL
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	m := &Membership{
		cli:    cfg.Client,
		prefix: cfg.Prefix,
		cfg:    cfg,
		log:    cfg.Logger,
		lost:   make(chan struct{}),
	}
	if cfg.Self != nil {
		self := *cfg.Self
		if _, err := control.NewView(1, []control.Member{self}); err != nil {
			return nil, err
		}
		m.self = &self
	}

	snap, err := m.read(ctx)
	if err != nil {
		return nil, err
	}
	m.offer(snap)

	loopCtx, cancel := context.WithCancel(context.Background())
	m.cancel = cancel
	if m.self != nil {
		if err := m.register(ctx, loopCtx); err != nil {
			cancel()
			return nil, err
		}
	}
	m.done.Add(1)
	go m.loop(loopCtx, snap.rev)
	return m, nil
}

// register grants the lease, starts its keepalive and commits the join.
func (m *Membership) register(ctx, loopCtx context.Context) error {
	ttl := int64(math.Ceil(m.cfg.LeaseTTL.Seconds()))
	g, err := m.cli.Grant(ctx, ttl)
	if err != nil {
		return fmt.Errorf("gpucache/etcdmember: lease grant: %w", err)
	}
	m.lease = g.ID
	revoke := func() {
		rctx, c := context.WithTimeout(context.Background(), opTimeout)
		defer c()
		_, _ = m.cli.Revoke(rctx, m.lease)
	}
	ka, err := m.cli.KeepAlive(loopCtx, m.lease)
	if err != nil {
		revoke()
		return fmt.Errorf("gpucache/etcdmember: keepalive: %w", err)
	}
	m.done.Add(1)
	go func() {
		defer m.done.Done()
		for range ka {
		}
		if loopCtx.Err() == nil {
			m.log.Warn("gpucache/etcdmember: lease lost", "member", m.self.ID, "lease", int64(m.lease))
			close(m.lost)
		}
	}()
	key := m.memberKey(m.self.ID)
	val, err := json.Marshal(toWire(*m.self))
	if err != nil {
		revoke()
		return err
	}
	_, err = m.update(ctx, func(s *snapshot) ([]clientv3.Cmp, []clientv3.Op, []control.Member, error) {
		if _, ok := s.live[m.self.ID]; ok {
			return nil, nil, nil, fmt.Errorf("%w: %q", control.ErrDuplicateMember, m.self.ID)
		}
		cmps := []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(key), "=", 0)}
		ops := []clientv3.Op{clientv3.OpPut(key, string(val), clientv3.WithLease(m.lease))}
		return cmps, ops, append(s.valid(), *m.self), nil
	})
	if err != nil {
		revoke()
		return err
	}
	return nil
}

// LeaseLost is closed if this node's keepalive ends before Close (its
// lease expired or was revoked elsewhere, so its key is gone). Never closed
// for a client-only watcher.
func (m *Membership) LeaseLost() <-chan struct{} { return m.lost }

// Drain marks member id draining (epoch + 1). Draining a draining member
// changes nothing; an unknown id is control.ErrUnknownMember. The member
// key keeps its owner's lease.
func (m *Membership) Drain(ctx context.Context, id control.MemberID) (control.View, error) {
	if m.closed() {
		return m.Current(), control.ErrClosed
	}
	key := m.memberKey(id)
	return m.update(ctx, func(s *snapshot) ([]clientv3.Cmp, []clientv3.Op, []control.Member, error) {
		lm, ok := s.live[id]
		if !ok || lm.err != nil {
			return nil, nil, nil, fmt.Errorf("%w: %q", control.ErrUnknownMember, id)
		}
		if lm.m.Draining {
			return nil, nil, nil, nil
		}
		d := lm.m
		d.Draining = true
		val, err := json.Marshal(toWire(d))
		if err != nil {
			return nil, nil, nil, err
		}
		next := s.valid()
		for i := range next {
			if next[i].ID == id {
				next[i] = d
			}
		}
		cmps := []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(key), "=", lm.modRev)}
		ops := []clientv3.Op{clientv3.OpPut(key, string(val), clientv3.WithIgnoreLease())}
		return cmps, ops, next, nil
	})
}

// Isolate removes every member of a fault domain in one transaction, or
// nothing: the plan (control.PlanIsolate) checks the whole victim set
// against epochBudget before anything changes, so a short budget leaves
// members, domains and epoch as they are (control.ErrEpochOverflow). The
// epoch advances by one per victim (plus any pending lease expiry the
// transaction folds in). The victims' keys are deleted; their leases stay
// with their processes, which see themselves absent from the view and own
// no key from then on.
func (m *Membership) Isolate(ctx context.Context, domain string, epochBudget uint64) (control.Plan, error) {
	if m.closed() {
		return control.Plan{}, control.ErrClosed
	}
	var plan control.Plan
	_, err := m.update(ctx, func(s *snapshot) ([]clientv3.Cmp, []clientv3.Op, []control.Member, error) {
		v, err := control.NewView(s.epoch, s.valid())
		if err != nil {
			return nil, nil, nil, err
		}
		pending := s.pending()
		if pending > epochBudget {
			return nil, nil, nil, fmt.Errorf("%w: %d pending changes exceed the budget of %d", control.ErrEpochOverflow, pending, epochBudget)
		}
		p, err := control.PlanIsolate(v, domain, epochBudget-pending)
		if err != nil {
			return nil, nil, nil, err
		}
		var cmps []clientv3.Cmp
		var ops []clientv3.Op
		for _, victim := range p.Victims {
			key := m.memberKey(victim.ID)
			cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(key), "=", s.live[victim.ID].modRev))
			ops = append(ops, clientv3.OpDelete(key))
		}
		p.To += pending
		plan = p
		return cmps, ops, p.Remaining, nil
	})
	if err != nil {
		return control.Plan{}, err
	}
	return plan, nil
}

// Probe checks that etcd answers: a linearizable read of the epoch key,
// bounded by ctx. The daemon's control-plane health loop calls it.
func (m *Membership) Probe(ctx context.Context) error {
	_, err := m.cli.Get(ctx, m.epochKey())
	if err != nil {
		return fmt.Errorf("gpucache/etcdmember: probe: %w", err)
	}
	return nil
}

// Close stops the watch loop and closes every watch channel. For a node it
// first leaves (deletes its key and advances the epoch in one transaction)
// and revokes its lease, unless Config.NoDeregister. Current keeps
// answering the last view. Close is idempotent and returns the first
// call's error.
func (m *Membership) Close() error {
	m.closeMu.Lock()
	defer m.closeMu.Unlock()
	if m.isClosed {
		return m.closeErr
	}
	m.isClosed = true
	var err error
	if m.self != nil && !m.cfg.NoDeregister {
		ctx, c := context.WithTimeout(context.Background(), opTimeout)
		err = m.leave(ctx)
		_, rerr := m.cli.Revoke(ctx, m.lease)
		if rerr != nil && !errors.Is(rerr, rpctypes.ErrLeaseNotFound) && err == nil {
			err = fmt.Errorf("gpucache/etcdmember: revoke: %w", rerr)
		}
		c()
	}
	m.cancel()
	m.done.Wait()
	m.Hub.Close()
	m.closeErr = err
	return err
}

// Abandon is Close without leaving: the loops stop and the member key is
// left to expire with its lease, as if the process had died. A node uses it
// when etcd is unreachable, where a leave would only wait out its timeout.
func (m *Membership) Abandon() error {
	m.closeMu.Lock()
	m.cfg.NoDeregister = true
	m.closeMu.Unlock()
	return m.Close()
}

func (m *Membership) closed() bool {
	m.closeMu.Lock()
	defer m.closeMu.Unlock()
	return m.isClosed
}

// leave deletes Self's key and advances the epoch in one transaction.
func (m *Membership) leave(ctx context.Context) error {
	key := m.memberKey(m.self.ID)
	_, err := m.update(ctx, func(s *snapshot) ([]clientv3.Cmp, []clientv3.Op, []control.Member, error) {
		lm, ok := s.live[m.self.ID]
		if !ok {
			return nil, nil, nil, nil // already gone (lease lost)
		}
		next := slices.DeleteFunc(s.valid(), func(x control.Member) bool { return x.ID == m.self.ID })
		cmps := []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(key), "=", lm.modRev)}
		return cmps, []clientv3.Op{clientv3.OpDelete(key)}, next, nil
	})
	return err
}

// change computes one change from a snapshot: extra compares, member-key
// ops and the next valid member set (for the returned view). ops == nil
// means no change.
type change func(*snapshot) (cmps []clientv3.Cmp, ops []clientv3.Op, next []control.Member, err error)

// update is the read-compute-transaction loop. The transaction compares
// the epoch key's mod revision and advances the epoch by one per member key
// the change touches plus one per pending unaccounted difference (an
// expired lease).
func (m *Membership) update(ctx context.Context, f change) (control.View, error) {
	for {
		s, err := m.read(ctx)
		if err != nil {
			return m.Current(), err
		}
		cmps, ops, next, err := f(s)
		if err != nil || ops == nil {
			m.offer(s)
			return m.Current(), err
		}
		ids := s.liveIDs()
		for _, op := range ops {
			id := control.MemberID(strings.TrimPrefix(string(op.KeyBytes()), m.prefix+"members/"))
			switch {
			case op.IsDelete():
				ids = slices.DeleteFunc(ids, func(x control.MemberID) bool { return x == id })
			case !slices.Contains(ids, id):
				ids = append(ids, id)
			}
		}
		// One epoch step per member key the change writes or deletes (a
		// join, leave or drain is one; an isolation is one per victim),
		// plus one per unaccounted difference.
		steps := s.pending() + uint64(len(ops))
		ok, epoch, err := m.commit(ctx, s, steps, ids, cmps, ops)
		if err != nil {
			return m.Current(), err
		}
		if !ok {
			continue
		}
		v, err := control.NewView(epoch, next)
		if err != nil {
			// Unreachable in practice: next holds only valid members.
			return m.Current(), err
		}
		m.Publish(v)
		return v, nil
	}
}

// commit runs one transaction: if the epoch key is unchanged since s, write
// ops, epoch+steps and the roster ids. It reports whether it applied.
func (m *Membership) commit(ctx context.Context, s *snapshot, steps uint64, ids []control.MemberID, cmps []clientv3.Cmp, ops []clientv3.Op) (bool, uint64, error) {
	if steps > math.MaxUint64-s.epoch {
		return false, 0, fmt.Errorf("%w: %d changes at epoch %d", control.ErrEpochOverflow, steps, s.epoch)
	}
	epoch := s.epoch + steps
	slices.Sort(ids)
	if ids == nil {
		ids = []control.MemberID{}
	}
	roster, err := json.Marshal(ids)
	if err != nil {
		return false, 0, err
	}
	all := append([]clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(m.epochKey()), "=", s.epochModRev)}, cmps...)
	ops = append(ops,
		clientv3.OpPut(m.epochKey(), strconv.FormatUint(epoch, 10)),
		clientv3.OpPut(m.rosterKey(), string(roster)))
	resp, err := m.cli.Txn(ctx).If(all...).Then(ops...).Commit()
	if err != nil {
		return false, 0, fmt.Errorf("gpucache/etcdmember: txn: %w", err)
	}
	return resp.Succeeded, epoch, nil
}

// loop watches the prefix; every watch response triggers a fresh snapshot,
// which is published if consistent and newer, or reconciled if it carries
// unaccounted differences (an expired lease).
func (m *Membership) loop(ctx context.Context, rev int64) {
	defer m.done.Done()
	backoff := 50 * time.Millisecond
	wait := func() bool {
		t := time.NewTimer(backoff)
		defer t.Stop()
		backoff = min(2*backoff, 2*time.Second)
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
			return true
		}
	}
	var wch clientv3.WatchChan
	var wcancel context.CancelFunc = func() {}
	defer func() { wcancel() }()
	dirty := true // a snapshot is needed before waiting
	for ctx.Err() == nil {
		if dirty {
			rctx, c := context.WithTimeout(ctx, opTimeout)
			s, err := m.read(rctx)
			if err == nil && s.pending() > 0 {
				var ok bool
				ok, _, err = m.commit(rctx, s, s.pending(), s.liveIDs(), nil, nil)
				if err == nil && !ok {
					c()
					continue // lost the race: re-read
				}
				if err == nil {
					c()
					continue // applied: re-read to publish
				}
			}
			c()
			if err != nil {
				if ctx.Err() == nil {
					m.log.Warn("gpucache/etcdmember: refresh failed", "err", err)
				}
				if !wait() {
					return
				}
				continue
			}
			backoff = 50 * time.Millisecond
			m.offer(s)
			rev = s.rev
			dirty = false
		}
		if wch == nil {
			wcancel()
			wch, wcancel = m.watch(ctx, rev+1)
		}
		select {
		case <-ctx.Done():
			return
		case wr, ok := <-wch:
			if !ok || wr.Canceled || wr.Err() != nil {
				if ok && ctx.Err() == nil {
					m.log.Warn("gpucache/etcdmember: watch failed", "err", wr.Err())
				}
				wch = nil
				dirty = true
				if ctx.Err() == nil && !wait() {
					return
				}
				continue
			}
			if len(wr.Events) > 0 {
				dirty = true
				rev = max(rev, wr.Events[len(wr.Events)-1].Kv.ModRevision)
			}
		}
	}
}

// watch watches the prefix from rev; the cancel func ends the watch.
func (m *Membership) watch(ctx context.Context, rev int64) (clientv3.WatchChan, context.CancelFunc) {
	wctx, cancel := context.WithCancel(ctx)
	return m.cli.Watch(clientv3.WithRequireLeader(wctx), m.prefix, clientv3.WithPrefix(), clientv3.WithRev(rev)), cancel
}

// offer publishes s's view if s is consistent and newer than the current
// view.
func (m *Membership) offer(s *snapshot) {
	if s.pending() > 0 {
		return
	}
	v, err := control.NewView(s.epoch, s.valid())
	if err != nil {
		m.log.Warn("gpucache/etcdmember: invalid view", "epoch", s.epoch, "err", err)
		return
	}
	m.Publish(v)
}

// snapshot is the prefix read at one revision.
type snapshot struct {
	rev         int64
	epoch       uint64
	epochModRev int64
	roster      map[control.MemberID]bool
	live        map[control.MemberID]liveMember
}

type liveMember struct {
	m      control.Member
	modRev int64
	err    error // invalid key: left out of views
}

// pending is the number of changes the epoch does not account for: IDs in
// the roster without a valid key (expired leases) plus valid keys not in
// the roster. Invalid keys are ignored, as if absent.
func (s *snapshot) pending() uint64 {
	var n uint64
	for id := range s.roster {
		if lm, ok := s.live[id]; !ok || lm.err != nil {
			n++
		}
	}
	for id, lm := range s.live {
		if lm.err == nil && !s.roster[id] {
			n++
		}
	}
	return n
}

// liveIDs returns the IDs of the valid live members (the roster to write).
func (s *snapshot) liveIDs() []control.MemberID {
	ids := make([]control.MemberID, 0, len(s.live))
	for id, lm := range s.live {
		if lm.err == nil {
			ids = append(ids, id)
		}
	}
	return ids
}

// valid returns the valid live members.
func (s *snapshot) valid() []control.Member {
	var ms []control.Member
	for _, lm := range s.live {
		if lm.err == nil {
			ms = append(ms, lm.m)
		}
	}
	return ms
}

func (m *Membership) epochKey() string                     { return m.prefix + "epoch" }
func (m *Membership) rosterKey() string                    { return m.prefix + "roster" }
func (m *Membership) memberKey(id control.MemberID) string { return m.prefix + "members/" + string(id) }

// read returns the snapshot of the prefix at one revision.
func (m *Membership) read(ctx context.Context) (*snapshot, error) {
	resp, err := m.cli.Get(ctx, m.prefix, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("gpucache/etcdmember: read: %w", err)
	}
	s := &snapshot{
		rev:    resp.Header.Revision,
		roster: map[control.MemberID]bool{},
		live:   map[control.MemberID]liveMember{},
	}
	memberPrefix := m.prefix + "members/"
	for _, kv := range resp.Kvs {
		key := string(kv.Key)
		switch {
		case key == m.epochKey():
			e, err := strconv.ParseUint(string(kv.Value), 10, 64)
			if err != nil {
				return nil, fmt.Errorf("gpucache/etcdmember: bad epoch key %q: %w", kv.Value, err)
			}
			s.epoch, s.epochModRev = e, kv.ModRevision
		case key == m.rosterKey():
			var ids []control.MemberID
			if err := json.Unmarshal(kv.Value, &ids); err != nil {
				return nil, fmt.Errorf("gpucache/etcdmember: bad roster key: %w", err)
			}
			for _, id := range ids {
				s.roster[id] = true
			}
		case strings.HasPrefix(key, memberPrefix):
			id := control.MemberID(strings.TrimPrefix(key, memberPrefix))
			lm := liveMember{modRev: kv.ModRevision}
			var w wireMember
			if err := json.Unmarshal(kv.Value, &w); err != nil {
				lm.err = fmt.Errorf("%w: key %q: %v", control.ErrInvalidMember, key, err)
			} else if lm.m = w.member(); lm.m.ID != id {
				lm.err = fmt.Errorf("%w: key %q holds id %q", control.ErrInvalidMember, key, lm.m.ID)
			} else if _, err := control.NewView(1, []control.Member{lm.m}); err != nil {
				lm.err = err
			}
			if lm.err != nil {
				m.log.Warn("gpucache/etcdmember: ignoring invalid member key", "key", key, "err", lm.err)
			}
			s.live[id] = lm
		}
	}
	return s, nil
}

// wireMember is a member key's JSON value.
type wireMember struct {
	ID            string `json:"id"`
	Addr          string `json:"addr"`
	FaultDomain   string `json:"fault_domain"`
	ProtoVersion  uint8  `json:"proto_version"`
	CapacityBytes uint64 `json:"capacity_bytes"`
	Draining      bool   `json:"draining,omitempty"`
}

func toWire(m control.Member) wireMember {
	return wireMember{string(m.ID), m.Addr, m.FaultDomain, m.ProtoVersion, m.CapacityBytes, m.Draining}
}

func (w wireMember) member() control.Member {
	return control.Member{
		ID: control.MemberID(w.ID), Addr: w.Addr, FaultDomain: w.FaultDomain,
		ProtoVersion: w.ProtoVersion, CapacityBytes: w.CapacityBytes, Draining: w.Draining,
	}
}
