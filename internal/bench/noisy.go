package bench

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
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
	if c.Addr == "" {
		c.Addr = client.DefaultAddr
	}
	if c.Namespace.ModelID == "" {
		c.Namespace = NoisyNamespace()
	}
	if c.FloodFactor == 0 {
		c.FloodFactor = 10
	}
	if c.VictimRate == 0 {
		c.VictimRate = 1000
	}
	if c.Size == 0 {
		c.Size = 64 << 10
	}
	if c.FloodSize == 0 {
		c.FloodSize = c.Size
	}
	if c.Keys == 0 {
		c.Keys = 256
	}
	if c.VictimConns == 0 {
		c.VictimConns = 4
	}
	if c.FloodConns == 0 {
		c.FloodConns = 4
	}
	if c.VictimWorkers == 0 {
		c.VictimWorkers = 32
	}
	if c.FloodWorkers == 0 {
		c.FloodWorkers = 64
	}
	if c.Duration == 0 {
		c.Duration = 10 * time.Second
	}
	if c.Slice == 0 || c.Slice > c.Duration {
		c.Slice = c.Duration
	}
	if c.Settle == 0 {
		c.Settle = 100 * time.Millisecond
	}
	if c.VictimPacer == "" {
		c.VictimPacer = PacerTimer
	}
	if c.FloodPacer == "" {
		c.FloodPacer = PacerFine
	}
	if c.Reps == 0 {
		c.Reps = 5
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = 5 * time.Second
	}
}

// Validate reports the first invalid field, defaults applied.
func (c NoisyConfig) Validate() error {
	c.applyDefaults()
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrConfig}, args...)...)
	}
	finite := func(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
	switch {
	case c.Victim.Name == "" || c.Noisy.Name == "":
		return bad("both tenants need a name")
	case c.Victim.Name == c.Noisy.Name:
		return bad("the victim and the noisy tenant are both %q; they must differ", c.Victim.Name)
	case !finite(c.Quota) || c.Quota <= 0:
		return bad("quota %v must be positive (the noisy tenant's ops_per_sec on the server)", c.Quota)
	case !finite(c.FloodFactor) || c.FloodFactor <= 0:
		return bad("flood factor %v must be positive", c.FloodFactor)
	case !finite(c.VictimRate) || c.VictimRate <= 0 || c.VictimRate > 1e6:
		return bad("victim rate %v not in (0, 1e6]", c.VictimRate)
	case c.Quota*c.FloodFactor > 1e6:
		return bad("flood rate %v exceeds 1e6/s", c.Quota*c.FloodFactor)
	case c.Size < 16 || c.FloodSize < 16 || c.Size > 1<<30 || c.FloodSize > 1<<30:
		return bad("sizes %d and %d must be in 16B..1GiB", c.Size, c.FloodSize)
	case c.Keys < 1:
		return bad("keys %d is below 1", c.Keys)
	case int64(c.Keys)*int64(c.Size) > 1<<30:
		return bad("the victim's working set, keys × size = %s, exceeds 1GiB (its contents are kept to verify every GET)",
			FormatSize(int64(c.Keys)*int64(c.Size)))
	case c.VictimConns < 1 || c.FloodConns < 1 || c.VictimConns > 1024 || c.FloodConns > 1024:
		return bad("conns must be in 1..1024")
	case c.VictimWorkers < 1 || c.FloodWorkers < 1 || c.VictimWorkers > 4096 || c.FloodWorkers > 4096:
		return bad("workers must be in 1..4096")
	case c.Duration <= 0:
		return bad("duration must be positive")
	case c.Slice < 0 || c.Duration/c.Slice > 10000:
		return bad("slice %v must be positive and at least Duration/10000", c.Slice)
	case c.Warmup < 0 || c.RequestTimeout < 0 || c.Settle < 0:
		return bad("negative duration")
	case c.Reps < 1 || c.Reps > 1000:
		return bad("reps %d not in 1..1000", c.Reps)
	}
	for _, p := range []Pacer{c.VictimPacer, c.FloodPacer} {
		if _, err := ParsePacer(string(p)); err != nil {
			return err
		}
	}
	if err := c.Namespace.Validate(); err != nil {
		return bad("namespace: %v", err)
	}
	return nil
}

// floodConfig is the in-process flood cfg describes.
func (c *NoisyConfig) floodConfig() FloodConfig {
	return FloodConfig{Addr: c.Addr, TLS: c.TLS, Tenant: c.Noisy, Namespace: c.Namespace, Rate: c.Quota * c.FloodFactor,
		Size: c.FloodSize, Keys: c.Keys, Conns: c.FloodConns, Workers: c.FloodWorkers, Pacer: c.FloodPacer, RequestTimeout: c.RequestTimeout}
}

