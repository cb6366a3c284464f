package bench

// The noisy tenant's flood: its configuration, its stats and the
// in-process Flooder.

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpucache/gpucache/client"
)

// FloodConfig configures the noisy tenant's flood.
type FloodConfig struct {
	Addr           string
	TLS            *tls.Config
	Tenant         NoisyTenant
	Namespace      client.Namespace // its Tenant is set to Tenant.Name
	Rate           float64          // requests per second offered
	Size           int              // payload size of the flood's GETs
	Keys           int              // the flood's working set (GETs of its own blocks)
	Conns          int              // connections
	Workers        int              // goroutines sending the paced requests
	Pacer          Pacer            // default PacerFine
	RequestTimeout time.Duration
}

// FloodStats is what one flood (Start to Stop) did.
type FloodStats struct {
	Seconds    float64 `json:"seconds"`
	TargetRate float64 `json:"target_per_sec"`
	// Offered counts requests that fell due; Sent those a worker sent
	// (Offered - Sent were dropped because every worker was busy and the
	// queue was full, or were still queued at Stop).
	Offered uint64 `json:"offered"`
	Sent    uint64 `json:"sent"`
	// Accepted counts answers the server admitted (a hit or a plain miss);
	// Limited counts RATE_LIMITED answers; Errors everything else.
	Accepted       uint64  `json:"accepted"`
	Limited        uint64  `json:"limited"`
	Errors         uint64  `json:"errors"`
	OfferedPerSec  float64 `json:"offered_per_sec"`
	AcceptedPerSec float64 `json:"accepted_per_sec"`
	// MaxRetryAfterNs is the largest retry-after the server asked for.
	MaxRetryAfterNs int64  `json:"max_retry_after_ns"`
	FirstError      string `json:"first_error,omitempty"`
}

// Flooder runs the noisy tenant's flood; Start begins it and Stop ends it
// and reports. LocalFlood runs it in this process; RemoteFlood drives one
// in another process (ServeFlood).
type Flooder interface {
	Start(ctx context.Context) error
	Stop() (FloodStats, error)
}

// add adds one flood's record to s.
func (s *FloodStats) add(o FloodStats) {
	s.Seconds += o.Seconds
	s.TargetRate = o.TargetRate
	s.Offered += o.Offered
	s.Sent += o.Sent
	s.Accepted += o.Accepted
	s.Limited += o.Limited
	s.Errors += o.Errors
	s.MaxRetryAfterNs = max(s.MaxRetryAfterNs, o.MaxRetryAfterNs)
	if s.FirstError == "" {
		s.FirstError = o.FirstError
	}
	if s.Seconds > 0 {
		s.OfferedPerSec = float64(s.Offered) / s.Seconds
		s.AcceptedPerSec = float64(s.Accepted) / s.Seconds
	}
}

// LocalFlood runs a flood in this process.
type LocalFlood struct {
	cfg  FloodConfig
	c    *client.Client
	ns   client.Namespace
	keys []client.BlockKey

	mu      sync.Mutex
	running *floodRun
}

type floodRun struct {
	cancel  context.CancelFunc
	done    chan struct{}
	start   time.Time
	stopped atomic.Bool
	offered atomic.Uint64
	workers []*floodWorker
}

// NewLocalFlood dials the noisy tenant and writes its working set.
func NewLocalFlood(ctx context.Context, cfg FloodConfig) (*LocalFlood, error) {
	if cfg.Rate <= 0 || cfg.Size < 16 || cfg.Keys < 1 || cfg.Conns < 1 || cfg.Workers < 1 {
		return nil, fmt.Errorf("%w: flood rate, size, keys, conns and workers must be positive", ErrConfig)
	}
	if cfg.RequestTimeout == 0 {
		cfg.RequestTimeout = 5 * time.Second
	}
	if cfg.Pacer == "" {
		cfg.Pacer = PacerFine
	}
	if _, err := ParsePacer(string(cfg.Pacer)); err != nil {
		return nil, err
	}
	ns := cfg.Namespace
	ns.Tenant = cfg.Tenant.Name
	dig, err := ns.Digest()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	c, err := client.Dial(ctx, client.Config{Addr: cfg.Addr, Tenant: cfg.Tenant.Name, Secret: cfg.Tenant.Secret, TLS: cfg.TLS,
		Conns: cfg.Conns, RequestTimeout: cfg.RequestTimeout, ClientName: "gpucache-noisy-flood"})
	if err != nil {
		return nil, fmt.Errorf("noisy %q: %w", cfg.Tenant.Name, err)
	}
	keys, _, err := writeWorkingSet(ctx, c, ns, dig, cfg.Size, cfg.Keys, cfg.RequestTimeout, false)
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("noisy working set: %w", err)
	}
	return &LocalFlood{cfg: cfg, c: c, ns: ns, keys: keys}, nil
}

