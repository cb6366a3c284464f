package directory

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"testing"
	"time"
)

// A single-node cluster is one shard: every key lives in the one directory,
// whatever stripe it hashes to, and every token names shard 0.
func TestSingleNodeIsOneShard(t *testing.T) {
	for _, stripes := range []int{1, 64} {
		t.Run(fmt.Sprintf("stripes=%d", stripes), func(t *testing.T) {
			d := newDir(t, Config{Stripes: stripes})
			if d.Shard() != 0 {
				t.Fatalf("default shard %d, want 0", d.Shard())
			}
			const keys = 256
			toks := make([]Token, keys)
			ws := make([]*Waiter, keys)
			for i := range keys {
				toks[i] = lead(t, d, req("a", fmt.Sprint(i), 1))
				if toks[i].Shard != 0 || toks[i].Turn != 1 || toks[i].Epoch != 1 {
					t.Fatalf("token %+v", toks[i])
				}
				ws[i] = join(t, d, req("a", fmt.Sprint(i), 2))
				if ws[i].Fill() != toks[i].Fill {
					t.Fatalf("key %d: joined fill %d, leads %d", i, ws[i].Fill(), toks[i].Fill)
				}
			}
			if st := d.Stats(); st.Fills != keys || st.Waiters != keys {
				t.Fatalf("stats %+v", st)
			}
			other := toks[0]
			other.Shard = 1
			wantErr(t, d.Check(other), ErrWrongShard)
			for i := range keys {
				wantErr(t, d.Finish(toks[i]), nil)
				wantNotice(t, ws[i], Finished)
			}
			wantCredits(t, d, nil)
			if st := d.Stats(); st.Fills != 0 || st.Finished != keys {
				t.Fatalf("stats %+v", st)
			}
		})
	}
}

// A join charges one credit, released once on the notice; waiters that stay
// through a promotion are not charged again, and the promoted waiter's
// credit is released by its Promoted notice.
func TestJoinChargesCreditsOnce(t *testing.T) {
	d := newDir(t, Config{JoinCredits: 3})
	tok := lead(t, d, req("a", "k", 1))
	w1 := join(t, d, req("a", "k", 2))
	w2 := join(t, d, req("a", "k", 3))
	w3 := join(t, d, req("a", "k", 4))
	wantCredits(t, d, map[string]int{"a": 3})
	if res := d.Acquire(req("a", "k", 5), nil); res.Outcome != Denied {
		t.Fatalf("fourth join: %v, want Denied", res.Outcome)
	}

	wantErr(t, d.Fail(tok), nil)
	p := wantNotice(t, w1, Promoted)
	wantCredits(t, d, map[string]int{"a": 2}) // w1 released; w2, w3 not re-charged
	w4 := join(t, d, req("a", "k", 5))
	wantCredits(t, d, map[string]int{"a": 3})

	wantErr(t, d.Fail(p.Token), nil)
	p = wantNotice(t, w2, Promoted)
	wantCredits(t, d, map[string]int{"a": 2})
	wantErr(t, d.Finish(p.Token), nil)
	wantNotice(t, w3, Finished)
	wantNotice(t, w4, Finished)
	wantCredits(t, d, nil)
	if st := d.Stats(); st.Joins != 4 || st.DeniedCredits != 1 || st.Promotions != 2 {
		t.Fatalf("stats %+v", st)
	}
}

// Two directories of different shards never share a flight: equal requests
// lead in each, and a token of one is refused by the other.
func TestTwoShardsDoNotShareFlights(t *testing.T) {
	d0 := newDir(t, Config{Shard: 0})
	d1 := newDir(t, Config{Shard: 1})
	t0 := lead(t, d0, req("a", "k", 1))
	t1 := lead(t, d1, req("a", "k", 1))
	if t0.Shard != 0 || t1.Shard != 1 || t0.Fill != t1.Fill {
		t.Fatalf("tokens %+v %+v: want equal fill ids in different shards", t0, t1)
	}
	w0 := join(t, d0, req("a", "k", 2))
	w1 := join(t, d1, req("a", "k", 2))
	for _, f := range []func(Token) error{d1.Finish, d1.Fail, d1.Check} {
		wantErr(t, f(t0), ErrWrongShard)
	}
	for _, f := range []func(Token) error{d0.Finish, d0.Fail, d0.Check} {
		wantErr(t, f(t1), ErrWrongShard)
	}
	wantNoNotice(t, w0)
	wantNoNotice(t, w1)
	wantErr(t, d0.Finish(t0), nil)
	wantNotice(t, w0, Finished)
	wantNoNotice(t, w1)
	wantErr(t, d1.Check(t1), nil)
	wantErr(t, d1.Finish(t1), nil)
	wantNotice(t, w1, Finished)
}

