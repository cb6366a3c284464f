package bench

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"math"
	"runtime"
	"strings"
	"time"

	"github.com/gpucache/gpucache/client"
)

// The noisy-neighbour benchmark: a victim tenant B runs a steady, paced GET
// load while a noisy tenant A floods the same server at FloodFactor times
// its ops quota. Each rep measures B alone and B under the flood (the order
// alternates across reps, so that slow drift of the machine cancels; with
// Slice, each phase is also cut into windows interleaved with the other
// phase's), and the figure of merit is B's p99 under the flood over B's p99
// alone, per rep and as the median over reps.
//
// Both loads are open loop: requests fall due at fixed intervals whatever
// the server does, a pacer issues each one when it falls due, a worker pool
// sends them, and B's latency runs from the moment a request was issued
// (not when a worker got to send it), so a stall cannot hide behind a late
// send. A pacer that wakes late issues every request that has fallen due at
// once, so the rate holds; B's pacer waits on a Go timer, whose slack (up
// to a millisecond) is reported as the pacer lag and not counted as
// latency, and the flood's pacer sleeps finely (PacerFine) so that it
// arrives at its rate rather than in bursts. Neither load ever waits out a
// RATE_LIMITED answer: the flood counts it and keeps its rate. Every GET of
// B is verified byte for byte (payload stamps); a wrong payload is counted
// and must not happen.

// Pacer says how a paced load waits for its next request.
type Pacer string

const (
	// PacerTimer waits on a Go timer. Below a millisecond the timer wakes
	// up to a millisecond late, so a fast load goes out in bursts: 10,000
	// requests a second become about ten every millisecond.
	PacerTimer Pacer = "timer"
	// PacerFine sleeps waits under 2ms in a nanosleep system call (Linux;
	// elsewhere it is PacerTimer), so that requests go out within tens of
	// microseconds of their due time. The sleeping goroutine holds its P
	// until the runtime's monitor hands it on, which delays the other
	// goroutines of a process with few Ps: the victim, whose latency is
	// measured, should not use it.
	PacerFine Pacer = "fine"
)

// ParsePacer parses "timer" or "fine".
func ParsePacer(s string) (Pacer, error) {
	switch p := Pacer(strings.ToLower(strings.TrimSpace(s))); p {
	case PacerTimer, PacerFine:
		return p, nil
	}
	return "", fmt.Errorf("%w: pacer %q (want timer or fine)", ErrConfig, s)
}

// NoisyTenant is one tenant's session.
type NoisyTenant struct {
	Name   string
	Secret []byte
}

// NoisyNamespace is the default identity of the noisy-neighbour blocks
// (each tenant's Tenant is set when used).
func NoisyNamespace() client.Namespace {
	ns := DefaultNamespace()
	ns.ModelID = "noisy"
	return ns
}

// NoisyConfig describes a noisy-neighbour run.
type NoisyConfig struct {
	Addr string
	TLS  *tls.Config
	// Victim is tenant B, Noisy is tenant A.
	Victim, Noisy NoisyTenant
	// Namespace is the identity template of both tenants' blocks (its
	// Tenant is replaced). Default NoisyNamespace().
	Namespace client.Namespace
	// Quota is A's ops/s quota as configured on the server; the flood
	// offers FloodFactor × Quota requests per second (FloodFactor default
	// 10).
	Quota       float64
	FloodFactor float64
	// VictimRate is B's GET rate per second. Default 1000.
	VictimRate float64
	// Size is B's block size; FloodSize A's (default Size). Default 64KiB.
	Size, FloodSize int
	// Keys is each tenant's working set, written before the reps. Default 256.
	Keys int
	// VictimConns and FloodConns are connections per tenant (default 4);
	// VictimWorkers and FloodWorkers the goroutines sending their paced
	// requests (default 32 and 64).
	VictimConns, FloodConns     int
	VictimWorkers, FloodWorkers int
	// VictimPacer and FloodPacer pace the two loads; defaults PacerTimer
	// and PacerFine. B's latency runs from the moment a request was
	// issued, so the timer's slack does not count as B's latency; the
	// flood is paced finely so that it arrives at its rate, not in bursts.
	VictimPacer, FloodPacer Pacer
	// Duration is the measured time of each phase (default 10s); Warmup
	// runs B unmeasured at the start of each rep (default 0). Reps is the
	// number of (alone, flood) pairs (default 5).
	Duration, Warmup time.Duration
	Reps             int
	// Slice, when shorter than Duration, measures each phase in
	// Duration/Slice windows (rounded) interleaved ABBA with the other
	// phase's, so that slow drift of the machine falls on both phases
	// alike. Default Duration: one window per phase. Settle is the
	// unmeasured time after the flood is turned on or off (default
	// 100ms): flood requests in flight drain, or the flood ramps up.
	Slice, Settle  time.Duration
	RequestTimeout time.Duration // default 5s
	// Flood, when set, runs the flood (for example in another process);
	// nil runs it in this process from the fields above.
	Flood Flooder
	// Progress, when set, gets one line per phase.
	Progress io.Writer
}

