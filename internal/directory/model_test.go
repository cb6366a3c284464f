package directory

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// The model test drives a Directory with random operations from one
// goroutine and checks every answer against a plain reference model (maps
// and slices, no locks, no heaps), plus invariants after every step:
//
//   - at most one live leader per fill: of all tokens ever issued, exactly
//     the model's current one passes Check;
//   - credits in use, per tenant, == the waiters still waiting, and live
//     fills per tenant never pass TenantFills (DeniedTenantFills);
//   - every waiter gets exactly one notice (checked when read, and at the
//     end after Close, when every waiter must have had exactly one).

type mState uint8

const (
	mWaiting mState = iota
	mPromoted
	mDone
)

type mWaiter struct {
	w      *Waiter
	tenant string
	owner  uint64
	fill   FillID
	state  mState
	turn   uint32
	expect *Notice // sent, not yet read
	read   int     // notices read
}

type mFill struct {
	id       FillID
	key      flightKey
	epoch    Epoch
	turn     uint32
	owner    uint64
	leader   *mWaiter
	waiters  []*mWaiter
	deadline time.Time
}

type model struct {
	t       testing.TB
	cfg     Config
	d       *Directory
	now     time.Time
	epoch   Epoch
	closed  bool
	nextID  FillID
	fills   map[flightKey]*mFill
	byID    map[FillID]*mFill
	waiters []*mWaiter
	tokens  []Token
	stats   Stats
}

func newModel(t testing.TB, cfg Config) *model {
	m := &model{t: t, cfg: cfg, now: time.Unix(1_700_000_000, 0), epoch: cfg.Epoch,
		fills: map[flightKey]*mFill{}, byID: map[FillID]*mFill{}}
	cfg.Now = func() time.Time { return m.now }
	d, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	m.d = d
	m.cfg = d.cfg
	m.epoch = d.Epoch()
	m.stats.Credits = map[string]int{}
	m.stats.TenantFills = map[string]int{}
	return m
}

func (m *model) token(f *mFill) Token {
	return Token{Shard: m.cfg.Shard, Fill: f.id, Epoch: f.epoch, Turn: f.turn}
}

func (m *model) send(w *mWaiter, n Notice) {
	if w.expect != nil || w.read != 0 {
		m.t.Fatalf("model: second notice for a waiter")
	}
	w.expect = &n
}

func (m *model) unwait(f *mFill, w *mWaiter) {
	i := slices.Index(f.waiters, w)
	f.waiters = slices.Delete(f.waiters, i, i+1)
	m.stats.Credits[w.tenant]--
	if m.stats.Credits[w.tenant] == 0 {
		delete(m.stats.Credits, w.tenant)
	}
	m.stats.CreditsInUse--
	m.stats.Waiters--
}

func (m *model) end(f *mFill, w *mWaiter, k NoticeKind) {
	m.unwait(f, w)
	w.state = mDone
	m.send(w, Notice{Kind: k})
}

func (m *model) remove(f *mFill) {
	delete(m.fills, f.key)
	delete(m.byID, f.id)
	m.stats.Fills--
	if m.stats.TenantFills[f.key.tenant]--; m.stats.TenantFills[f.key.tenant] == 0 {
		delete(m.stats.TenantFills, f.key.tenant)
	}
}

func (m *model) endAll(f *mFill, k NoticeKind) {
	for len(f.waiters) > 0 {
		m.end(f, f.waiters[0], k)
	}
	m.remove(f)
}

func (m *model) failover(f *mFill) {
	if len(f.waiters) == 0 || int(f.turn) >= m.cfg.MaxTurns {
		m.endAll(f, Failed)
		m.stats.Failed++
		return
	}
	w := f.waiters[0]
	m.unwait(f, w)
	f.turn++
	f.owner, f.leader = w.owner, w
	f.deadline = m.now.Add(m.cfg.FillDeadline)
	w.state, w.turn = mPromoted, f.turn
	tok := m.token(f)
	m.tokens = append(m.tokens, tok)
	m.send(w, Notice{Kind: Promoted, Token: tok})
	m.stats.Promotions++
}

