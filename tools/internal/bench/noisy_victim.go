package bench

// The victim B of the noisy-neighbour benchmark: its paced, verified GET
// load, measured per phase.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpucache/gpucache/client"
)

// victim is tenant B's side of a run.
type victim struct {
	cfg      *NoisyConfig
	c        *client.Client
	ns       client.Namespace
	keys     []client.BlockKey
	contents [][]byte // of keys, as written
	seq      uint64
}

// Phases a paced request of B can belong to.
const (
	phaseNone  = iota // warm-up, a toggle of the flood, settling
	phaseAlone        // measured, no flood
	phaseFlood        // measured, flood on
)

// phaseCPU accumulates the machine's CPU time over one phase's windows.
type phaseCPU struct {
	wall       time.Duration
	busy, stel uint64 // ticks
	total      uint64
}

// rep runs one rep: B's paced load runs without a break for Warmup, then
// 2n slices of Duration/n, n = Duration/Slice rounded; n slices are
// measured alone and n under the flood, in the order ABBA ABBA... where A
// is the alone phase when floodFirst is false. Each slice starts by
// turning the flood on or off and then lets Settle pass unmeasured. A
// request belongs to the phase of the slice it was issued in.
//
// When each phase is one window, started(name) is called as each window's
// measurement begins.
func (v *victim) rep(ctx context.Context, floodFirst bool, flood Flooder, started func(name string)) (alone, fl NoisyPhase, wrongUnmeasured uint64, err error) {
	cfg := v.cfg
	n := max(1, int(math.Round(float64(cfg.Duration)/float64(cfg.Slice))))
	slice := cfg.Duration / time.Duration(n)
	alone, fl = NoisyPhase{Name: "alone", Slices: n}, NoisyPhase{Name: "flood", Slices: n}

	l := v.startLoad(ctx)
	sw := &floodSwitch{flood: flood}
	err = sleepCtx(ctx, cfg.Warmup)
	for j := 0; j < 2*n && err == nil && sw.err == nil; j++ {
		withFlood := floodFirst != ((j+1)/2%2 == 1)
		sw.set(ctx, withFlood)
		if sw.err != nil {
			break
		}
		if err = sleepCtx(ctx, cfg.Settle); err != nil {
			break
		}
		ph := int32(phaseAlone)
		if withFlood {
			ph = phaseFlood
		}
		if n == 1 && started != nil {
			started(map[bool]string{false: "alone", true: "flood"}[withFlood])
		}
		err = l.measure(ctx, ph, slice)
	}
	l.stop()
	sw.set(ctx, false)
	if err == nil {
		err = ctx.Err()
	}
	if err == nil && sw.err != nil {
		err = fmt.Errorf("flood: %w", sw.err)
	}
	fs := sw.stats
	fl.Noisy = &fs
	l.summarize(&alone, phaseAlone, cfg.VictimRate)
	l.summarize(&fl, phaseFlood, cfg.VictimRate)
	for _, w := range l.workers {
		wrongUnmeasured += w.rec[phaseNone].wrong
	}
	return alone, fl, wrongUnmeasured, err
}

// victimLoad is B's paced load during one rep: the pacer puts each due
// request on the queue, tagged with the phase it was issued in, and the
// workers serve it.
type victimLoad struct {
	phase        atomic.Int32       // the phase requests issued now belong to
	due, dropped [3]atomic.Uint64   // per phase: fell due, dropped (queue full)
	queue        chan victimReq     // closed by stop
	workers      []*victimWorker    // each records per phase
	wg           sync.WaitGroup     // the workers
	stopPacing   context.CancelFunc // ends the pacer
	paced        chan struct{}      // closed when the pacer has returned
	cpu          [3]phaseCPU        // per phase, written by measure
}

// startLoad starts B's workers and its pacer.
func (v *victim) startLoad(ctx context.Context) *victimLoad {
	cfg := v.cfg
	l := &victimLoad{queue: make(chan victimReq, max(1024, int(cfg.VictimRate))), workers: make([]*victimWorker, cfg.VictimWorkers)}
	start := time.Now()
	for i := range l.workers {
		v.seq++
		w := &victimWorker{v: v, rng: rand.New(rand.NewPCG(v.seq, uint64(start.UnixNano()))),
			keys: make([]client.BlockKey, 1), dst: [][]byte{make([]byte, cfg.Size)}, res: make([]client.GetResult, 1)}
		l.workers[i] = w
		l.wg.Go(func() { w.run(ctx, l.queue) })
	}
	pctx, stopPacing := context.WithCancel(ctx)
	l.stopPacing, l.paced = stopPacing, make(chan struct{})
	go func() {
		defer close(l.paced)
		pace(pctx, start, time.Time{}, cfg.VictimRate, cfg.VictimPacer, func(t time.Time) {
			ph := l.phase.Load()
			l.due[ph].Add(1)
			select {
			case l.queue <- victimReq{due: t, issued: time.Now(), phase: ph}:
			default:
				l.dropped[ph].Add(1)
			}
		})
	}()
	return l
}

