package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpucache/gpucache/client"
)

// Output says where progress goes. A nil Progress prints none.
type Output struct {
	Progress io.Writer
	// TTY draws a redrawn bar instead of plain lines.
	TTY bool
}

// Run runs every case of cfg against the server and returns the report.
// When ctx ends early it returns the cases finished so far with ctx's
// error.
func Run(ctx context.Context, cfg Config, out Output) (*Report, error) {
	cfg.applyDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	r := &runner{cfg: cfg, prog: newProgress(out.Progress, out.TTY)}
	ctl, err := r.dialControl(ctx)
	if err != nil {
		return nil, err
	}
	defer ctl.Close()
	var data dataClient = nodeData{ctl}
	var cl *client.Cluster
	if len(cfg.Cluster) > 0 {
		if cl, err = r.dialCluster(ctx); err != nil {
			return nil, err
		}
		defer cl.Close()
		data = clusterData{cl}
	}
	lim := ctl.Limits()
	for _, s := range cfg.Sizes {
		if uint64(s) > uint64(lim.MaxPayload) {
			return nil, fmt.Errorf("%w: size %s exceeds the server's MaxPayload %s", ErrConfig, FormatSize(int64(s)), FormatSize(int64(lim.MaxPayload)))
		}
	}
	if r.digest, err = cfg.Namespace.Digest(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	rep := &Report{
		Started: time.Now().UTC(), Addr: r.cfg.Addr, Server: ctl.ServerName(), Limits: lim,
		Params: Params{Ops: cfg.Ops, Sizes: cfg.Sizes, Conns: cfg.Conns, Batch: cfg.Batch, Pipeline: cfg.Pipeline,
			DurationNs: int64(cfg.Duration), Requests: cfg.Requests, Keys: cfg.Keys, WarmupNs: int64(cfg.Warmup),
			HoldBytes: cfg.HoldBytes, GoMaxProcs: runtime.GOMAXPROCS(0), ClientNumCPU: runtime.NumCPU()},
	}
	r.rep = rep
	if cl != nil {
		rep.Cluster = &ClusterInfo{Seeds: cfg.Cluster, Epoch: cl.View().Epoch, Members: r.members}
	}
	if cfg.HoldBytes > 0 {
		rep.Hold = r.hold(ctx, data, min(cfg.HoldBlock, int(lim.MaxPayload)))
	}
	if err := r.runCases(ctx, data); err != nil {
		return rep, err
	}
	if err := ctx.Err(); err != nil {
		return rep, err
	}
	sctx, cancel := context.WithTimeout(ctx, cfg.RequestTimeout)
	defer cancel()
	stat, err := ctl.Stat(sctx)
	if err != nil {
		return rep, fmt.Errorf("STAT after the cases: %w", err)
	}
	rep.ServerStat = stat
	rep.Summary = summaryOf(stat)
	if cl != nil {
		rep.Cluster.Nodes = r.nodeStats(sctx)
		r.addStats(cl.Stats())
		rep.Cluster.Stats = r.stats
	}
	return rep, nil
}

// runCases runs every case (size × op × conns), PUTs before GETs of each
// size, the GETs on a populated working set, appending to r.rep.Cases.
func (r *runner) runCases(ctx context.Context, data dataClient) error {
	cfg, rep := r.cfg, r.rep
	total := len(cfg.Sizes) * len(cfg.Conns) * len(cfg.Ops)
	index := 0
	for _, size := range cfg.Sizes {
		for _, op := range []string{OpPut, OpGet} {
			if !has(cfg.Ops, op) {
				continue
			}
			if op == OpGet {
				r.populate(ctx, data, size)
			}
			for _, conns := range cfg.Conns {
				if ctx.Err() != nil {
					break
				}
				index++
				res, err := r.runCase(ctx, op, size, conns, index, total)
				if err != nil {
					return err
				}
				rep.Cases = append(rep.Cases, res)
			}
		}
	}
	return nil
}

func has(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

type runner struct {
	cfg    Config
	prog   *progress
	digest client.NamespaceDigest
	rep    *Report
	// cluster, members and index are the cluster client and its view at
	// the start of a --cluster run (members empty otherwise): the per-node
	// figures attribute each key to its owner.
	cluster *client.Cluster // the run's cluster client (--cluster); owner asks it
	members []client.Member
	index   map[string]int
	stats   client.ClusterStats // summed over the run's cluster clients
	// working caches the working-set keys per size; written only by the
	// goroutine that runs the cases, before a case's workers start.
	working map[int][]client.BlockKey
}

func (r *runner) dial(ctx context.Context, conns, inflight int) (*client.Client, error) {
	return client.Dial(ctx, r.nodeConfig(r.cfg.Addr, conns, inflight))
}

func (r *runner) nodeConfig(addr string, conns, inflight int) client.Config {
	return client.Config{Addr: addr, Tenant: r.cfg.Tenant, Secret: r.cfg.Secret, TLS: r.cfg.TLS, Conns: conns,
		MaxInFlight: inflight, RequestTimeout: r.cfg.RequestTimeout, ClientName: "gpucache-bench"}
}

// dialControl dials the node the limits and the headline STAT come from:
// Addr, or for a cluster run the first seed that answers (Addr is then set
// to it).
func (r *runner) dialControl(ctx context.Context) (*client.Client, error) {
	if len(r.cfg.Cluster) == 0 {
		return r.dial(ctx, 4, 64)
	}
	var errs []error
	for _, s := range r.cfg.Cluster {
		c, err := client.Dial(ctx, r.nodeConfig(s, 1, 64))
		if err == nil {
			r.cfg.Addr = s
			return c, nil
		}
		errs = append(errs, err)
	}
	return nil, errors.Join(errs...)
}

// dialData dials the client of one case worker: a node, or a cluster
// whose every member gets one connection.
func (r *runner) dialData(ctx context.Context, inflight int) (dataClient, error) {
	if len(r.cfg.Cluster) == 0 {
		c, err := r.dial(ctx, 1, inflight)
		if err != nil {
			return nil, err
		}
		return nodeData{c}, nil
	}
	cl, err := client.DialCluster(ctx, client.ClusterConfig{Seeds: r.cfg.Cluster, Node: r.nodeConfig("", 1, inflight), RefreshInterval: -1})
	if err != nil {
		return nil, err
	}
	return clusterData{cl}, nil
}

func (r *runner) notef(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	r.rep.Notes = append(r.rep.Notes, msg)
	r.prog.note("note: %s", msg)
}

// workingTokens is the token chain of working-set block i of one size: a
// single block at position 0.
func workingTokens(size, i int) []uint32 { return []uint32{uint32(size), uint32(i)} }

// workingSet returns the Keys keys of the working set of one size. Key i
// is the first block (position 0, no parent) of the token chain
// workingTokens(size, i), so the server's key check accepts its PUT.
func (r *runner) workingSet(size int) []client.BlockKey {
	if ks, ok := r.working[size]; ok {
		return ks
	}
	ks := make([]client.BlockKey, r.cfg.Keys)
	for i := range ks {
		ks[i] = client.KeyFor(r.digest, client.BlockKey{}, workingTokens(size, i), 2)
	}
	if r.working == nil {
		r.working = make(map[int][]client.BlockKey)
	}
	r.working[size] = ks
	return ks
}

// populateShape returns populate's blocks per request and writers for a
// working set of keys blocks of size bytes: up to 16 blocks (no more than
// the working set) and about 64 MiB a request, and no more writers than
// the requests to send. Each
// writer holds one buffer per block of its request, so a large-block run
// (8 keys of 32 MiB) holds 256 MiB of buffers, not 64 blocks' worth.
func populateShape(keys, size int) (batch, workers int) {
	batch = max(1, min(16, keys, (64<<20)/max(size, 1)))
	workers = max(1, min(4, (keys+batch-1)/batch))
	return batch, workers
}

// populate writes the working set of one size (blocks already cached
// answer EXISTS).
func (r *runner) populate(ctx context.Context, c dataClient, size int) {
	batch, workers := populateShape(r.cfg.Keys, size)
	keys := r.workingSet(size)
	var next atomic.Int64
	var noSpace, failed atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			blocks := make([]client.PutBlock, 0, batch)
			bufs := make([][]byte, batch)
			for i := range bufs {
				bufs[i] = make([]byte, size)
				fill(bufs[i], byte(i))
			}
			for ctx.Err() == nil {
				lo := int(next.Add(int64(batch))) - batch
				if lo >= r.cfg.Keys {
					return
				}
				blocks = blocks[:0]
				for i := lo; i < min(lo+batch, r.cfg.Keys); i++ {
					k := keys[i]
					b := bufs[i-lo]
					stamp(b, seedOf(k))
					blocks = append(blocks, client.PutBlock{Key: k, TokenIDs: workingTokens(size, i), Data: b})
				}
				st, err := c.Put(ctx, r.cfg.Namespace, blocks)
				if err != nil {
					failed.Add(int64(len(blocks)))
					continue
				}
				for _, s := range st {
					if s == client.StatusNoSpace || s == client.StatusTooLarge || s == client.StatusReadOnly {
						noSpace.Add(1)
					}
				}
			}
		})
	}
	wg.Wait()
	if n := noSpace.Load() + failed.Load(); n > 0 {
		r.notef("working set of %d × %s: %d blocks not stored (%d refused, %d failed); GETs of them are misses",
			r.cfg.Keys, FormatSize(int64(size)), n, noSpace.Load(), failed.Load())
	}
}