// Start begins the flood; it runs until Stop.
func (f *LocalFlood) Start(ctx context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.running != nil {
		return errors.New("flood already running")
	}
	rctx, cancel := context.WithCancel(ctx)
	run := &floodRun{cancel: cancel, done: make(chan struct{}), start: time.Now()}
	queue := make(chan struct{}, max(1024, int(f.cfg.Rate/10)))
	var wg sync.WaitGroup
	for i := range f.cfg.Workers {
		w := &floodWorker{f: f, fr: run, rng: rand.New(rand.NewPCG(uint64(i), uint64(run.start.UnixNano()))),
			keys: make([]client.BlockKey, 1), dst: [][]byte{make([]byte, f.cfg.Size)}, res: make([]client.GetResult, 1)}
		run.workers = append(run.workers, w)
		// Requests use ctx, not rctx: Stop ends the pacing, and the
		// requests already sent finish normally.
		wg.Go(func() { w.run(ctx, queue) })
	}
	go func() {
		defer close(run.done)
		pace(rctx, run.start, time.Time{}, f.cfg.Rate, f.cfg.Pacer, func(time.Time) {
			run.offered.Add(1)
			select {
			case queue <- struct{}{}:
			default:
			}
		})
		run.stopped.Store(true)
		close(queue)
		wg.Wait()
	}()
	f.running = run
	return nil
}

// Stop ends the flood, waits for its requests in flight and reports.
func (f *LocalFlood) Stop() (FloodStats, error) {
	f.mu.Lock()
	run := f.running
	f.running = nil
	f.mu.Unlock()
	if run == nil {
		return FloodStats{}, errors.New("flood not running")
	}
	stopAt := time.Now()
	run.cancel()
	<-run.done
	st := FloodStats{Seconds: stopAt.Sub(run.start).Seconds(), TargetRate: f.cfg.Rate, Offered: run.offered.Load()}
	for _, w := range run.workers {
		st.Sent += w.sent
		st.Accepted += w.accepted
		st.Limited += w.limited
		st.Errors += w.errors
		st.MaxRetryAfterNs = max(st.MaxRetryAfterNs, int64(w.maxRetry))
		if st.FirstError == "" {
			st.FirstError = w.firstErr
		}
	}
	if st.Seconds > 0 {
		st.OfferedPerSec = float64(st.Offered) / st.Seconds
		st.AcceptedPerSec = float64(st.Accepted) / st.Seconds
	}
	return st, nil
}

// Close stops a running flood and closes the connections.
func (f *LocalFlood) Close() error {
	f.mu.Lock()
	running := f.running != nil
	f.mu.Unlock()
	if running {
		f.Stop()
	}
	return f.c.Close()
}

type floodWorker struct {
	f    *LocalFlood
	fr   *floodRun
	rng  *rand.Rand
	keys []client.BlockKey
	dst  [][]byte
	res  []client.GetResult

	sent, accepted, limited, errors uint64
	maxRetry                        time.Duration
	firstErr                        string
}

func (w *floodWorker) run(ctx context.Context, queue <-chan struct{}) {
	for range queue {
		if w.fr.stopped.Load() || ctx.Err() != nil {
			continue // drain: not sent
		}
		w.keys[0] = w.f.keys[w.rng.IntN(len(w.f.keys))]
		w.f.c.GetInto(ctx, w.f.ns, w.keys, w.dst, w.res)
		w.sent++
		r := w.res[0]
		if wait, ok := client.RetryAfter(r.Reason); ok {
			w.limited++
			w.maxRetry = max(w.maxRetry, wait)
			continue
		}
		switch {
		case r.Hit, errors.Is(r.Reason, client.ErrNotCached):
			w.accepted++
		default:
			w.errors++
			if w.firstErr == "" {
				w.firstErr = r.Reason.Error()
			}
		}
	}
}