func (c *NoisyConfig) applyDefaults() {
	orDefault(&c.Addr, client.DefaultAddr)
	if c.Namespace.ModelID == "" {
		c.Namespace = NoisyNamespace()
	}
	orDefault(&c.FloodFactor, 10)
	orDefault(&c.VictimRate, 1000)
	orDefault(&c.Size, 64<<10)
	orDefault(&c.FloodSize, c.Size)
	orDefault(&c.Keys, 256)
	orDefault(&c.VictimConns, 4)
	orDefault(&c.FloodConns, 4)
	orDefault(&c.VictimWorkers, 32)
	orDefault(&c.FloodWorkers, 64)
	orDefault(&c.Duration, 10*time.Second)
	if c.Slice == 0 || c.Slice > c.Duration {
		c.Slice = c.Duration
	}
	orDefault(&c.Settle, 100*time.Millisecond)
	orDefault(&c.VictimPacer, PacerTimer)
	orDefault(&c.FloodPacer, PacerFine)
	orDefault(&c.Reps, 5)
	orDefault(&c.RequestTimeout, 5*time.Second)
}

// orDefault sets *p to v when *p is the zero value.
func orDefault[T comparable](p *T, v T) {
	var zero T
	if *p == zero {
		*p = v
	}
}

// configErr returns an error wrapping ErrConfig.
func configErr(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrConfig}, args...)...)
}

// finite reports whether v is neither NaN nor infinite.
func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// Validate reports the first invalid field, defaults applied.
func (c NoisyConfig) Validate() error {
	c.applyDefaults()
	for _, check := range []func() error{c.validateRates, c.validateSizes, c.validateTimes} {
		if err := check(); err != nil {
			return err
		}
	}
	for _, p := range []Pacer{c.VictimPacer, c.FloodPacer} {
		if _, err := ParsePacer(string(p)); err != nil {
			return err
		}
	}
	if err := c.Namespace.Validate(); err != nil {
		return configErr("namespace: %v", err)
	}
	return nil
}

// validateRates checks the tenants, the quota and the two loads' rates.
func (c NoisyConfig) validateRates() error {
	switch {
	case c.Victim.Name == "" || c.Noisy.Name == "":
		return configErr("both tenants need a name")
	case c.Victim.Name == c.Noisy.Name:
		return configErr("the victim and the noisy tenant are both %q; they must differ", c.Victim.Name)
	case !finite(c.Quota) || c.Quota <= 0:
		return configErr("quota %v must be positive (the noisy tenant's ops_per_sec on the server)", c.Quota)
	case !finite(c.FloodFactor) || c.FloodFactor <= 0:
		return configErr("flood factor %v must be positive", c.FloodFactor)
	case !finite(c.VictimRate) || c.VictimRate <= 0 || c.VictimRate > 1e6:
		return configErr("victim rate %v not in (0, 1e6]", c.VictimRate)
	case c.Quota*c.FloodFactor > 1e6:
		return configErr("flood rate %v exceeds 1e6/s", c.Quota*c.FloodFactor)
	}
	return nil
}

// validateSizes checks the block sizes, the working set, the connections
// and the workers.
func (c NoisyConfig) validateSizes() error {
	switch {
	case c.Size < 16 || c.FloodSize < 16 || c.Size > 1<<30 || c.FloodSize > 1<<30:
		return configErr("sizes %d and %d must be in 16B..1GiB", c.Size, c.FloodSize)
	case c.Keys < 1:
		return configErr("keys %d is below 1", c.Keys)
	case int64(c.Keys)*int64(c.Size) > 1<<30:
		return configErr("the victim's working set, keys × size = %s, exceeds 1GiB (its contents are kept to verify every GET)",
			FormatSize(int64(c.Keys)*int64(c.Size)))
	case c.VictimConns < 1 || c.FloodConns < 1 || c.VictimConns > 1024 || c.FloodConns > 1024:
		return configErr("conns must be in 1..1024")
	case c.VictimWorkers < 1 || c.FloodWorkers < 1 || c.VictimWorkers > 4096 || c.FloodWorkers > 4096:
		return configErr("workers must be in 1..4096")
	}
	return nil
}