// hold fills the server with about want bytes of blocks of size bytes.
func (r *runner) hold(ctx context.Context, c dataClient, size int) *HoldResult {
	want := r.cfg.HoldBytes
	res := &HoldResult{Requested: want, BlockSize: size}
	ns := r.cfg.Namespace
	ns.ModelID += "-hold"
	dig, err := ns.Digest()
	if err != nil {
		r.notef("hold: %v", err)
		return res
	}
	data := make([]byte, size)
	fill(data, 0x5A)
	const batch, workers = 16, 4
	nBlocks := (want + int64(size) - 1) / int64(size)
	var next, held, full atomic.Int64
	start := time.Now()
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			blocks := make([]client.PutBlock, 0, batch)
			for ctx.Err() == nil && full.Load() == 0 {
				lo := next.Add(batch) - batch
				if lo >= nBlocks {
					return
				}
				blocks = blocks[:0]
				for i := lo; i < min(lo+batch, nBlocks); i++ {
					toks := []uint32{uint32(i), uint32(i >> 32)}
					k := client.KeyFor(dig, client.BlockKey{}, toks, 2)
					blocks = append(blocks, client.PutBlock{Key: k, TokenIDs: toks, Data: data})
				}
				st, err := c.Put(ctx, ns, blocks)
				if err != nil {
					full.Add(1)
					r.prog.note("hold: %v", err)
					return
				}
				for _, s := range st {
					switch s {
					case client.StatusStored, client.StatusExists:
						held.Add(int64(size))
					default:
						full.Add(1)
					}
				}
			}
		})
	}
	wg.Wait()
	res.Held = held.Load()
	res.Blocks = int(res.Held / int64(size))
	res.Seconds = time.Since(start).Seconds()
	if res.Held < want {
		r.notef("hold: the server took %s of the %s asked for", FormatSize(res.Held), FormatSize(want))
	}
	return res
}