func (m *model) acquire(r Request, present bool) Result {
	if m.closed {
		m.stats.Denied++
		return Result{Outcome: Denied}
	}
	if present {
		m.stats.Hits++
		return Result{Outcome: Hit}
	}
	fk := flightKey{r.Tenant, r.Namespace, r.Key}
	f := m.fills[fk]
	if f == nil {
		if len(m.fills) >= m.cfg.MaxFills {
			m.stats.Denied++
			m.stats.DeniedFills++
			return Result{Outcome: Denied}
		}
		if m.stats.TenantFills[r.Tenant] >= m.cfg.TenantFills {
			m.stats.Denied++
			m.stats.DeniedTenantFills++
			return Result{Outcome: Denied}
		}
		m.stats.TenantFills[r.Tenant]++
		m.nextID++
		f = &mFill{id: m.nextID, key: fk, epoch: m.epoch, turn: 1, owner: r.Owner, deadline: m.now.Add(m.cfg.FillDeadline)}
		m.fills[fk], m.byID[f.id] = f, f
		m.stats.Fills++
		m.stats.Leads++
		tok := m.token(f)
		m.tokens = append(m.tokens, tok)
		return Result{Outcome: Lead, Token: tok}
	}
	if m.stats.Credits[r.Tenant] >= m.cfg.JoinCredits {
		m.stats.Denied++
		m.stats.DeniedCredits++
		return Result{Outcome: Denied}
	}
	w := &mWaiter{tenant: r.Tenant, owner: r.Owner, fill: f.id}
	f.waiters = append(f.waiters, w)
	m.waiters = append(m.waiters, w)
	m.stats.Credits[r.Tenant]++
	m.stats.CreditsInUse++
	m.stats.Waiters++
	m.stats.Joins++
	return Result{Outcome: Joined}
}

// leaderOf is what Finish, Fail and Check answer before acting.
func (m *model) leaderOf(t Token) (*mFill, error) {
	if m.closed {
		return nil, ErrClosed
	}
	if t.Shard != m.cfg.Shard {
		return nil, ErrWrongShard
	}
	if t.Epoch < m.epoch {
		return nil, ErrStaleEpoch
	}
	f := m.byID[t.Fill]
	if f == nil || t.Epoch != f.epoch || t.Turn != f.turn {
		return nil, ErrNotLeader
	}
	return f, nil
}

func (m *model) finish(t Token) error {
	f, err := m.leaderOf(t)
	if err == nil {
		m.endAll(f, Finished)
		m.stats.Finished++
	}
	return err
}

func (m *model) fail(t Token) error {
	f, err := m.leaderOf(t)
	if err == nil {
		m.failover(f)
	}
	return err
}

func (m *model) cancel(w *mWaiter) {
	switch w.state {
	case mWaiting:
		m.end(m.byID[w.fill], w, Failed)
		m.stats.Withdrawn++
	case mPromoted:
		w.state = mDone
		if w.expect != nil {
			w.expect = &Notice{Kind: Failed}
			m.stats.Withdrawn++
			if f := m.byID[w.fill]; f != nil && f.leader == w && f.turn == w.turn {
				m.failover(f)
			}
		}
	}
}

func (m *model) advance(to Epoch) (int, error) {
	switch {
	case m.closed:
		return 0, ErrClosed
	case m.epoch == math.MaxUint64:
		return 0, ErrEpochOverflow
	case to <= m.epoch:
		return 0, ErrEpochRegress
	}
	m.epoch = to
	n := 0
	for _, f := range m.fills {
		if f.epoch < to {
			m.endAll(f, Fenced)
			m.stats.Fenced++
			n++
		}
	}
	return n, nil
}

func (m *model) expire() int {
	if m.closed {
		return 0
	}
	n := 0
	for _, f := range m.fills {
		if !f.deadline.After(m.now) {
			m.failover(f)
			n++
		}
	}
	m.stats.Expired += uint64(n)
	return n
}

func (m *model) leave(owner uint64) {
	if m.closed {
		return
	}
	for _, f := range m.fills {
		for _, w := range slices.Clone(f.waiters) {
			if w.owner == owner {
				m.end(f, w, Failed)
				m.stats.Withdrawn++
			}
		}
		if f.owner == owner {
			m.failover(f)
		}
	}
}

func (m *model) close() {
	if m.closed {
		return
	}
	m.closed = true
	for _, f := range m.fills {
		m.endAll(f, Failed)
	}
}

// chooser picks numbers for the model run: from a PRNG, or from fuzz bytes.
type chooser func(n int) int

