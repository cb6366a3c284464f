package directory

import (
	"fmt"
	"testing"
)

// BenchmarkAcquireFinish: one leader, no waiters, no contention: the cost
// of a fill's bookkeeping (Acquire → Lead, Finish).
func BenchmarkAcquireFinish(b *testing.B) {
	d := newDir(b, Config{})
	r := req("a", "k", 1)
	b.ReportAllocs()
	for b.Loop() {
		res := d.Acquire(r, nil)
		if err := d.Finish(res.Token); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAcquireJoin: a fill with n waiters: lead, n joins, Finish, and
// each waiter reads its notice. Reported per fill.
func BenchmarkAcquireJoin(b *testing.B) {
	for _, n := range []int{1, 32} {
		b.Run(fmt.Sprintf("waiters=%d", n), func(b *testing.B) {
			d := newDir(b, Config{})
			r := req("a", "k", 1)
			ws := make([]*Waiter, n)
			b.ReportAllocs()
			for b.Loop() {
				tok := d.Acquire(r, nil).Token
				for i := range ws {
					ws[i] = d.Acquire(r, nil).Waiter
				}
				if err := d.Finish(tok); err != nil {
					b.Fatal(err)
				}
				for _, w := range ws {
					if (<-w.C()).Kind != Finished {
						b.Fatal("not finished")
					}
				}
			}
		})
	}
}

// BenchmarkAcquireFinishParallel: many goroutines, each on its own keys,
// so the striped locks are what they share.
func BenchmarkAcquireFinishParallel(b *testing.B) {
	d := newDir(b, Config{})
	var next uint64
	var mu = make(chan struct{}, 1)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		mu <- struct{}{}
		next++
		r := req("a", fmt.Sprint(next), next)
		<-mu
		for pb.Next() {
			res := d.Acquire(r, nil)
			if err := d.Finish(res.Token); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