// An epoch change fences fills of the older epoch: waiters get Fenced, the
// credits come back, the leader's Finish gets ErrStaleEpoch. The subtests
// also cover a fill found stale in the window between the epoch store and
// the sweep (by Finish, Fail and Acquire).
func TestStaleEpochFencesAndReleasesCredits(t *testing.T) {
	t.Run("advance", func(t *testing.T) {
		d := newDir(t, Config{})
		tok := lead(t, d, req("a", "k", 1))
		w1 := join(t, d, req("a", "k", 2))
		w2 := join(t, d, req("a", "k", 3))
		tokB := lead(t, d, req("b", "k", 4))
		wB := join(t, d, req("b", "k", 5))
		wantCredits(t, d, map[string]int{"a": 2, "b": 1})
		n, err := d.AdvanceEpoch(2)
		if err != nil || n != 2 {
			t.Fatalf("AdvanceEpoch: %d, %v", n, err)
		}
		for _, w := range []*Waiter{w1, w2, wB} {
			wantNotice(t, w, Fenced)
		}
		wantCredits(t, d, nil)
		wantErr(t, d.Finish(tok), ErrStaleEpoch)
		wantErr(t, d.Fail(tokB), ErrStaleEpoch)
		wantErr(t, d.Check(tok), ErrStaleEpoch)
		if st := d.Stats(); st.Fills != 0 || st.Fenced != 2 || st.Epoch != 2 {
			t.Fatalf("stats %+v", st)
		}
		// A retry under the new epoch is a new fill.
		tok2 := lead(t, d, req("a", "k", 1))
		if tok2.Epoch != 2 || tok2.Fill == tok.Fill {
			t.Fatalf("retry token %+v after %+v", tok2, tok)
		}
	})
	// The epoch is stored before the sweep; a fill met in between is fenced
	// by whoever meets it first.
	storeOnly := func(d *Directory, to Epoch) { d.epoch.Store(uint64(to)) }
	for _, tc := range []struct {
		name string
		meet func(t *testing.T, d *Directory, tok Token)
	}{
		{"finish", func(t *testing.T, d *Directory, tok Token) { wantErr(t, d.Finish(tok), ErrStaleEpoch) }},
		{"fail", func(t *testing.T, d *Directory, tok Token) { wantErr(t, d.Fail(tok), ErrStaleEpoch) }},
		{"acquire", func(t *testing.T, d *Directory, tok Token) {
			tok2 := lead(t, d, req("a", "k", 9))
			if tok2.Epoch != 2 || tok2.Fill == tok.Fill {
				t.Fatalf("token %+v", tok2)
			}
			wantErr(t, d.Finish(tok), ErrStaleEpoch)
		}},
	} {
		t.Run("lazy-"+tc.name, func(t *testing.T) {
			d := newDir(t, Config{})
			tok := lead(t, d, req("a", "k", 1))
			w := join(t, d, req("a", "k", 2))
			storeOnly(d, 2)
			wantErr(t, d.Check(tok), ErrStaleEpoch) // Check changes nothing
			wantNoNotice(t, w)
			tc.meet(t, d, tok)
			wantNotice(t, w, Fenced)
			wantCredits(t, d, nil)
			live := d.Stats().Fills // the old fill is gone; only a retry's is live
			if n, err := d.AdvanceEpoch(3); err != nil || n != live {
				t.Fatalf("sweep: %d, %v", n, err)
			}
		})
	}
}