// caseState is shared by the goroutines of one case.
type caseState struct {
	op      string
	size    int
	from    time.Time // measurement starts
	until   time.Time // measurement ends (duration mode)
	issued  atomic.Int64
	blocks  atomic.Uint64 // progress
	putSeq  atomic.Uint64
	errOnce sync.Once
	firstEr string
}

func (cs *caseState) noteErr(err error) {
	cs.errOnce.Do(func() { cs.firstEr = err.Error() })
}

// runCase runs one (op, size, conns) case.
func (r *runner) runCase(ctx context.Context, op string, size, conns, index, total int) (CaseResult, error) {
	cfg := r.cfg
	res := CaseResult{Op: op, Size: size, SizeLabel: FormatSize(int64(size)), Conns: conns, Batch: cfg.Batch, Pipeline: cfg.Pipeline}
	clients := make([]dataClient, 0, conns)
	defer func() {
		for _, c := range clients {
			if cd, ok := c.(clusterData); ok {
				r.addStats(cd.Stats())
			}
			c.Close()
		}
	}()
	for range conns {
		c, err := r.dialData(ctx, cfg.Pipeline)
		if err != nil {
			return res, fmt.Errorf("case %s: %w", res.label(), err)
		}
		clients = append(clients, c)
	}
	now := time.Now()
	cs := &caseState{op: op, size: size, from: now.Add(cfg.Warmup)}
	cs.until = cs.from.Add(cfg.Duration)
	r.prog.begin(res.label(), index, total, func() (float64, uint64) {
		b := cs.blocks.Load()
		if cfg.Requests > 0 {
			return float64(cs.issued.Load()) / float64(cfg.Requests), b
		}
		return float64(time.Since(now)) / float64(cfg.Warmup+cfg.Duration), b
	})
	workers := make([]*worker, 0, conns*cfg.Pipeline)
	var wg sync.WaitGroup
	for i, c := range clients {
		for p := range cfg.Pipeline {
			w := newWorker(r, cs, c, uint64(i*cfg.Pipeline+p))
			workers = append(workers, w)
			wg.Go(func() { w.run(ctx) })
		}
	}
	wg.Wait()
	r.collect(&res, workers, cs)
	r.prog.end(index, total, &res)
	if err := ctx.Err(); err != nil {
		return res, err
	}
	return res, nil
}