// validateTimes checks the durations and the rep count.
func (c NoisyConfig) validateTimes() error {
	switch {
	case c.Duration <= 0:
		return configErr("duration must be positive")
	case c.Slice < 0 || c.Duration/c.Slice > 10000:
		return configErr("slice %v must be positive and at least Duration/10000", c.Slice)
	case c.Warmup < 0 || c.RequestTimeout < 0 || c.Settle < 0:
		return configErr("negative duration")
	case c.Reps < 1 || c.Reps > 1000:
		return configErr("reps %d not in 1..1000", c.Reps)
	}
	return nil
}

// floodConfig is the in-process flood cfg describes.
func (c *NoisyConfig) floodConfig() FloodConfig {
	return FloodConfig{Addr: c.Addr, TLS: c.TLS, Tenant: c.Noisy, Namespace: c.Namespace, Rate: c.Quota * c.FloodFactor,
		Size: c.FloodSize, Keys: c.Keys, Conns: c.FloodConns, Workers: c.FloodWorkers, Pacer: c.FloodPacer, RequestTimeout: c.RequestTimeout}
}

// RunNoisy runs cfg.Reps reps against the server and returns the report.
// When ctx ends early it returns the reps finished so far with ctx's error.
func RunNoisy(ctx context.Context, cfg NoisyConfig) (*NoisyReport, error) {
	cfg.applyDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	ns := cfg.Namespace
	ns.Tenant = cfg.Victim.Name
	dig, err := ns.Digest()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	vc, err := client.Dial(ctx, client.Config{Addr: cfg.Addr, Tenant: cfg.Victim.Name, Secret: cfg.Victim.Secret, TLS: cfg.TLS,
		Conns: cfg.VictimConns, RequestTimeout: cfg.RequestTimeout, ClientName: "gpucache-noisy-victim"})
	if err != nil {
		return nil, fmt.Errorf("victim %q: %w", cfg.Victim.Name, err)
	}
	defer vc.Close()
	if lim := vc.Limits(); uint64(max(cfg.Size, cfg.FloodSize)) > uint64(lim.MaxPayload) {
		return nil, fmt.Errorf("%w: size %s exceeds the server's MaxPayload %s", ErrConfig,
			FormatSize(int64(max(cfg.Size, cfg.FloodSize))), FormatSize(int64(lim.MaxPayload)))
	}
	rep := &NoisyReport{Started: time.Now().UTC(), Addr: cfg.Addr, Server: vc.ServerName(), Params: NoisyParams{
		Victim: cfg.Victim.Name, Noisy: cfg.Noisy.Name, Quota: cfg.Quota, FloodFactor: cfg.FloodFactor,
		FloodRate: cfg.Quota * cfg.FloodFactor, VictimRate: cfg.VictimRate, Size: cfg.Size, FloodSize: cfg.FloodSize,
		Keys: cfg.Keys, VictimConns: cfg.VictimConns, FloodConns: cfg.FloodConns, VictimWorkers: cfg.VictimWorkers,
		FloodWorkers: cfg.FloodWorkers, VictimPacer: cfg.VictimPacer, FloodPacer: cfg.FloodPacer,
		DurationNs: int64(cfg.Duration), WarmupNs: int64(cfg.Warmup), SliceNs: int64(cfg.Slice), SettleNs: int64(cfg.Settle), Reps: cfg.Reps,
		FloodInProc: cfg.Flood == nil, GoMaxProcs: runtime.GOMAXPROCS(0), ClientNumCPU: runtime.NumCPU()}}
	progf := func(format string, args ...any) {
		if cfg.Progress != nil {
			fmt.Fprintf(cfg.Progress, format+"\n", args...)
		}
	}

	keys, contents, err := writeWorkingSet(ctx, vc, ns, dig, cfg.Size, cfg.Keys, cfg.RequestTimeout, true)
	if err != nil {
		return nil, fmt.Errorf("victim working set: %w", err)
	}
	flood := cfg.Flood
	if flood == nil {
		lf, err := NewLocalFlood(ctx, cfg.floodConfig())
		if err != nil {
			return nil, err
		}
		defer lf.Close()
		flood = lf
	}
	v := &victim{cfg: &cfg, c: vc, ns: ns, keys: keys, contents: contents}
	for i := range cfg.Reps {
		r := NoisyRep{Rep: i + 1, FloodFirst: i%2 == 1}
		var err error
		r.Alone, r.Flood, r.WrongUnmeasured, err = v.rep(ctx, r.FloodFirst, flood, func(name string) {
			progf("rep %d/%d %s phase starts", i+1, cfg.Reps, name)
		})
		if err != nil {
			rep.Wrong += r.Alone.Victim.Wrong + r.Flood.Victim.Wrong + r.WrongUnmeasured
			return rep, err
		}
		phases := []*NoisyPhase{&r.Alone, &r.Flood}
		if r.FloodFirst {
			phases[0], phases[1] = phases[1], phases[0]
		}
		for _, ph := range phases {
			vs := &ph.Victim
			progf("rep %d/%d %-5s: B %s req/s p50 %s p99 %s p999 %s max %s (pacer lag p50 %s p99 %s; service p50 %s p99 %s) wrong %d errors %d; machine busy %.0f%% steal %.1f%%%s",
				i+1, cfg.Reps, ph.Name, fmtRate(vs.RatePerSec), fmtDur(vs.P50Ns), fmtDur(vs.P99Ns), fmtDur(vs.P999Ns), fmtDur(vs.MaxNs),
				fmtDur(vs.LagP50Ns), fmtDur(vs.LagP99Ns), fmtDur(vs.ServiceP50Ns), fmtDur(vs.ServiceP99Ns), vs.Wrong, vs.Errors,
				ph.MachineBusyPct, ph.MachineStealPct, floodLine(ph.Noisy))
		}
		if r.Alone.Victim.P99Ns > 0 {
			r.P99Ratio = float64(r.Flood.Victim.P99Ns) / float64(r.Alone.Victim.P99Ns)
		}
		rep.Reps = append(rep.Reps, r)
		rep.Wrong += r.Alone.Victim.Wrong + r.Flood.Victim.Wrong + r.WrongUnmeasured
		rep.Limited += r.Flood.Noisy.Limited
	}
	rep.MedianP99Ratio = medianRatio(rep.Reps)
	rep.MedianP99RisePct = (rep.MedianP99Ratio - 1) * 100
	rep.addNotes()
	return rep, nil
}

