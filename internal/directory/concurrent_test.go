package directory

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// expirer runs Expire when NextDeadline says, the way the server does,
// until stop is closed. Inside a synctest bubble its timers are fake.
func expirer(d *Directory, stop <-chan struct{}) {
	for {
		wait := time.Hour
		if dl, ok := d.NextDeadline(); ok {
			wait = max(time.Until(dl), 0)
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
			d.Expire()
		case <-stop:
			t.Stop()
			return
		}
	}
}

// A silent leader is failed over at its deadline; each promoted waiter gets
// a fresh deadline; after MaxTurns silent leaders the last waiter gets
// Failed. Times are exact because the clock is synctest's.
func TestFillDeadlineExpires(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const deadline = 10 * time.Second
		d := newDir(t, Config{FillDeadline: deadline, MaxTurns: 3})
		start := time.Now()
		lead(t, d, req("a", "k", 1)) // never finishes
		// The expirer starts once the fill exists: this expirer has no kick
		// for a new leader (the server's has), so one started first could
		// read "no deadline" and sleep its hour (seen under CPU load).
		stop := make(chan struct{})
		done := make(chan struct{})
		go func() { expirer(d, stop); close(done) }()
		defer func() { close(stop); <-done }()
		type event struct {
			owner uint64
			kind  NoticeKind
			at    time.Duration
		}
		events := make(chan event, 3)
		var wg sync.WaitGroup
		for owner := uint64(2); owner <= 4; owner++ {
			w := join(t, d, req("a", "k", owner))
			wg.Go(func() {
				n := <-w.C() // promoted leaders stay silent too
				events <- event{owner, n.Kind, time.Since(start)}
			})
		}
		if dl, ok := d.NextDeadline(); !ok || !dl.Equal(start.Add(deadline)) {
			t.Fatalf("NextDeadline %v %v", dl, ok)
		}
		wg.Wait()
		close(events)
		want := []event{{2, Promoted, deadline}, {3, Promoted, 2 * deadline}, {4, Failed, 3 * deadline}}
		i := 0
		for e := range events {
			if e != want[i] {
				t.Fatalf("event %d: %+v, want %+v", i, e, want[i])
			}
			i++
		}
		synctest.Wait()
		if st := d.Stats(); st.Expired != 3 || st.Fills != 0 || st.Promotions != 2 || st.Failed != 1 {
			t.Fatalf("stats %+v", st)
		}
		if _, ok := d.NextDeadline(); ok {
			t.Fatal("deadline left")
		}
	})
}

// The stampede: 32 goroutines × 64 keys acquire at once. Exactly one Lead
// per key; the leaders Finish; every joiner gets Finished; all credits come
// back. The first round holds every leader until all acquires are in, so
// each key has exactly 31 joiners; the second lets leaders publish and
// finish at once, with present() turning late comers into hits.
func TestStampedeOneLeaderPerKey(t *testing.T) {
	const goroutines, keys = 32, 64
	for _, round := range []string{"all-join", "publish-while-joining"} {
		t.Run(round, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				d := newDir(t, Config{})
				var published [keys]atomic.Bool
				var leads, joins, hits, finished [keys]atomic.Int32
				var acquired sync.WaitGroup
				acquired.Add(goroutines)
				start := make(chan struct{})
				var wg sync.WaitGroup
				for g := range goroutines {
					wg.Go(func() {
						<-start
						var toks []Token
						var ws []*Waiter
						rng := rand.New(rand.NewPCG(uint64(g), 7))
						for _, k := range rng.Perm(keys) {
							r := req("tenant", fmt.Sprint(k), uint64(g))
							res := d.Acquire(r, published[k].Load)
							switch res.Outcome {
							case Lead:
								leads[k].Add(1)
								if round == "all-join" {
									toks = append(toks, res.Token)
									continue
								}
								published[k].Store(true) // the PUT, then Finish
								if err := d.Finish(res.Token); err != nil {
									t.Errorf("Finish: %v", err)
								}
							case Joined:
								joins[k].Add(1)
								ws = append(ws, res.Waiter)
							case Hit:
								hits[k].Add(1)
							default:
								t.Errorf("key %d: %v", k, res.Outcome)
							}
						}
						acquired.Done()
						acquired.Wait()
						for _, tok := range toks {
							if err := d.Finish(tok); err != nil {
								t.Errorf("Finish: %v", err)
							}
						}
						for _, w := range ws {
							if n := <-w.C(); n.Kind != Finished {
								t.Errorf("fill %d: %v", w.Fill(), n.Kind)
							}
							finished[0].Add(1)
						}
					})
				}
				close(start)
				wg.Wait()
				totalJoins := 0
				for k := range keys {
					if leads[k].Load() != 1 {
						t.Errorf("key %d: %d leads", k, leads[k].Load())
					}
					if n := leads[k].Load() + joins[k].Load() + hits[k].Load(); n != goroutines {
						t.Errorf("key %d: %d outcomes", k, n)
					}
					if round == "all-join" && joins[k].Load() != goroutines-1 {
						t.Errorf("key %d: %d joins", k, joins[k].Load())
					}
					totalJoins += int(joins[k].Load())
				}
				if int(finished[0].Load()) != totalJoins {
					t.Errorf("%d notices for %d joins", finished[0].Load(), totalJoins)
				}
				st := d.Stats()
				if st.Leads != keys || st.Finished != keys || st.Fills != 0 || int(st.Joins) != totalJoins {
					t.Errorf("stats %+v", st)
				}
				wantCredits(t, d, nil)
			})
		})
	}
}