// collect sums the workers' records of one case into res.
func (r *runner) collect(res *CaseResult, workers []*worker, cs *caseState) {
	var hist Histogram
	var last time.Time
	nodes := make([]nodeCount, len(r.members))
	for _, w := range workers {
		for i, n := range w.nodes {
			nodes[i].blocks += n.blocks
			nodes[i].bytes += n.bytes
			nodes[i].errors += n.errors
			nodes[i].misses += n.misses
			nodes[i].corrupt += n.corrupt
		}
		hist.Merge(&w.hist)
		res.Requests += w.requests
		res.Blocks += w.blocks
		res.Bytes += w.bytes
		res.Errors += w.errors
		res.Misses += w.misses
		res.Corrupt += w.corrupt
		res.ReadOnly += w.readOnly
		if w.last.After(last) {
			last = w.last
		}
	}
	if last.After(cs.from) {
		res.Seconds = last.Sub(cs.from).Seconds()
	}
	if res.Seconds > 0 {
		res.OpsPerSec = float64(res.Blocks) / res.Seconds
		res.GBPerSec = float64(res.Bytes) / res.Seconds / 1e9
	}
	for i, n := range nodes {
		nr := NodeResult{ID: r.members[i].ID, Addr: r.members[i].Addr, Blocks: n.blocks, Bytes: n.bytes,
			Errors: n.errors, Misses: n.misses, Corrupt: n.corrupt}
		if res.Seconds > 0 {
			nr.OpsPerSec = float64(n.blocks) / res.Seconds
			nr.GBPerSec = float64(n.bytes) / res.Seconds / 1e9
		}
		res.Nodes = append(res.Nodes, nr)
	}
	res.MeanNs = int64(hist.Mean())
	res.P50Ns, res.P90Ns = int64(hist.Quantile(0.50)), int64(hist.Quantile(0.90))
	res.P99Ns, res.P999Ns = int64(hist.Quantile(0.99)), int64(hist.Quantile(0.999))
	res.MaxNs = int64(hist.Max())
	res.FirstError = cs.firstEr
}

// worker issues one request at a time on a shared client; Pipeline workers
// share each client, which is how requests pipeline on its connection.
type worker struct {
	r   *runner
	cs  *caseState
	c   dataClient
	rng *rand.Rand
	// nodes is this worker's per-member share (cluster runs), by index in
	// the runner's members; counted only for measured requests.
	nodes []nodeCount
	pend  []nodeCount
	// scratch absorbs the per-member counts of a run without members.
	scratch nodeCount
	hist    Histogram

	working []client.BlockKey // GET: the working set of the case's size
	keys    []client.BlockKey
	dst     [][]byte
	res     []client.GetResult
	puts    []client.PutBlock

	requests, blocks, bytes, errors, misses, corrupt uint64
	readOnly                                         uint64 // PUT blocks answered READ_ONLY
	last                                             time.Time
}

func newWorker(r *runner, cs *caseState, c dataClient, id uint64) *worker {
	b := r.cfg.Batch
	w := &worker{r: r, cs: cs, c: c, rng: rand.New(rand.NewPCG(id, uint64(time.Now().UnixNano()))),
		keys: make([]client.BlockKey, b), nodes: make([]nodeCount, len(r.members)), pend: make([]nodeCount, len(r.members))}
	buf := w.buffers(b, cs.size)
	if cs.op == OpGet {
		w.working = r.workingSet(cs.size)
		w.dst, w.res = make([][]byte, b), make([]client.GetResult, b)
		for i := range w.dst {
			w.dst[i] = buf(i)
		}
	} else {
		w.puts = make([]client.PutBlock, b)
		for i := range w.puts {
			w.puts[i].Data = buf(i)
			fill(w.puts[i].Data, byte(id))
			w.puts[i].TokenIDs = make([]uint32, 3) // set per PUT; the key derives from them
		}
	}
	return w
}