// NoisyReport is the outcome of RunNoisy, in the shape of the --json output.
type NoisyReport struct {
	Started time.Time   `json:"started"`
	Addr    string      `json:"addr"`
	Server  string      `json:"server"`
	Params  NoisyParams `json:"params"`
	Reps    []NoisyRep  `json:"reps"`
	// MedianP99Ratio is the median over reps of B's p99 under the flood
	// over B's p99 alone; MedianP99RisePct is (ratio - 1) × 100.
	MedianP99Ratio   float64 `json:"median_p99_ratio"`
	MedianP99RisePct float64 `json:"median_p99_rise_pct"`
	// Wrong counts B's hits whose bytes did not verify, over every phase;
	// it must be 0.
	Wrong uint64 `json:"wrong_payloads"`
	// Limited counts A's RATE_LIMITED answers over every flood.
	Limited uint64   `json:"noisy_limited"`
	Notes   []string `json:"notes,omitempty"`
}

// NoisyParams records the run's parameters.
type NoisyParams struct {
	Victim        string  `json:"victim_tenant"`
	Noisy         string  `json:"noisy_tenant"`
	Quota         float64 `json:"quota_ops_per_sec"`
	FloodFactor   float64 `json:"flood_factor"`
	FloodRate     float64 `json:"flood_rate_per_sec"`
	VictimRate    float64 `json:"victim_rate_per_sec"`
	Size          int     `json:"size"`
	FloodSize     int     `json:"flood_size"`
	Keys          int     `json:"keys"`
	VictimConns   int     `json:"victim_conns"`
	FloodConns    int     `json:"flood_conns"`
	VictimWorkers int     `json:"victim_workers"`
	FloodWorkers  int     `json:"flood_workers"`
	VictimPacer   Pacer   `json:"victim_pacer"`
	FloodPacer    Pacer   `json:"flood_pacer"`
	DurationNs    int64   `json:"duration_ns"`
	WarmupNs      int64   `json:"warmup_ns"`
	SliceNs       int64   `json:"slice_ns"`
	SettleNs      int64   `json:"settle_ns"`
	Reps          int     `json:"reps"`
	FloodInProc   bool    `json:"flood_in_process"`
	GoMaxProcs    int     `json:"gomaxprocs"`
	ClientNumCPU  int     `json:"client_num_cpu"`
}

// NoisyRep is one rep: B alone and B under the flood.
type NoisyRep struct {
	Rep int `json:"rep"`
	// FloodFirst is true when the flood phase ran first.
	FloodFirst bool       `json:"flood_first"`
	Alone      NoisyPhase `json:"alone"`
	Flood      NoisyPhase `json:"flood"`
	P99Ratio   float64    `json:"p99_ratio"`
	// WrongUnmeasured counts B's wrong payloads outside the measured
	// windows (warm-up, settling); they count in NoisyReport.Wrong too.
	WrongUnmeasured uint64 `json:"wrong_payloads_unmeasured"`
}

// NoisyPhase is one phase of a rep.
type NoisyPhase struct {
	Name string `json:"name"` // "alone" or "flood"
	// Slices is the number of windows the phase was measured in.
	Slices int         `json:"slices"`
	Victim VictimStats `json:"victim"`
	// MachineBusyPct and MachineStealPct are the share of the machine's
	// CPU time (all CPUs, every process) that was busy, and that the
	// hypervisor stole, over the phase's windows; 0 where unknown (not
	// Linux).
	MachineBusyPct  float64 `json:"machine_busy_pct"`
	MachineStealPct float64 `json:"machine_steal_pct"`
	// Noisy is the flood's record; nil in the alone phase.
	Noisy *FloodStats `json:"noisy,omitempty"`
}

