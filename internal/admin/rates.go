package admin

import (
	"context"
	"sync"
	"time"

	"github.com/gpucache/gpucache/api/wire"
)

// HitRates turns STAT's monotonic hit and miss counters into hit ratios
// over the last minutes, for the status page. It keeps one sample per
// RateSample at most, for the longest window: a bounded ring.
type HitRates struct {
	mu struct {
		sync.Mutex
		ring []rateSample // guarded by mu; oldest first
	}
}

// RateSample is the spacing of kept samples; RateWindows are the windows
// the page shows.
const RateSample = 10 * time.Second

// RateWindows are the windows the page shows ratios over.
var RateWindows = [...]time.Duration{time.Minute, 5 * time.Minute, 15 * time.Minute}

const rateRing = int(15*time.Minute/RateSample) + 2

type rateSample struct {
	at                         time.Time
	hit, miss, hotHit, hotMiss uint64
}

// Ratio is hits over lookups in a window; Total 0 means no traffic (or
// no sample old enough yet).
type Ratio struct{ Hits, Total uint64 }

// Value is Hits/Total, 0 when Total is 0.
func (r Ratio) Value() float64 {
	if r.Total == 0 {
		return 0
	}
	return float64(r.Hits) / float64(r.Total)
}

// RatioWindow is one window's ratios: blocks (the wire's LOOKUP/GET
// answers, hot or refilled) and the hot tier alone. Span is how much of
// the window the samples cover (less than Window right after start).
type RatioWindow struct {
	Window, Span time.Duration
	Blocks, Hot  Ratio
}

// NewHitRates returns an empty sampler.
func NewHitRates() *HitRates { return &HitRates{} }

// Record takes a sample of entries at now, unless the last kept sample is
// younger than RateSample (then the newest one is replaced, so the page
// always ends on a fresh figure).
func (r *HitRates) Record(now time.Time, entries []wire.StatEntry) {
	s := rateSample{at: now}
	for _, e := range entries {
		switch e.Name {
		case "blocks_hit":
			s.hit = e.Value
		case "blocks_miss":
			s.miss = e.Value
		case "hot_hits":
			s.hotHit = e.Value
		case "hot_misses":
			s.hotMiss = e.Value
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	n := len(r.mu.ring)
	if n >= 2 && now.Sub(r.mu.ring[n-2].at) < RateSample {
		r.mu.ring[n-1] = s // the last one is a fresh-figure sample: replace it
		return
	}
	if n == rateRing {
		copy(r.mu.ring, r.mu.ring[1:])
		r.mu.ring = r.mu.ring[:n-1]
	}
	r.mu.ring = append(r.mu.ring, s)
}

// Windows returns the ratios over each of RateWindows, ending at the
// newest sample.
func (r *HitRates) Windows(now time.Time) []RatioWindow {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]RatioWindow, 0, len(RateWindows))
	for _, w := range RateWindows {
		rw := RatioWindow{Window: w}
		if n := len(r.mu.ring); n >= 2 {
			last := r.mu.ring[n-1]
			first := last
			for _, s := range r.mu.ring {
				if now.Sub(s.at) <= w {
					first = s
					break
				}
			}
			rw.Span = last.at.Sub(first.at)
			rw.Blocks = ratio(last.hit-first.hit, last.miss-first.miss)
			rw.Hot = ratio(last.hotHit-first.hotHit, last.hotMiss-first.hotMiss)
		}
		out = append(out, rw)
	}
	return out
}

func ratio(hits, misses uint64) Ratio { return Ratio{Hits: hits, Total: hits + misses} }

// Run samples stats every RateSample until ctx ends, so the windows fill
// whether or not anyone looks at the page.
func (r *HitRates) Run(ctx context.Context, stats StatsFunc) {
	t := time.NewTicker(RateSample)
	defer t.Stop()
	r.Record(time.Now(), stats())
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			r.Record(now, stats())
		}
	}
}