// Churn: goroutines lead, join, finish, fail, cancel and leave at random
// while others advance the epoch and expire turns. Whatever the
// interleaving, every waiter gets exactly one notice and the credits return
// to zero. (The randomized model test checks the one-leader invariant.)
func TestConcurrentChurn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDir(t, Config{FillDeadline: time.Second, JoinCredits: 20, MaxFills: 16, Stripes: 4})
		const workers, ops = 8, 300
		var wg sync.WaitGroup
		var notices, joins atomic.Int64
		stop := make(chan struct{})
		bg := make(chan struct{})
		go func() { expirer(d, stop); close(bg) }()
		for g := range workers {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(g), 99))
				var mine []Token
				var waiting []*Waiter
				settle := func(n Notice) {
					notices.Add(1)
					if n.Kind == Promoted {
						mine = append(mine, n.Token)
					}
				}
				for range ops {
					switch op := rng.IntN(10); {
					case op < 4:
						res := d.Acquire(req(fmt.Sprint(rng.IntN(2)), fmt.Sprint(rng.IntN(6)), uint64(g)), nil)
						switch res.Outcome {
						case Lead:
							mine = append(mine, res.Token)
						case Joined:
							joins.Add(1)
							waiting = append(waiting, res.Waiter)
						}
					case op < 6 && len(mine) > 0:
						i := rng.IntN(len(mine))
						tok := mine[i]
						mine = append(mine[:i], mine[i+1:]...)
						if rng.IntN(2) == 0 {
							d.Finish(tok)
						} else {
							d.Fail(tok)
						}
					case op < 7 && len(waiting) > 0:
						waiting[rng.IntN(len(waiting))].Cancel()
					case op < 8 && g == 0:
						d.AdvanceEpoch(d.Epoch() + 1)
					case op < 9:
						<-time.After(time.Duration(rng.IntN(300)) * time.Millisecond) // the bubble's fake clock
					default:
						if rng.IntN(10) == 0 {
							d.LeaveOwner(uint64(g))
						}
					}
					// Collect what has arrived.
					kept := waiting[:0]
					for _, w := range waiting {
						select {
						case n := <-w.C():
							settle(n)
						default:
							kept = append(kept, w)
						}
					}
					waiting = kept
				}
				for _, tok := range mine {
					d.Fail(tok) // may promote someone else's waiter: they wait below
				}
				for _, w := range waiting {
					n := <-w.C() // nothing waits forever: expiry ends every turn
					settle(n)
				}
			})
		}
		wg.Wait()
		close(stop)
		<-bg
		// Promotions received at the very end may have left turns live;
		// nobody waits on them any more.
		d.Close()
		if notices.Load() != joins.Load() {
			t.Fatalf("%d notices for %d joins", notices.Load(), joins.Load())
		}
		t.Logf("stats %+v", d.Stats())
		wantCredits(t, d, nil)
	})
}

// AdvanceEpoch races with Acquire: when AdvanceEpoch(e) returns, no live
// fill is older than e (a fill is created either before the epoch store, and
// then swept, or after, with the new epoch), and every waiter of a fenced
// fill has its Fenced notice.
func TestEpochAdvanceRacesAcquire(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDir(t, Config{Stripes: 2})
		stop := make(chan struct{})
		progress := make(chan struct{}) // a worker finished an Acquire
		var wg sync.WaitGroup
		for g := range 4 {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(g), 5))
				for {
					select {
					case <-stop:
						return
					default:
					}
					res := d.Acquire(req("a", fmt.Sprint(rng.IntN(8)), uint64(g)), nil)
					select {
					case progress <- struct{}{}:
					case <-stop:
					}
					switch res.Outcome {
					case Joined:
						n := <-res.Waiter.C() // Failed only from the final Close
						if n.Kind == Promoted {
							t.Errorf("notice %v", n.Kind)
						}
					case Lead:
						if rng.IntN(4) == 0 {
							d.Finish(res.Token) // may be stale by now
						}
					}
				}
			})
		}
		for e := Epoch(2); e < 200; e++ {
			// Let some acquires in first. If every worker is blocked on a
			// notice only this epoch change can send, the bubble's fake
			// clock fires the timer instead.
			for range 1 + int(e%5) {
				select {
				case <-progress:
				case <-time.After(time.Millisecond):
				}
			}
			if _, err := d.AdvanceEpoch(e); err != nil {
				t.Fatal(err)
			}
			for i := range d.stripes {
				s := &d.stripes[i]
				s.mu.Lock()
				for _, f := range s.fills {
					if f.epoch < e {
						t.Errorf("after AdvanceEpoch(%d): live fill %d of epoch %d", e, f.id, f.epoch)
					}
				}
				s.mu.Unlock()
			}
		}
		close(stop)
		d.Close() // fails waiters of the last epoch's fills
		wg.Wait()
		wantCredits(t, d, nil)
		st := d.Stats()
		t.Logf("stats %+v", st)
		if st.Fenced == 0 || st.Joins == 0 {
			t.Fatalf("the race did not happen: %+v", st)
		}
	})
}
