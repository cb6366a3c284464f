// Package live replays a Mooncake trace against a running gpucached with
// real payloads ("gpucache-bench replay --live"): each request looks up
// its block chain, reads the cached leading run back (checking every byte)
// and stores the rest, at the trace's arrival times (optionally sped up),
// with a bounded number of requests in flight. It reports the hit ratio, the
// throughput and the latency, next to the simulator's hit ratio for the
// same requests and capacity.
package live

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpucache/gpucache/client"
	"github.com/gpucache/gpucache/tools/internal/replay"
)

// ModelBlockBytes is the KV payload of one 512-token block of Llama-3-8B in
// fp16: 2 (K and V) × 32 layers × 8 KV heads × 128 head dim × 2 bytes × 512
// tokens = 64 MiB.
const ModelBlockBytes = 64 << 20

// DefaultScale divides ModelBlockBytes into the replayed payload: 256 KiB.
const DefaultScale = 256

// maxSlab is the largest slab Size suggests (the daemon's default slab).
const maxSlab = 64 << 20

// PayloadBytes is the payload of every replayed block at scale: the model's
// block bytes divided by scale (at least 1 byte). Every block, a partial one
// too, carries this many bytes, so that the daemon's capacity in blocks is
// exact.
func PayloadBytes(scale int) int {
	if scale < 1 {
		scale = 1
	}
	return max(1, ModelBlockBytes/scale)
}

// Sizing is the hot tier a live replay needs so that the daemon holds
// exactly as many blocks as the simulator's cache.
type Sizing struct {
	UniqueBlocks   int     `json:"unique_blocks"`   // distinct hash ids of the replayed requests
	CapacityFrac   float64 `json:"capacity_frac"`   // of UniqueBlocks
	CapacityBlocks int     `json:"capacity_blocks"` // floor(frac × unique), as the simulator
	PayloadBytes   int     `json:"payload_bytes"`   // per block
	// SlotBytes is the daemon's size class for the payload: PayloadBytes
	// rounded up to a power of two (at least 4 KiB). Run the daemon with
	// --hot-min-class and --hot-max-class both equal to it, so every block
	// takes one slot of the only class.
	SlotBytes int `json:"slot_bytes"`
	// SlabBytes is a --hot-slab that divides CapacityBytes: a multiple of
	// SlotBytes (and of 4 KiB), at most 64 MiB where possible.
	SlabBytes int `json:"slab_bytes"`
	// CapacityBytes is --hot-capacity: CapacityBlocks × SlotBytes.
	CapacityBytes int64 `json:"capacity_bytes"`
}

// Size computes the daemon settings for replaying reqs at capacity frac
// (0 < frac <= 1) with payloadBytes per block.
func Size(reqs []replay.Request, frac float64, payloadBytes int) (Sizing, error) {
	if !(frac > 0 && frac <= 1) {
		return Sizing{}, fmt.Errorf("live: capacity fraction %v not in (0, 1]", frac)
	}
	if payloadBytes < 1 {
		return Sizing{}, fmt.Errorf("live: payload of %d bytes", payloadBytes)
	}
	u := replay.UniqueBlocks(reqs)
	sz := Sizing{UniqueBlocks: u, CapacityFrac: frac, CapacityBlocks: int(frac * float64(u)), PayloadBytes: payloadBytes}
	if sz.CapacityBlocks < 1 {
		return sz, fmt.Errorf("live: %v of %d unique blocks is less than one block", frac, u)
	}
	sz.SlotBytes = max(4096, 1<<bits.Len(uint(payloadBytes-1)))
	// The slab holds g slots, g a divisor of the capacity in blocks, as
	// large as fits maxSlab (a slot larger than that gets a slab of its own).
	g := 1
	for d := 1; d <= sz.CapacityBlocks && d*sz.SlotBytes <= maxSlab; d++ {
		if sz.CapacityBlocks%d == 0 {
			g = d
		}
	}
	sz.SlabBytes = g * sz.SlotBytes
	sz.CapacityBytes = int64(sz.CapacityBlocks) * int64(sz.SlotBytes)
	return sz, nil
}