// writeWorkingSet PUTs n blocks of size bytes under ns and returns their
// keys, and with keep their contents. Key i is the first block of the token
// chain (size, i); its bytes are a filler pattern with the stamps of its
// key. A RATE_LIMITED answer is waited out (this is setup, not the
// measurement).
func writeWorkingSet(ctx context.Context, c *client.Client, ns client.Namespace, dig client.NamespaceDigest, size, n int, timeout time.Duration, keep bool) ([]client.BlockKey, [][]byte, error) {
	const batch = 16
	keys := make([]client.BlockKey, n)
	var contents [][]byte
	if keep {
		contents = make([][]byte, n)
	}
	bufs := make([][]byte, batch)
	for i := range bufs {
		bufs[i] = make([]byte, size)
	}
	blocks := make([]client.PutBlock, 0, batch)
	for lo := 0; lo < n; lo += batch {
		blocks = blocks[:0]
		for i := lo; i < min(lo+batch, n); i++ {
			toks := workingTokens(size, i)
			keys[i] = client.KeyFor(dig, client.BlockKey{}, toks, 2)
			b := bufs[i-lo]
			if keep {
				b = make([]byte, size)
				contents[i] = b
			}
			fill(b, byte(i))
			stamp(b, seedOf(keys[i]))
			blocks = append(blocks, client.PutBlock{Key: keys[i], TokenIDs: toks, Data: b})
		}
		for attempt := 0; ; attempt++ {
			rctx, cancel := context.WithTimeout(ctx, timeout)
			st, err := c.Put(rctx, ns, blocks)
			cancel()
			if wait, ok := client.RetryAfter(err); ok && attempt < 100 {
				if err := sleepCtx(ctx, wait); err != nil {
					return nil, nil, err
				}
				continue
			}
			if err != nil {
				return nil, nil, err
			}
			for j, s := range st {
				if s != client.StatusStored && s != client.StatusExists {
					return nil, nil, fmt.Errorf("PUT of block %d: status %s", lo+j, s)
				}
			}
			break
		}
	}
	return keys, contents, nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// pace calls emit(due) for due = start, start + 1/rate, start + 2/rate, ...
// while due is before end (a zero end: forever), each no earlier than due,
// waiting the way pacer says; when it wakes late it emits every request
// that has fallen due at once, so the rate holds on average. It returns
// when ctx ends.
func pace(ctx context.Context, start, end time.Time, rate float64, pacer Pacer, emit func(due time.Time)) {
	fine := pacer == PacerFine && fineSleepSupported
	t := time.NewTimer(time.Hour)
	t.Stop()
	defer t.Stop()
	for i := 0; ; i++ {
		due := start.Add(time.Duration(float64(i) * 1e9 / rate))
		if !end.IsZero() && !due.Before(end) {
			return
		}
		if d := time.Until(due); d > 0 && d < fineSleepMax && fine {
			fineSleep(d)
			if ctx.Err() != nil {
				return
			}
		} else if d > 0 {
			t.Reset(d)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		} else if ctx.Err() != nil {
			return
		}
		emit(due)
	}
}