// Finished, Failed, Fenced and Promoted are four distinct notices, and a
// Notice has no room for a payload: a kind, and a token only for Promoted.
func TestNoticesAreDistinctAndCarryNoPayload(t *testing.T) {
	kinds := map[NoticeKind]bool{Finished: true, Failed: true, Fenced: true, Promoted: true}
	if len(kinds) != 4 || kinds[0] {
		t.Fatalf("notice kinds are not distinct and non-zero: %v", kinds)
	}
	nt := reflect.TypeOf(Notice{})
	if nt.NumField() != 2 || nt.Field(0).Name != "Kind" || nt.Field(1).Type != reflect.TypeOf(Token{}) {
		t.Fatalf("Notice has fields beyond Kind and Token: %v", nt)
	}
	if !reflect.TypeOf(Token{}).Comparable() || reflect.TypeOf(Token{}).Size() > 32 {
		t.Fatal("Token should be a small value, not a carrier of data")
	}

	d := newDir(t, Config{MaxTurns: 2})
	seen := map[NoticeKind]Notice{}
	// Finished
	tok := lead(t, d, req("a", "fin", 1))
	w := join(t, d, req("a", "fin", 2))
	wantErr(t, d.Finish(tok), nil)
	seen[Finished] = wantNotice(t, w, Finished)
	// Promoted, then Failed when the turns are spent
	tok = lead(t, d, req("a", "fail", 1))
	wp := join(t, d, req("a", "fail", 2))
	wf := join(t, d, req("a", "fail", 3))
	wantErr(t, d.Fail(tok), nil)
	seen[Promoted] = wantNotice(t, wp, Promoted)
	wantErr(t, d.Fail(seen[Promoted].Token), nil)
	seen[Failed] = wantNotice(t, wf, Failed)
	// Fenced
	lead(t, d, req("a", "fence", 1))
	w = join(t, d, req("a", "fence", 2))
	if _, err := d.AdvanceEpoch(2); err != nil {
		t.Fatal(err)
	}
	seen[Fenced] = wantNotice(t, w, Fenced)

	for k, n := range seen {
		if n.Kind != k {
			t.Fatalf("%v delivered as %v", k, n.Kind)
		}
		if k == Promoted {
			if n.Token.Turn != 2 || n.Token.Fill == 0 || n.Token.Epoch != 1 {
				t.Fatalf("promoted token %+v", n.Token)
			}
		} else if n != (Notice{Kind: k}) {
			t.Fatalf("%v notice %+v carries more than its kind", k, n)
		}
	}
	if len(seen) != 4 {
		t.Fatalf("saw %d kinds", len(seen))
	}
}

// At the largest epoch AdvanceEpoch fails and nothing changes: the live fill
// keeps its leader and waiters and finishes normally.
func TestEpochOverflowKeepsFill(t *testing.T) {
	d := newDir(t, Config{Epoch: math.MaxUint64 - 1})
	old := lead(t, d, req("a", "k", 1))
	if n, err := d.AdvanceEpoch(math.MaxUint64); err != nil || n != 1 {
		t.Fatalf("AdvanceEpoch(max): %d, %v", n, err)
	}
	wantErr(t, d.Finish(old), ErrStaleEpoch)
	tok := lead(t, d, req("a", "k", 1))
	w := join(t, d, req("a", "k", 2))
	before := d.Stats()
	for _, to := range []Epoch{math.MaxUint64, 0, 5} {
		n, err := d.AdvanceEpoch(to)
		wantErr(t, err, ErrEpochOverflow)
		if n != 0 {
			t.Fatalf("fenced %d on overflow", n)
		}
	}
	if d.Epoch() != math.MaxUint64 || !reflect.DeepEqual(d.Stats(), before) {
		t.Fatalf("overflow changed the directory: %+v, was %+v", d.Stats(), before)
	}
	wantNoNotice(t, w)
	wantErr(t, d.Check(tok), nil)
	wantErr(t, d.Finish(tok), nil)
	wantNotice(t, w, Finished)

	// Below the maximum, not advancing is refused the same way.
	d2 := newDir(t, Config{Epoch: 5})
	tok = lead(t, d2, req("a", "k", 1))
	for _, to := range []Epoch{5, 4, 0} {
		_, err := d2.AdvanceEpoch(to)
		wantErr(t, err, ErrEpochRegress)
	}
	wantErr(t, d2.Check(tok), nil)
}