// measure runs one slice of phase ph and adds the machine's CPU time over
// it to the phase.
func (l *victimLoad) measure(ctx context.Context, ph int32, slice time.Duration) error {
	c0, t0 := readCPU(), time.Now()
	l.phase.Store(ph)
	err := sleepCtx(ctx, slice)
	l.phase.Store(phaseNone)
	c1 := readCPU()
	c := &l.cpu[ph]
	c.wall += time.Since(t0)
	c.busy += c1.busy - c0.busy
	c.stel += c1.steal - c0.steal
	c.total += c1.total - c0.total
	return err
}

// stop ends the pacer, then the workers once the queue is served.
func (l *victimLoad) stop() {
	l.stopPacing()
	<-l.paced
	close(l.queue)
	l.wg.Wait()
}

// summarize fills p's victim record and machine load from the workers'
// records of phase idx.
func (l *victimLoad) summarize(p *NoisyPhase, idx int, rate float64) {
	s := &p.Victim
	var hist, lag, svc Histogram
	for _, w := range l.workers {
		r := &w.rec[idx]
		hist.Merge(&r.hist)
		lag.Merge(&r.lag)
		svc.Merge(&r.svc)
		s.Hits += r.hits
		s.Misses += r.misses
		s.Errors += r.errors
		s.Wrong += r.wrong
		if s.FirstError == "" {
			s.FirstError = r.firstErr
		}
	}
	c := l.cpu[idx]
	s.Seconds, s.TargetRate = c.wall.Seconds(), rate
	s.Due, s.Dropped = l.due[idx].Load(), l.dropped[idx].Load()
	s.Completed = hist.Count()
	if s.Seconds > 0 {
		s.RatePerSec = float64(s.Completed) / s.Seconds
	}
	s.MeanNs = int64(hist.Mean())
	s.P50Ns, s.P99Ns = int64(hist.Quantile(0.50)), int64(hist.Quantile(0.99))
	s.P999Ns, s.MaxNs = int64(hist.Quantile(0.999)), int64(hist.Max())
	s.LagP50Ns, s.LagP99Ns = int64(lag.Quantile(0.50)), int64(lag.Quantile(0.99))
	s.ServiceP50Ns, s.ServiceP99Ns = int64(svc.Quantile(0.50)), int64(svc.Quantile(0.99))
	if c.total > 0 {
		p.MachineBusyPct = 100 * float64(c.busy) / float64(c.total)
		p.MachineStealPct = 100 * float64(c.stel) / float64(c.total)
	}
}

// floodSwitch turns the noisy tenant's flood on and off during a rep and
// sums its stats. After the first error it does nothing.
type floodSwitch struct {
	flood Flooder
	on    bool
	stats FloodStats
	err   error
}

// set turns the flood on or off.
func (f *floodSwitch) set(ctx context.Context, on bool) {
	if on == f.on || f.err != nil {
		return
	}
	if on {
		if f.err = f.flood.Start(ctx); f.err == nil {
			f.on = true
		}
		return
	}
	f.on = false
	st, err := f.flood.Stop()
	if err != nil {
		f.err = err
	}
	f.stats.add(st)
}

// victimRecord is one worker's record of one phase.
type victimRecord struct {
	hist Histogram // issued to answer
	lag  Histogram // due to issued
	svc  Histogram // sent to answer

	hits, misses, errors, wrong uint64
	firstErr                    string
}

// victimWorker sends B's paced GETs one at a time; VictimWorkers of them
// share B's client, which pipelines them over its connections.
type victimWorker struct {
	v    *victim
	rng  *rand.Rand
	rec  [3]victimRecord // by phase; phaseNone's is not reported
	keys []client.BlockKey
	dst  [][]byte
	res  []client.GetResult
}

// victimReq is one paced request: when it fell due, when the pacer issued
// it, and the phase it was issued in.
type victimReq struct {
	due, issued time.Time
	phase       int32
}

func (w *victimWorker) run(ctx context.Context, queue <-chan victimReq) {
	size := w.v.cfg.Size
	for rq := range queue {
		if ctx.Err() != nil {
			continue // drain
		}
		i := w.rng.IntN(len(w.v.keys))
		w.keys[0] = w.v.keys[i]
		w.dst[0] = w.dst[0][:cap(w.dst[0])]
		clear(w.dst[0][:min(16, size)]) // a stale buffer must not pass verify
		sent := time.Now()
		w.v.c.GetInto(ctx, w.v.ns, w.keys, w.dst, w.res)
		end := time.Now()
		r := &w.rec[rq.phase]
		r.hist.Record(end.Sub(rq.issued))
		r.lag.Record(rq.issued.Sub(rq.due))
		r.svc.Record(end.Sub(sent))
		switch res := w.res[0]; {
		case res.Hit && bytes.Equal(res.Data, w.v.contents[i]):
			r.hits++
		case res.Hit:
			r.wrong++
		case errors.Is(res.Reason, client.ErrNotCached):
			r.misses++
		default:
			r.errors++
			if r.firstErr == "" {
				r.firstErr = res.Reason.Error()
			}
		}
	}
}