// runModel runs steps random operations and checks the directory against the
// model after each.
func runModel(t testing.TB, cfg Config, steps int, pick chooser) {
	m := newModel(t, cfg)
	defer m.d.Close()
	tenants := []string{"a", "b"}
	keys := []string{"k0", "k1", "k2"}
	randReq := func() Request {
		r := req(tenants[pick(len(tenants))], keys[pick(len(keys))], uint64(1+pick(4)))
		if pick(8) == 0 {
			r.Namespace = nsDigest("ns1")
		}
		return r
	}
	randToken := func() Token {
		if len(m.tokens) == 0 {
			return Token{Fill: 1, Epoch: m.epoch, Turn: 1}
		}
		tok := m.tokens[len(m.tokens)-1-pick(min(len(m.tokens), 6))] // mostly recent ones
		switch pick(12) {
		case 0:
			tok.Turn++
		case 1:
			tok.Epoch++
		case 2:
			tok.Shard++
		case 3:
			tok.Fill++
		}
		return tok
	}
	for step := range steps {
		var what string
		switch op := pick(20); {
		case op < 7:
			r, present := randReq(), pick(8) == 0
			want := m.acquire(r, present)
			called := false
			res := m.d.Acquire(r, func() bool { called = true; return present })
			what = fmt.Sprintf("acquire %s owner=%d present=%v → %v", r.Tenant, r.Owner, present, res.Outcome)
			if res.Outcome != want.Outcome || res.Token != want.Token || (res.Waiter != nil) != (want.Outcome == Joined) {
				t.Fatalf("step %d: %s, model %+v", step, what, want)
			}
			if want.Outcome == Joined {
				mw := m.waiters[len(m.waiters)-1]
				mw.w = res.Waiter
				if res.Waiter.Fill() != mw.fill {
					t.Fatalf("step %d: joined fill %d, model %d", step, res.Waiter.Fill(), mw.fill)
				}
			}
			if called == m.closed {
				t.Fatalf("step %d: present called=%v, closed=%v", step, called, m.closed)
			}
		case op < 10:
			tok := randToken()
			var err, want error
			if pick(2) == 0 {
				want, err = m.finish(tok), m.d.Finish(tok)
				what = fmt.Sprintf("finish %+v", tok)
			} else {
				want, err = m.fail(tok), m.d.Fail(tok)
				what = fmt.Sprintf("fail %+v", tok)
			}
			if !errors.Is(err, want) || (want == nil) != (err == nil) {
				t.Fatalf("step %d: %s: %v, model %v", step, what, err, want)
			}
		case op < 12 && len(m.waiters) > 0:
			w := m.waiters[pick(len(m.waiters))]
			m.cancel(w)
			w.w.Cancel()
			what = "cancel"
		case op < 15 && len(m.waiters) > 0:
			w := m.waiters[pick(len(m.waiters))]
			what = "read"
			select {
			case n := <-w.w.C():
				if w.expect == nil || n != *w.expect {
					t.Fatalf("step %d: read %+v, model expects %v", step, n, w.expect)
				}
				w.expect = nil
				w.read++
			default:
				if w.expect != nil {
					t.Fatalf("step %d: no notice, model expects %+v", step, *w.expect)
				}
			}
		case op < 16:
			to := m.epoch + Epoch(pick(3)) // 0: refused
			if pick(40) == 0 {
				to = math.MaxUint64 - Epoch(pick(2))
			}
			wantN, wantErr := m.advance(to)
			n, err := m.d.AdvanceEpoch(to)
			what = fmt.Sprintf("advance-epoch %d → %d %v", to, n, err)
			if n != wantN || !errors.Is(err, wantErr) || (wantErr == nil) != (err == nil) {
				t.Fatalf("step %d: %s, model %d %v", step, what, wantN, wantErr)
			}
		case op < 18:
			m.now = m.now.Add(time.Duration(pick(4)) * m.cfg.FillDeadline / 4)
			want := m.expire()
			n := m.d.Expire()
			what = fmt.Sprintf("expire → %d", n)
			if n != want {
				t.Fatalf("step %d: %s, model %d", step, what, want)
			}
		case op < 19:
			owner := uint64(1 + pick(4))
			m.leave(owner)
			m.d.LeaveOwner(owner)
			what = fmt.Sprintf("leave %d", owner)
		default:
			if pick(50) == 0 {
				m.close()
				m.d.Close()
				what = "close"
			}
		}
		m.check(step, what)
	}
	if testing.Verbose() {
		t.Logf("before close: %+v", m.stats)
	}
	m.close()
	m.d.Close()
	m.check(steps, "final close")
	for i, w := range m.waiters {
		select {
		case n := <-w.w.C():
			if w.expect == nil || n != *w.expect {
				t.Fatalf("waiter %d: final notice %+v, model %v", i, n, w.expect)
			}
			w.read++
		default:
		}
		if w.read != 1 || len(w.w.C()) != 0 {
			t.Fatalf("waiter %d got %d notices", i, w.read+len(w.w.C()))
		}
	}
}