// buffers returns a source of n buffers of size bytes: slices of one
// registered region when Config.Region is set and the client can make one
// (the worker's region, closed with its client), else fresh slices.
func (w *worker) buffers(n, size int) func(i int) []byte {
	if w.r.cfg.Region {
		if nd, ok := w.c.(nodeData); ok {
			if reg, err := nd.NewRegion(n * size); err == nil {
				mem := reg.Bytes()
				return func(i int) []byte { return mem[i*size : (i+1)*size : (i+1)*size] }
			} else {
				w.cs.noteErr(fmt.Errorf("region: %w", err))
			}
		}
	}
	return func(int) []byte { return make([]byte, size) }
}

func (w *worker) run(ctx context.Context) {
	cfg := &w.r.cfg
	for ctx.Err() == nil {
		start := time.Now()
		measured := !start.Before(w.cs.from)
		if measured {
			if cfg.Requests > 0 {
				if w.cs.issued.Add(1) > int64(cfg.Requests) {
					return
				}
			} else if start.After(w.cs.until) {
				return
			}
		}
		var blocks, bytes, errs, misses, corrupt, readOnly uint64
		clear(w.pend)
		if w.cs.op == OpGet {
			blocks, bytes, errs, misses, corrupt = w.get(ctx)
		} else {
			blocks, bytes, errs, readOnly = w.put(ctx)
		}
		end := time.Now()
		w.cs.blocks.Add(blocks)
		if !measured {
			continue
		}
		w.hist.Record(end.Sub(start))
		w.requests++
		w.blocks += blocks
		w.bytes += bytes
		w.errors += errs
		w.misses += misses
		w.corrupt += corrupt
		w.readOnly += readOnly
		for i, p := range w.pend {
			n := &w.nodes[i]
			n.blocks += p.blocks
			n.bytes += p.bytes
			n.errors += p.errors
			n.misses += p.misses
			n.corrupt += p.corrupt
		}
		w.last = end
	}
}

func (w *worker) get(ctx context.Context) (blocks, bytes, errs, misses, corrupt uint64) {
	for i := range w.keys {
		w.keys[i] = w.working[w.rng.IntN(len(w.working))]
	}
	w.c.getInto(ctx, w.r.cfg.Namespace, w.keys, w.dst, w.res)
	for i, res := range w.res {
		n := w.share(w.keys[i])
		n.blocks++
		switch {
		case res.Hit && verify(res.Data, seedOf(w.keys[i]), w.cs.size):
			bytes += uint64(len(res.Data))
			n.bytes += uint64(len(res.Data))
		case res.Hit:
			corrupt++
			n.corrupt++
		case errors.Is(res.Reason, client.ErrNotCached):
			misses++
			n.misses++
		default:
			errs++
			n.errors++
			w.cs.noteErr(res.Reason)
		}
	}
	return uint64(len(w.keys)), bytes, errs, misses, corrupt
}

func (w *worker) put(ctx context.Context) (blocks, bytes, errs, readOnly uint64) {
	size := uint32(w.cs.size)
	for i := range w.puts {
		seq := w.cs.putSeq.Add(1)
		toks := w.puts[i].TokenIDs
		toks[0], toks[1], toks[2] = size, uint32(seq), uint32(seq>>32)|1<<31
		k := client.KeyFor(w.r.digest, client.BlockKey{}, toks, 3)
		w.puts[i].Key = k
		stamp(w.puts[i].Data, seedOf(k))
	}
	st, err := w.c.Put(ctx, w.r.cfg.Namespace, w.puts)
	if err != nil {
		w.cs.noteErr(err)
	}
	for i, s := range st {
		n := w.share(w.puts[i].Key)
		n.blocks++
		switch s {
		case client.StatusStored, client.StatusExists:
			bytes += uint64(size)
			n.bytes += uint64(size)
		case client.StatusReadOnly:
			// Not an error of the bench or the server: the node takes no
			// writes while its control plane is unreachable.
			readOnly++
		default:
			errs++
			n.errors++
			if err == nil {
				w.cs.noteErr(fmt.Errorf("PUT status %s", s))
			}
		}
	}
	return uint64(len(w.puts)), bytes, errs, readOnly
}

// share is the pending per-member count of key's owner; a scratch count
// when the run has no members.
func (w *worker) share(k client.BlockKey) *nodeCount {
	if i := w.r.owner(k); i >= 0 {
		return &w.pend[i]
	}
	return &w.scratch
}