// Another tenant never joins a fill, even for an equal key and namespace:
// it leads its own.
func TestOtherTenantCannotJoin(t *testing.T) {
	d := newDir(t, Config{})
	ta := lead(t, d, req("a", "k", 1))
	res := d.Acquire(req("b", "k", 2), nil)
	if res.Outcome != Lead || res.Token.Fill == ta.Fill {
		t.Fatalf("tenant b: %v %+v, want its own Lead", res.Outcome, res.Token)
	}
	tb := res.Token
	wa := join(t, d, req("a", "k", 3))
	wb := join(t, d, req("b", "k", 4))
	if wa.Fill() != ta.Fill || wb.Fill() != tb.Fill {
		t.Fatalf("joined %d and %d", wa.Fill(), wb.Fill())
	}
	// The empty tenant is a tenant too.
	if res := d.Acquire(req("", "k", 5), nil); res.Outcome != Lead {
		t.Fatalf("tenant \"\": %v", res.Outcome)
	}
	wantErr(t, d.Fail(ta), nil)
	n := wantNotice(t, wa, Promoted)
	wantNoNotice(t, wb)
	wantErr(t, d.Finish(tb), nil)
	wantNotice(t, wb, Finished)
	wantErr(t, d.Check(n.Token), nil)
	wantCredits(t, d, nil)
}