// check compares stats, pending notices and leadership with the model.
func (m *model) check(step int, what string) {
	m.t.Helper()
	st := m.d.Stats()
	m.stats.Epoch = m.epoch
	if st.Credits == nil {
		st.Credits = map[string]int{}
	}
	if st.TenantFills == nil {
		st.TenantFills = map[string]int{}
	}
	if fmt.Sprint(st) != fmt.Sprint(m.stats) {
		m.t.Fatalf("step %d (%s): stats\n have %+v\nmodel %+v", step, what, st, m.stats)
	}
	if st.Waiters != st.CreditsInUse {
		m.t.Fatalf("step %d: waiters %d != credits %d", step, st.Waiters, st.CreditsInUse)
	}
	for i, w := range m.waiters {
		if want := 0; w.expect != nil {
			want = 1
			if len(w.w.C()) != want {
				m.t.Fatalf("step %d (%s): waiter %d has %d notices pending, model %d", step, what, i, len(w.w.C()), want)
			}
		} else if len(w.w.C()) != 0 {
			m.t.Fatalf("step %d (%s): waiter %d has an unexpected notice", step, what, i)
		}
	}
	// One live leader per fill: exactly the model's current tokens pass.
	live := map[FillID]int{}
	for _, tok := range m.tokens {
		_, want := m.leaderOf(tok)
		if err := m.d.Check(tok); !errors.Is(err, want) || (want == nil) != (err == nil) {
			m.t.Fatalf("step %d (%s): Check(%+v) = %v, model %v", step, what, tok, err, want)
		} else if err == nil {
			live[tok.Fill]++
		}
	}
	for id, n := range live {
		if n != 1 {
			m.t.Fatalf("step %d: fill %d has %d live leaders", step, id, n)
		}
	}
	if len(live) != len(m.fills) && !m.closed {
		m.t.Fatalf("step %d: %d fills with a live leader, model has %d fills", step, len(live), len(m.fills))
	}
}

func TestModel(t *testing.T) {
	configs := []Config{
		{MaxTurns: 3, JoinCredits: 3, MaxFills: 5, FillDeadline: 10 * time.Second, Stripes: 1},
		{MaxTurns: 2, JoinCredits: 2, MaxFills: 8, FillDeadline: time.Second, Stripes: 4, Shard: 7},
		{MaxTurns: 4, JoinCredits: 6, MaxFills: 3, FillDeadline: time.Minute, Epoch: math.MaxUint64 - 3},
		{MaxTurns: 3, JoinCredits: 3, MaxFills: 4, TenantFills: 4, FillDeadline: time.Second, Stripes: 2},
	}
	seeds := 40
	if testing.Short() {
		seeds = 5
	}
	for ci, cfg := range configs {
		for seed := range seeds {
			t.Run(fmt.Sprintf("config=%d/seed=%d", ci, seed), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(uint64(seed), uint64(ci)))
				runModel(t, cfg, 400, rng.IntN)
			})
		}
	}
}

// FuzzModel runs the model test with operations chosen by the fuzzer's
// bytes; the seed corpus is a few byte strings.
func FuzzModel(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19})
	f.Add([]byte("acquire acquire fail cancel expire leave close"))
	f.Fuzz(func(t *testing.T, data []byte) {
		i := 0
		pick := func(n int) int {
			if i >= len(data) {
				return 0
			}
			b := int(data[i])
			i++
			return b % n
		}
		cfg := Config{MaxTurns: 3, JoinCredits: 2, MaxFills: 4, FillDeadline: time.Second, Stripes: 2}
		runModel(t, cfg, min(len(data), 2000), pick)
	})
}