// Clock paces the replay and times it. Tests inject a fake.
type Clock interface {
	Now() time.Time
	// Sleep waits d or until ctx is done (then it returns ctx's error).
	Sleep(ctx context.Context, d time.Duration) error
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Config configures Run.
type Config struct {
	// Client is the connection to the daemon (Addr, Tenant, Secret, TLS,
	// Conns; Conns defaults to Workers).
	Client client.Config
	// Requests are the trace's requests to replay, in trace order.
	Requests []replay.Request
	// PayloadBytes per block. Default PayloadBytes(DefaultScale) (256 KiB).
	PayloadBytes int
	// Speedup divides the trace's inter-arrival times; 0 replays as fast as
	// Workers allow.
	Speedup float64
	// Workers bounds the requests in flight. Default 4.
	Workers int
	// Namespace of the replayed blocks. Zero: a Llama-3-8B-like namespace
	// with 512-token blocks under the client's tenant. Its
	// Layout.BlockTokens must be replay.BlockTokens.
	Namespace client.Namespace
	// CapacityFrac is the daemon's capacity as a fraction of the requests'
	// unique blocks (see Size); Run simulates SimPolicy at it for
	// comparison. 0: no simulation.
	CapacityFrac float64
	// SimPolicy is the simulator's policy to compare with. Default "lru".
	SimPolicy string
	// LeaseTTL, when positive, leases the looked-up run until its GET (the
	// blocks cannot be evicted in between). Default 0: no lease, so the
	// daemon's policy sees exactly the simulator's accesses.
	LeaseTTL time.Duration
	// Clock paces and times the replay. Default: the real clock.
	Clock Clock
	// Progress, if set, is called after each request with the number done
	// (from the workers; it must be safe for concurrent use).
	Progress func(done int)
}

// Latency is a set of latency percentiles, in milliseconds.
type Latency struct {
	P50  float64 `json:"p50_ms"`
	P90  float64 `json:"p90_ms"`
	P99  float64 `json:"p99_ms"`
	Max  float64 `json:"max_ms"`
	Mean float64 `json:"mean_ms"`
}

// Report is the outcome of a live replay.
type Report struct {
	Addr     string  `json:"addr"`
	Requests int     `json:"requests"`
	Failed   int     `json:"failed_requests"` // requests with an error (counted, not retried)
	FirstErr string  `json:"first_error,omitempty"`
	Speedup  float64 `json:"speedup"`
	Workers  int     `json:"workers"`
	Blocks   int64   `json:"blocks"` // block accesses
	// LookupHits: the leading run the daemon reported cached.
	LookupHits int64 `json:"lookup_hits"`
	// HitBlocks: the leading run actually read back intact (what an engine
	// can use); the hit ratio's numerator, as the simulator's.
	HitBlocks     int64   `json:"hit_blocks"`
	HitRatio      float64 `json:"hit_ratio"`
	GetMisses     int64   `json:"get_misses"`     // looked-up blocks gone by their GET
	WrongPayloads int64   `json:"wrong_payloads"` // hits whose bytes differ from what was stored
	PutStored     int64   `json:"put_stored"`
	PutExists     int64   `json:"put_exists"`  // already cached: a touch
	PutRefused    int64   `json:"put_refused"` // not admitted, no space, too large
	PromptTokens  int64   `json:"prompt_tokens"`
	SavedTokens   int64   `json:"saved_tokens"`
	PayloadBytes  int     `json:"payload_bytes"`
	BytesRead     int64   `json:"bytes_read"`
	BytesWritten  int64   `json:"bytes_written"`
	Seconds       float64 `json:"seconds"`
	RequestsPerS  float64 `json:"requests_per_s"`
	GiBPerS       float64 `json:"gib_per_s"` // read + written
	Latency       Latency `json:"latency"`   // per request: lookup + get + put
	// MaxLagMS is how far behind its (sped-up) arrival time the latest
	// request started: the replay kept up when it is small.
	MaxLagMS float64 `json:"max_lag_ms"`

	Sizing *Sizing `json:"sizing,omitempty"`
	// Sim is the simulator's result for the same requests, SimPolicy and
	// CapacityFrac; HitRatioDiff is HitRatio − Sim.HitRatio.
	Sim          *replay.Result `json:"sim,omitempty"`
	HitRatioDiff float64        `json:"hit_ratio_diff"`
	// ServerBlocksBefore is the number of blocks the daemon held before the
	// replay (from STAT; 0 when it cannot say): a daemon that is not empty
	// makes the hit ratio incomparable with the simulator's.
	ServerBlocksBefore uint64 `json:"server_blocks_before"`
	// Server holds a few of the daemon's counters after the replay
	// (hot_blocks, hot_evictions, hot_capacity_bytes...), when STAT works.
	Server map[string]uint64 `json:"server,omitempty"`
}

// DefaultNamespace is the namespace of replayed blocks under tenant.
func DefaultNamespace(tenant string) client.Namespace {
	return client.Namespace{
		Tenant: tenant, TrustDomain: "local", ModelID: "replay/meta-llama-3-8b", ConfigRevision: "main",
		TokenizerRevision: "main", RoPE: "default", DType: "fp16", Quantization: "none",
		Layout: client.Layout{Format: "replay-scaled", TPSize: 1, PPSize: 1, LayerCount: 32, KVHeads: 8,
			HeadDim: 128, BlockTokens: replay.BlockTokens},
	}
}

// Run replays cfg.Requests against the daemon and reports. An error means
// the replay could not run (bad config, no connection, ctx done); failures
// of single requests are counted in the report.
func Run(ctx context.Context, cfg Config) (Report, error) {
	if err := cfg.defaults(); err != nil {
		return Report{}, err
	}
	rep := Report{Addr: cfg.Client.Addr, Requests: len(cfg.Requests), Speedup: cfg.Speedup, Workers: cfg.Workers,
		PayloadBytes: cfg.PayloadBytes}
	if cfg.CapacityFrac > 0 {
		sz, err := Size(cfg.Requests, cfg.CapacityFrac, cfg.PayloadBytes)
		if err != nil {
			return rep, err
		}
		rep.Sizing = &sz
	}
	c, err := client.Dial(ctx, cfg.Client)
	if err != nil {
		return rep, err
	}
	defer c.Close()
	ns := cfg.Namespace
	if ns == (client.Namespace{}) {
		ns = DefaultNamespace(c.Tenant())
	}
	if ns.Layout.BlockTokens != replay.BlockTokens {
		return rep, fmt.Errorf("live: namespace block_tokens %d, want %d", ns.Layout.BlockTokens, replay.BlockTokens)
	}
	if err := ns.Validate(); err != nil {
		return rep, fmt.Errorf("live: %w", err)
	}
	dig, err := ns.Digest()
	if err != nil {
		return rep, fmt.Errorf("live: %w", err)
	}
	if lim := c.Limits(); uint64(cfg.PayloadBytes) > uint64(lim.MaxPayload) {
		return rep, fmt.Errorf("live: payload of %d bytes exceeds the server's largest block (%d)", cfg.PayloadBytes, lim.MaxPayload)
	}

	if st, err := c.Stat(ctx); err == nil {
		rep.ServerBlocksBefore = st["hot_blocks"]
	}

	r := &runner{cfg: &cfg, c: c, ns: ns, dig: dig, lat: make([]time.Duration, len(cfg.Requests))}
	jobs := make(chan int)
	var wg sync.WaitGroup
	ws := make([]*worker, cfg.Workers)
	for i := range ws {
		ws[i] = &worker{r: r}
		wg.Go(func() {
			for j := range jobs {
				ws[i].do(ctx, j)
			}
		})
	}
	start := cfg.Clock.Now()
	var maxLag time.Duration
	var runErr error
	if len(cfg.Requests) > 0 {
		t0 := cfg.Requests[0].Timestamp
	dispatch:
		for i, q := range cfg.Requests {
			var due time.Time // zero: as fast as possible
			if cfg.Speedup > 0 {
				due = start.Add(time.Duration(float64(q.Timestamp-t0) * float64(time.Millisecond) / cfg.Speedup))
				if d := due.Sub(cfg.Clock.Now()); d > 0 {
					if err := cfg.Clock.Sleep(ctx, d); err != nil {
						runErr = err
						break
					}
				}
			}
			select {
			case jobs <- i:
			case <-ctx.Done():
				runErr = ctx.Err()
				break dispatch
			}
			if !due.IsZero() {
				maxLag = max(maxLag, cfg.Clock.Now().Sub(due))
			}
		}
	}
	close(jobs)
	wg.Wait()
	elapsed := cfg.Clock.Now().Sub(start)
	if runErr != nil {
		return rep, runErr
	}

	for _, w := range ws {
		rep.add(&w.st)
	}
	rep.finish(elapsed, r.lat, maxLag)
	if st, err := c.Stat(ctx); err == nil {
		rep.Server = map[string]uint64{}
		for _, k := range []string{"hot_blocks", "hot_evictions", "hot_capacity_bytes", "hot_puts", "hot_put_rejects", "hot_bytes_mapped"} {
			if v, ok := st[k]; ok {
				rep.Server[k] = v
			}
		}
	}
	if cfg.CapacityFrac > 0 {
		sim, err := replay.Simulate(cfg.Requests, cfg.SimPolicy, cfg.CapacityFrac, nil)
		if err != nil {
			return rep, fmt.Errorf("live: simulate: %w", err)
		}
		rep.Sim = &sim
		rep.HitRatioDiff = rep.HitRatio - sim.HitRatio
	}
	return rep, nil
}

func (cfg *Config) defaults() error {
	if cfg.PayloadBytes == 0 {
		cfg.PayloadBytes = PayloadBytes(DefaultScale)
	}
	if cfg.Workers == 0 {
		cfg.Workers = 4
	}
	if cfg.Client.Conns == 0 {
		cfg.Client.Conns = min(cfg.Workers, 64)
	}
	if cfg.SimPolicy == "" {
		cfg.SimPolicy = "lru"
	}
	if cfg.Clock == nil {
		cfg.Clock = realClock{}
	}
	return cfg.check()
}

// check checks a config with its defaults filled.
func (cfg *Config) check() error {
	switch {
	case cfg.PayloadBytes < 1:
		return fmt.Errorf("live: payload of %d bytes", cfg.PayloadBytes)
	case cfg.Workers < 1:
		return fmt.Errorf("live: %d workers", cfg.Workers)
	case cfg.Speedup < 0 || math.IsNaN(cfg.Speedup) || math.IsInf(cfg.Speedup, 0):
		return fmt.Errorf("live: speedup %v (want >= 0; 0: as fast as possible)", cfg.Speedup)
	case cfg.CapacityFrac < 0 || cfg.CapacityFrac > 1 || math.IsNaN(cfg.CapacityFrac):
		return fmt.Errorf("live: capacity fraction %v not in [0, 1]", cfg.CapacityFrac)
	case cfg.LeaseTTL < 0:
		return fmt.Errorf("live: negative lease TTL")
	}
	if cfg.CapacityFrac > 0 && !slices.Contains(replay.Policies(), cfg.SimPolicy) {
		return fmt.Errorf("live: unknown simulator policy %q (known: %v)", cfg.SimPolicy, replay.Policies())
	}
	return nil
}

// runner is what the workers share.
type runner struct {
	cfg  *Config
	c    *client.Client
	ns   client.Namespace
	dig  client.NamespaceDigest
	lat  []time.Duration // per request, each written by one worker
	done atomic.Int64
}

// stats are one worker's counters.
type stats struct {
	failed                    int
	firstErr                  error
	blocks, lookupHits, hits  int64
	getMisses, wrong          int64
	stored, exists, refused   int64
	promptTokens, savedTokens int64
	bytesRead, bytesWritten   int64
}

// worker replays requests one at a time, reusing its buffers.
type worker struct {
	r       *runner
	st      stats
	keys    []client.BlockKey
	parents []client.BlockKey
	toks    [][]uint32
	bufs    [][]byte // GET destinations, then PUT payloads
	res     []client.GetResult
	puts    []client.PutBlock
}

func (w *worker) do(ctx context.Context, i int) {
	r := w.r
	start := r.cfg.Clock.Now()
	if err := w.request(ctx, r.cfg.Requests[i]); err != nil {
		w.st.failed++
		if w.st.firstErr == nil {
			w.st.firstErr = fmt.Errorf("request %d: %w", i, err)
		}
	}
	r.lat[i] = r.cfg.Clock.Now().Sub(start)
	n := r.done.Add(1)
	if r.cfg.Progress != nil {
		r.cfg.Progress(int(n))
	}
}

// request replays one trace request: LOOKUP, GET of the leading run, PUT
// of the rest.
func (w *worker) request(ctx context.Context, q replay.Request) error {
	r := w.r
	blocks := replay.PromptBlocks(q)
	n := len(blocks)
	if n == 0 {
		return nil
	}
	if n != len(q.HashIDs) {
		return fmt.Errorf("live: %d prompt blocks for %d hash ids", n, len(q.HashIDs))
	}
	w.grow(n)
	var parent client.BlockKey
	for j, b := range blocks {
		t := int(b.Tokens)
		if t < 1 || t > replay.BlockTokens {
			return fmt.Errorf("live: block %d of %d tokens", j, t)
		}
		w.toks[j] = SyntheticTokens(w.toks[j][:0], q.HashIDs[j], t)
		w.parents[j] = parent
		w.keys[j] = client.KeyFor(r.dig, parent, w.toks[j], uint32(t))
		parent = w.keys[j]
		w.st.promptTokens += int64(t)
	}
	w.st.blocks += int64(n)

	hits, lease, err := r.c.Lookup(ctx, r.ns, w.keys[:n], r.cfg.LeaseTTL)
	if err != nil {
		return fmt.Errorf("lookup: %w", err)
	}
	hits = min(max(hits, 0), n)
	w.st.lookupHits += int64(hits)

	// The usable run: leading blocks read back intact.
	run := 0
	if hits > 0 {
		var opts []client.GetOption
		if lease != 0 {
			opts = append(opts, client.WithLease(lease))
		}
		r.c.GetInto(ctx, r.ns, w.keys[:hits], w.bufs[:hits], w.res[:hits], opts...)
		for j := range hits {
			res := &w.res[j]
			if !res.Hit {
				if errors.Is(res.Reason, client.ErrNotCached) {
					w.st.getMisses++
				} else if err == nil {
					err = fmt.Errorf("get: %w", res.Reason)
				}
				break
			}
			w.st.bytesRead += int64(len(res.Data))
			if !CheckPayload(res.Data, w.keys[j], r.cfg.PayloadBytes) {
				w.st.wrong++
				break
			}
			run++
		}
		if err != nil {
			return err
		}
	}
	w.st.hits += int64(run)
	for j := range run {
		w.st.savedTokens += int64(blocks[j].Tokens)
	}

	if run == n {
		return nil
	}
	w.puts = w.puts[:0]
	for j := run; j < n; j++ {
		buf := w.bufs[j][:r.cfg.PayloadBytes]
		FillPayload(buf, w.keys[j])
		w.puts = append(w.puts, client.PutBlock{Key: w.keys[j], Parent: w.parents[j], ValidLength: blocks[j].Tokens,
			Position: uint64(j) * replay.BlockTokens, TokenIDs: w.toks[j], Data: buf})
	}
	st, err := r.c.Put(ctx, r.ns, w.puts)
	for _, s := range st {
		switch s {
		case client.StatusStored:
			w.st.stored++
			w.st.bytesWritten += int64(r.cfg.PayloadBytes)
		case client.StatusExists:
			w.st.exists++
			w.st.bytesWritten += int64(r.cfg.PayloadBytes)
		case client.StatusMiss: // no answer: err says why
		case client.StatusKeyMismatch:
			if err == nil {
				err = fmt.Errorf("put: the server derives another key (%s)", s)
			}
		default:
			w.st.refused++
		}
	}
	if err != nil {
		return fmt.Errorf("put: %w", err)
	}
	return nil
}

// grow sizes the worker's buffers for n blocks.
func (w *worker) grow(n int) {
	size := w.r.cfg.PayloadBytes
	for len(w.keys) < n {
		w.keys = append(w.keys, client.BlockKey{})
		w.parents = append(w.parents, client.BlockKey{})
		w.toks = append(w.toks, make([]uint32, 0, replay.BlockTokens))
		w.bufs = append(w.bufs, make([]byte, size))
		w.res = append(w.res, client.GetResult{})
	}
}

// SyntheticTokens appends the n token ids of a block with trace hash id h:
// a function of (h, index) only, so that equal hash-id prefixes give equal
// block keys; the first two tokens spell out h, so different hash ids give
// different keys.
func SyntheticTokens(dst []uint32, h uint64, n int) []uint32 {
	lo, hi := uint32(h), uint32(h>>32)
	for j := range n {
		switch j {
		case 0:
			dst = append(dst, lo)
		case 1:
			dst = append(dst, hi)
		default:
			dst = append(dst, lo^uint32(j)*0x9e3779b9)
		}
	}
	return dst
}

// FillPayload writes the deterministic payload of key into b: 8-byte words,
// word i = (key word i mod 4) XOR i × a golden-ratio constant.
func FillPayload(b []byte, key client.BlockKey) {
	var seed [4]uint64
	for k := range seed {
		seed[k] = binary.LittleEndian.Uint64(key[8*k:])
	}
	i := 0
	for ; i+8 <= len(b); i += 8 {
		w := uint64(i / 8)
		binary.LittleEndian.PutUint64(b[i:], seed[w&3]^w*0x9e3779b97f4a7c15)
	}
	if i < len(b) {
		var tail [8]byte
		w := uint64(i / 8)
		binary.LittleEndian.PutUint64(tail[:], seed[w&3]^w*0x9e3779b97f4a7c15)
		copy(b[i:], tail[:])
	}
}

// CheckPayload reports whether b is exactly key's payload of size bytes.
func CheckPayload(b []byte, key client.BlockKey, size int) bool {
	if len(b) != size {
		return false
	}
	var seed [4]uint64
	for k := range seed {
		seed[k] = binary.LittleEndian.Uint64(key[8*k:])
	}
	i := 0
	for ; i+8 <= len(b); i += 8 {
		w := uint64(i / 8)
		if binary.LittleEndian.Uint64(b[i:]) != seed[w&3]^w*0x9e3779b97f4a7c15 {
			return false
		}
	}
	if i < len(b) {
		var tail [8]byte
		w := uint64(i / 8)
		binary.LittleEndian.PutUint64(tail[:], seed[w&3]^w*0x9e3779b97f4a7c15)
		for k := i; k < len(b); k++ {
			if b[k] != tail[k-i] {
				return false
			}
		}
	}
	return true
}

func (rep *Report) add(s *stats) {
	rep.Failed += s.failed
	if s.firstErr != nil && rep.FirstErr == "" {
		rep.FirstErr = s.firstErr.Error()
	}
	rep.Blocks += s.blocks
	rep.LookupHits += s.lookupHits
	rep.HitBlocks += s.hits
	rep.GetMisses += s.getMisses
	rep.WrongPayloads += s.wrong
	rep.PutStored += s.stored
	rep.PutExists += s.exists
	rep.PutRefused += s.refused
	rep.PromptTokens += s.promptTokens
	rep.SavedTokens += s.savedTokens
	rep.BytesRead += s.bytesRead
	rep.BytesWritten += s.bytesWritten
}

func (rep *Report) finish(elapsed time.Duration, lat []time.Duration, maxLag time.Duration) {
	if rep.Blocks > 0 {
		rep.HitRatio = float64(rep.HitBlocks) / float64(rep.Blocks)
	}
	rep.Seconds = elapsed.Seconds()
	if rep.Seconds > 0 {
		rep.RequestsPerS = float64(rep.Requests) / rep.Seconds
		rep.GiBPerS = float64(rep.BytesRead+rep.BytesWritten) / (1 << 30) / rep.Seconds
	}
	rep.Latency = Percentiles(lat)
	rep.MaxLagMS = ms(maxLag)
}

// Percentiles summarises latencies (nearest rank).
func Percentiles(lat []time.Duration) Latency {
	if len(lat) == 0 {
		return Latency{}
	}
	s := slices.Clone(lat)
	slices.Sort(s)
	at := func(p float64) time.Duration {
		k := int(math.Ceil(p*float64(len(s)))) - 1
		return s[min(max(k, 0), len(s)-1)]
	}
	var sum time.Duration
	for _, d := range s {
		sum += d
	}
	return Latency{P50: ms(at(0.50)), P90: ms(at(0.90)), P99: ms(at(0.99)), Max: ms(s[len(s)-1]),
		Mean: ms(sum / time.Duration(len(s)))}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