// The pair of TestOtherTenantCannotJoin: the same tenant does join, so the
// isolation above is not trivially true.
func TestSameTenantJoins(t *testing.T) {
	d := newDir(t, Config{})
	ta := lead(t, d, req("a", "k", 1))
	for owner := uint64(2); owner < 10; owner++ {
		if w := join(t, d, req("a", "k", owner)); w.Fill() != ta.Fill {
			t.Fatalf("joined fill %d, want %d", w.Fill(), ta.Fill)
		}
	}
	// The leader's own session joining is a join too.
	join(t, d, req("a", "k", 1))
	if st := d.Stats(); st.Fills != 1 || st.Joins != 9 || st.Leads != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// A tenant out of credits is denied without touching the leader, the fill or
// its waiters; another tenant's credits are separate.
func TestQuotaDenialDoesNotDropLeader(t *testing.T) {
	d := newDir(t, Config{JoinCredits: 1})
	tok := lead(t, d, req("a", "k", 1))
	w := join(t, d, req("a", "k", 2))
	for range 3 {
		if res := d.Acquire(req("a", "k", 3), nil); res.Outcome != Denied || res.Waiter != nil {
			t.Fatalf("over quota: %+v", res)
		}
	}
	// Denied on another key too (credits are per tenant per shard), but a
	// new lead needs no credit.
	tok2 := lead(t, d, req("a", "k2", 1))
	if res := d.Acquire(req("a", "k2", 3), nil); res.Outcome != Denied {
		t.Fatalf("over quota on k2: %v", res.Outcome)
	}
	wb := func() *Waiter { lead(t, d, req("b", "k", 5)); return join(t, d, req("b", "k", 6)) }()
	wantErr(t, d.Check(tok), nil)
	wantNoNotice(t, w)
	if st := d.Stats(); st.Fills != 3 || st.DeniedCredits != 4 {
		t.Fatalf("stats %+v", st)
	}
	wantErr(t, d.Finish(tok), nil)
	wantNotice(t, w, Finished)
	wantErr(t, d.Finish(tok2), nil)
	wb.Cancel()
	wantCredits(t, d, nil)
	join(t, d, req("b", "k", 7))
}

// Fail promotes the next waiter (FIFO) with a fresh token; it is told to
// try, not handed the error, and the others keep waiting.
func TestFailurePromotesNextWaiter(t *testing.T) {
	d := newDir(t, Config{MaxTurns: 10})
	tok := lead(t, d, req("a", "k", 1))
	ws := make([]*Waiter, 4)
	for i := range ws {
		ws[i] = join(t, d, req("a", "k", uint64(10+i)))
	}
	for i := range 3 {
		wantErr(t, d.Fail(tok), nil)
		n := wantNotice(t, ws[i], Promoted)
		want := Token{Shard: 0, Fill: tok.Fill, Epoch: tok.Epoch, Turn: tok.Turn + 1}
		if n.Token != want {
			t.Fatalf("promoted token %+v, want %+v", n.Token, want)
		}
		for _, other := range ws[i+1:] {
			wantNoNotice(t, other)
		}
		// The failed turn is dead.
		wantErr(t, d.Finish(tok), ErrNotLeader)
		wantErr(t, d.Fail(tok), ErrNotLeader)
		tok = n.Token
	}
	wantErr(t, d.Finish(tok), nil)
	wantNotice(t, ws[3], Finished)
	if st := d.Stats(); st.Promotions != 3 || st.Failed != 0 || st.Finished != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// After MaxTurns leaders the remaining waiters get Failed.
func TestMaxTurnsFailsWaiters(t *testing.T) {
	for _, maxTurns := range []int{1, 2, 3} {
		t.Run(fmt.Sprintf("max=%d", maxTurns), func(t *testing.T) {
			d := newDir(t, Config{MaxTurns: maxTurns})
			tok := lead(t, d, req("a", "k", 1))
			ws := make([]*Waiter, 5)
			for i := range ws {
				ws[i] = join(t, d, req("a", "k", uint64(10+i)))
			}
			for i := range maxTurns - 1 {
				wantErr(t, d.Fail(tok), nil)
				tok = wantNotice(t, ws[i], Promoted).Token
			}
			wantErr(t, d.Fail(tok), nil)
			for _, w := range ws[maxTurns-1:] {
				wantNotice(t, w, Failed)
			}
			wantCredits(t, d, nil)
			if st := d.Stats(); st.Fills != 0 || st.Failed != 1 || st.Promotions != uint64(maxTurns-1) {
				t.Fatalf("stats %+v", st)
			}
			wantErr(t, d.Check(tok), ErrNotLeader)
		})
	}
}

// LeaveOwner: the departing session's waiters are withdrawn (credit back,
// Failed), and the fills it leads pass to the next waiter, never to itself.
func TestLeaderDisconnectPromotes(t *testing.T) {
	d := newDir(t, Config{})
	tok := lead(t, d, req("a", "k", 1))
	own := join(t, d, req("a", "k", 1)) // the leader's session also waits
	w2 := join(t, d, req("a", "k", 2))
	w3 := join(t, d, req("a", "k", 3))
	elsewhere := func() *Waiter { lead(t, d, req("a", "j", 2)); return join(t, d, req("a", "j", 1)) }()

	d.LeaveOwner(1)
	wantNotice(t, own, Failed)
	wantNotice(t, elsewhere, Failed)
	n := wantNotice(t, w2, Promoted)
	wantNoNotice(t, w3)
	wantErr(t, d.Check(tok), ErrNotLeader)
	wantErr(t, d.Check(n.Token), nil)
	wantCredits(t, d, map[string]int{"a": 1})

	d.LeaveOwner(2) // now leads k by promotion, and j from the start
	n3 := wantNotice(t, w3, Promoted)
	if n3.Token.Turn != 3 {
		t.Fatalf("token %+v", n3.Token)
	}
	wantErr(t, d.Finish(n3.Token), nil)
	if st := d.Stats(); st.Fills != 0 || st.Withdrawn != 2 || st.Promotions != 2 || st.Failed != 1 {
		t.Fatalf("stats %+v", st)
	}
	wantCredits(t, d, nil)
}

// Cancel releases the credit at once, hands the waiter a Failed notice and
// is idempotent; the leader is unaffected.
func TestCancelReleasesCredit(t *testing.T) {
	d := newDir(t, Config{JoinCredits: 1})
	tok := lead(t, d, req("a", "k", 1))
	w := join(t, d, req("a", "k", 2))
	wantCredits(t, d, map[string]int{"a": 1})
	w.Cancel()
	wantCredits(t, d, nil)
	w.Cancel()
	wantCredits(t, d, nil)
	wantNotice(t, w, Failed)
	wantNoNotice(t, w)
	w2 := join(t, d, req("a", "k", 3))
	wantErr(t, d.Check(tok), nil)
	wantErr(t, d.Finish(tok), nil)
	wantNotice(t, w2, Finished)
	w2.Cancel() // after its notice: nothing
	wantNoNotice(t, w2)
	if st := d.Stats(); st.Withdrawn != 1 || st.Finished != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// Cancel of a waiter promoted but not yet told hands the turn on; once the
// Promoted notice was read, Cancel leaves the lead alone.
func TestCancelAfterPromotionHandsOn(t *testing.T) {
	t.Run("unread", func(t *testing.T) {
		d := newDir(t, Config{})
		tok := lead(t, d, req("a", "k", 1))
		w1 := join(t, d, req("a", "k", 2))
		w2 := join(t, d, req("a", "k", 3))
		wantErr(t, d.Fail(tok), nil)
		w1.Cancel()
		w1.Cancel()
		wantNotice(t, w1, Failed) // the Promoted notice was taken back
		wantNoNotice(t, w1)
		n := wantNotice(t, w2, Promoted)
		if n.Token.Turn != 3 {
			t.Fatalf("token %+v", n.Token)
		}
		wantErr(t, d.Check(Token{Fill: tok.Fill, Epoch: tok.Epoch, Turn: 2}), ErrNotLeader)
		wantErr(t, d.Finish(n.Token), nil)
		wantCredits(t, d, nil)
	})
	t.Run("read", func(t *testing.T) {
		d := newDir(t, Config{})
		tok := lead(t, d, req("a", "k", 1))
		w1 := join(t, d, req("a", "k", 2))
		w2 := join(t, d, req("a", "k", 3))
		wantErr(t, d.Fail(tok), nil)
		n := wantNotice(t, w1, Promoted)
		w1.Cancel() // e.g. a deferred Cancel: w1 still leads
		wantErr(t, d.Check(n.Token), nil)
		wantNoNotice(t, w2)
		wantErr(t, d.Finish(n.Token), nil)
		wantNotice(t, w2, Finished)
	})
	t.Run("last", func(t *testing.T) {
		d := newDir(t, Config{})
		tok := lead(t, d, req("a", "k", 1))
		w1 := join(t, d, req("a", "k", 2))
		wantErr(t, d.Fail(tok), nil)
		w1.Cancel() // nobody left to hand on to: the fill ends
		wantNotice(t, w1, Failed)
		if st := d.Stats(); st.Fills != 0 || st.Failed != 1 {
			t.Fatalf("stats %+v", st)
		}
	})
}

// Close fails every waiter; afterwards nothing is accepted.
func TestCloseFailsWaiters(t *testing.T) {
	d := newDir(t, Config{})
	var ws []*Waiter
	var toks []Token
	for i := range 10 {
		k := fmt.Sprint(i)
		toks = append(toks, lead(t, d, req("a", k, 1)))
		ws = append(ws, join(t, d, req("a", k, 2)), join(t, d, req("a", k, 3)))
	}
	wantErr(t, d.Fail(toks[0]), nil)
	promoted := ws[0]
	ws = ws[1:]
	d.Close()
	d.Close()
	for _, w := range ws {
		wantNotice(t, w, Failed)
	}
	wantNotice(t, promoted, Promoted)
	wantCredits(t, d, nil)
	if res := d.Acquire(req("a", "new", 1), func() bool { t.Fatal("present called after Close"); return false }); res.Outcome != Denied {
		t.Fatalf("Acquire after Close: %v", res.Outcome)
	}
	wantErr(t, d.Finish(toks[1]), ErrClosed)
	wantErr(t, d.Fail(toks[1]), ErrClosed)
	wantErr(t, d.Check(toks[1]), ErrClosed)
	if _, err := d.AdvanceEpoch(2); err != ErrClosed {
		t.Fatalf("AdvanceEpoch after Close: %v", err)
	}
	if n := d.Expire(); n != 0 {
		t.Fatalf("Expire after Close: %d", n)
	}
	if _, ok := d.NextDeadline(); ok {
		t.Fatal("deadline after Close")
	}
	d.LeaveOwner(1)
	if st := d.Stats(); st.Fills != 0 || st.Waiters != 0 {
		t.Fatalf("stats %+v", st)
	}
}

func TestNewConfig(t *testing.T) {
	d, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	c := d.cfg
	if c.Epoch != 1 || c.FillDeadline != 10*time.Second || c.MaxTurns != 3 || c.JoinCredits != 4096 ||
		c.MaxFills != 65536 || c.Stripes != 64 || c.Now == nil || d.Epoch() != 1 {
		t.Fatalf("defaults %+v", c)
	}
	for _, cfg := range []Config{{FillDeadline: -1}, {MaxTurns: -1}, {JoinCredits: -1}, {MaxFills: -1}, {Stripes: -1}, {Stripes: 5000}} {
		if _, err := New(cfg); err == nil || !errors.Is(err, ErrInvalidConfig) {
			t.Fatalf("New(%+v): %v", cfg, err)
		}
	}
	for in, want := range map[int]int{1: 1, 3: 4, 64: 64, 65: 128} {
		d, err := New(Config{Stripes: in})
		if err != nil || len(d.stripes) != want {
			t.Fatalf("Stripes %d: %v, %d stripes", in, err, len(d.stripes))
		}
	}
}

// Publish ends a live fill whose block a plain PUT stored: every waiter is
// told Finished, the leader's token no longer finishes anything, and only
// the flight of the same tenant, namespace and key is touched.
func TestPublishFinishesTheFlight(t *testing.T) {
	d := newDir(t, Config{})
	ta := lead(t, d, req("a", "k", 1))
	w1, w2 := join(t, d, req("a", "k", 2)), join(t, d, req("a", "k", 3))
	tb := lead(t, d, req("b", "k", 4))
	wb := join(t, d, req("b", "k", 5))
	other := lead(t, d, req("a", "other", 6))

	if d.Publish("a", nsDigest("ns1"), blockKey("k")) {
		t.Fatal("Publish of another namespace ended a fill")
	}
	if !d.Publish("a", nsDigest("ns0"), blockKey("k")) {
		t.Fatal("Publish did not end the live fill")
	}
	wantNotice(t, w1, Finished)
	wantNotice(t, w2, Finished)
	wantNoNotice(t, wb)
	wantErr(t, d.Finish(ta), ErrNotLeader)
	wantErr(t, d.Fail(ta), ErrNotLeader)
	wantErr(t, d.Check(tb), nil)
	wantErr(t, d.Check(other), nil)
	if d.Publish("a", nsDigest("ns0"), blockKey("k")) {
		t.Fatal("a second Publish found a fill")
	}
	if res := d.Acquire(req("a", "k", 7), func() bool { return true }); res.Outcome != Hit {
		t.Fatalf("Acquire after Publish: %v, want Hit", res.Outcome)
	}
	st := d.Stats()
	if st.Published != 1 || st.Finished != 1 || st.Fills != 2 || st.Waiters != 1 {
		t.Fatalf("stats %+v", st)
	}
	wantCredits(t, d, map[string]int{"b": 1})
	if st.TenantFills["a"] != 1 || st.TenantFills["b"] != 1 {
		t.Fatalf("fills per tenant %v", st.TenantFills)
	}
}

// A fill of an older epoch is fenced by Publish, as by any other call that
// finds it stale, and its waiters learn Fenced, not Finished.
func TestPublishFencesStaleFill(t *testing.T) {
	d := newDir(t, Config{})
	lead(t, d, req("a", "k", 1))
	w := join(t, d, req("a", "k", 2))
	d.epoch.Store(uint64(d.Epoch()) + 1) // advanced, not swept yet
	if d.Publish("a", nsDigest("ns0"), blockKey("k")) {
		t.Fatal("Publish finished a stale fill")
	}
	wantNotice(t, w, Fenced)
	wantCredits(t, d, nil)
	d.Close()
	if d.Publish("a", nsDigest("ns0"), blockKey("k")) {
		t.Fatal("Publish after Close found a fill")
	}
}