// VictimStats is B's record of one phase. Latencies run from the moment a
// request was issued (handed to the workers) to its answer.
type VictimStats struct {
	Seconds    float64 `json:"seconds"`
	TargetRate float64 `json:"target_per_sec"`
	// Due counts the measured requests that fell due; Completed those
	// answered (Due - Completed were dropped: the queue was full).
	Due        uint64  `json:"due"`
	Completed  uint64  `json:"completed"`
	Dropped    uint64  `json:"dropped"`
	Hits       uint64  `json:"hits"`
	Misses     uint64  `json:"misses"`
	Errors     uint64  `json:"errors"`
	Wrong      uint64  `json:"wrong_payloads"`
	RatePerSec float64 `json:"rate_per_sec"`
	MeanNs     int64   `json:"mean_ns"`
	P50Ns      int64   `json:"p50_ns"`
	P99Ns      int64   `json:"p99_ns"`
	P999Ns     int64   `json:"p999_ns"`
	MaxNs      int64   `json:"max_ns"`
	// For diagnosis: the pacer lag runs from the moment a request fell due
	// to the moment it was issued (the pacer's timer waking late; not part
	// of the latency), the service time from the moment a worker sent it
	// to the answer (the latency less the wait for a free worker).
	LagP50Ns     int64  `json:"lag_p50_ns"`
	LagP99Ns     int64  `json:"lag_p99_ns"`
	ServiceP50Ns int64  `json:"service_p50_ns"`
	ServiceP99Ns int64  `json:"service_p99_ns"`
	FirstError   string `json:"first_error,omitempty"`
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

func floodLine(s *FloodStats) string {
	if s == nil {
		return ""
	}
	return fmt.Sprintf("; A offered %d (%s/s) accepted %d limited %d errors %d",
		s.Offered, fmtRate(s.OfferedPerSec), s.Accepted, s.Limited, s.Errors)
}

func medianRatio(reps []NoisyRep) float64 {
	var rs []float64
	for _, r := range reps {
		if r.P99Ratio > 0 {
			rs = append(rs, r.P99Ratio)
		}
	}
	if len(rs) == 0 {
		return 0
	}
	slices.Sort(rs)
	n := len(rs)
	if n%2 == 1 {
		return rs[n/2]
	}
	return (rs[n/2-1] + rs[n/2]) / 2
}

func (r *NoisyReport) addNotes() {
	var errs, drops, misses, floodErrs, floodDrops uint64
	for _, rp := range r.Reps {
		for _, ph := range []NoisyPhase{rp.Alone, rp.Flood} {
			errs += ph.Victim.Errors
			drops += ph.Victim.Dropped
			misses += ph.Victim.Misses
			if ph.Noisy != nil {
				floodErrs += ph.Noisy.Errors
				floodDrops += ph.Noisy.Offered - ph.Noisy.Sent
			}
		}
	}
	if r.Limited == 0 && len(r.Reps) > 0 {
		r.Notes = append(r.Notes, "the noisy tenant got no RATE_LIMITED answer: is --quota the tenant's ops_per_sec on the server?")
	}
	if errs > 0 || misses > 0 || drops > 0 {
		r.Notes = append(r.Notes, fmt.Sprintf("victim: %d errors, %d misses, %d requests dropped (queue full)", errs, misses, drops))
	}
	if floodErrs > 0 || floodDrops > 0 {
		r.Notes = append(r.Notes, fmt.Sprintf("flood: %d errors, %d requests not sent (every worker busy)", floodErrs, floodDrops))
	}
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

	var phase atomic.Int32
	var due, dropped [3]atomic.Uint64
	queue := make(chan victimReq, max(1024, int(cfg.VictimRate)))
	workers := make([]*victimWorker, cfg.VictimWorkers)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range workers {
		v.seq++
		w := &victimWorker{v: v, rng: rand.New(rand.NewPCG(v.seq, uint64(start.UnixNano()))),
			keys: make([]client.BlockKey, 1), dst: [][]byte{make([]byte, cfg.Size)}, res: make([]client.GetResult, 1)}
		workers[i] = w
		wg.Go(func() { w.run(ctx, queue) })
	}
	pctx, stopPacing := context.WithCancel(ctx)
	paced := make(chan struct{})
	go func() {
		defer close(paced)
		pace(pctx, start, time.Time{}, cfg.VictimRate, cfg.VictimPacer, func(t time.Time) {
			ph := phase.Load()
			due[ph].Add(1)
			select {
			case queue <- victimReq{due: t, issued: time.Now(), phase: ph}:
			default:
				dropped[ph].Add(1)
			}
		})
	}()

	var cpu [3]phaseCPU
	floodOn := false
	var floodStats FloodStats
	var floodErr error
	setFlood := func(on bool) {
		if on == floodOn || floodErr != nil {
			return
		}
		if on {
			if floodErr = flood.Start(ctx); floodErr == nil {
				floodOn = true
			}
			return
		}
		floodOn = false
		st, err := flood.Stop()
		if err != nil {
			floodErr = err
		}
		floodStats.add(st)
	}
	err = sleepCtx(ctx, cfg.Warmup)
	for j := 0; j < 2*n && err == nil && floodErr == nil; j++ {
		withFlood := floodFirst != ((j+1)/2%2 == 1)
		setFlood(withFlood)
		if floodErr != nil {
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
		c0, t0 := readCPU(), time.Now()
		phase.Store(ph)
		err = sleepCtx(ctx, slice)
		phase.Store(phaseNone)
		c1 := readCPU()
		cpu[ph].wall += time.Since(t0)
		cpu[ph].busy += c1.busy - c0.busy
		cpu[ph].stel += c1.steal - c0.steal
		cpu[ph].total += c1.total - c0.total
	}
	stopPacing()
	<-paced
	close(queue)
	wg.Wait()
	setFlood(false)
	if err == nil {
		err = ctx.Err()
	}
	if err == nil && floodErr != nil {
		err = fmt.Errorf("flood: %w", floodErr)
	}
	fs := floodStats
	fl.Noisy = &fs
	for _, p := range []struct {
		ph  *NoisyPhase
		idx int
	}{{&alone, phaseAlone}, {&fl, phaseFlood}} {
		s := &p.ph.Victim
		var hist, lag, svc Histogram
		for _, w := range workers {
			r := &w.rec[p.idx]
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
		c := cpu[p.idx]
		s.Seconds, s.TargetRate = c.wall.Seconds(), cfg.VictimRate
		s.Due, s.Dropped = due[p.idx].Load(), dropped[p.idx].Load()
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
			p.ph.MachineBusyPct = 100 * float64(c.busy) / float64(c.total)
			p.ph.MachineStealPct = 100 * float64(c.stel) / float64(c.total)
		}
	}
	for _, w := range workers {
		wrongUnmeasured += w.rec[phaseNone].wrong
	}
	return alone, fl, wrongUnmeasured, err
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

// WriteJSON writes the report as indented JSON.
func (r *NoisyReport) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// Verdict is the one-line summary of the run.
func (r *NoisyReport) Verdict() string {
	return fmt.Sprintf("B p99 rise: median %.1f%% over %d reps (target < 20%%)", r.MedianP99RisePct, len(r.Reps))
}

// WriteTable writes one row per phase, the notes and the verdict line.
func (r *NoisyReport) WriteTable(w io.Writer) error {
	p := r.Params
	fmt.Fprintf(w, "victim %q: %s GET/s of %s (%s pacer); noisy %q: quota %s ops/s, flood %s req/s of %s GETs (%s pacer, %s); %s phases\n",
		p.Victim, fmtRate(p.VictimRate), FormatSize(int64(p.Size)), p.VictimPacer, p.Noisy, fmtRate(p.Quota), fmtRate(p.FloodRate),
		FormatSize(int64(p.FloodSize)), p.FloodPacer, map[bool]string{true: "in process", false: "separate process"}[p.FloodInProc],
		time.Duration(p.DurationNs))
	if p.SliceNs < p.DurationNs {
		fmt.Fprintf(w, "each phase measured in windows of %s interleaved ABBA with the other phase's, %s settling after each flood toggle\n",
			time.Duration(p.SliceNs), time.Duration(p.SettleNs))
	}
	fmt.Fprint(w, "busy, steal: share of the machine's CPU time busy, and stolen by the hypervisor, during the phase\n\n")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "rep\tphase\tB req/s\tB p50\tB p99\tB p999\tB max\tB wrong\tB err\tA offered\tA accepted\tA limited\tA err\tbusy\tsteal\tp99 ratio\t")
	for _, rp := range r.Reps {
		phases := []NoisyPhase{rp.Alone, rp.Flood}
		if rp.FloodFirst {
			phases[0], phases[1] = phases[1], phases[0]
		}
		for i, ph := range phases {
			v := ph.Victim
			a := []string{"-", "-", "-", "-"}
			if s := ph.Noisy; s != nil {
				a = []string{strconv.FormatUint(s.Offered, 10), strconv.FormatUint(s.Accepted, 10),
					strconv.FormatUint(s.Limited, 10), strconv.FormatUint(s.Errors, 10)}
			}
			ratio := ""
			if i == 1 {
				ratio = strconv.FormatFloat(rp.P99Ratio, 'f', 3, 64)
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\t%.0f%%\t%.1f%%\t%s\t\n", rp.Rep, ph.Name, fmtRate(v.RatePerSec),
				fmtDur(v.P50Ns), fmtDur(v.P99Ns), fmtDur(v.P999Ns), fmtDur(v.MaxNs), v.Wrong, v.Errors+v.Misses,
				a[0], a[1], a[2], a[3], ph.MachineBusyPct, ph.MachineStealPct, ratio)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "\nmedian p99 ratio (flood/alone): %.3f; B wrong payloads: %d; A RATE_LIMITED answers: %d\n",
		r.MedianP99Ratio, r.Wrong, r.Limited)
	for _, n := range r.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	_, err := fmt.Fprintln(w, r.Verdict())
	return err
}
