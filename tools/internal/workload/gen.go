package workload

import (
	"container/heap"
	"math"

	"github.com/gpucache/gpucache/tools/internal/replay"
)

// BlockTokens is the tokens per hash id: the block size of the Mooncake
// traces and of tools/internal/replay.
const BlockTokens = replay.BlockTokens

// Generate returns the trace of c (which must Validate).
func Generate(c Config) ([]replay.Request, error) {
	reqs := make([]replay.Request, 0, c.Requests)
	err := Run(c, func(r *replay.Request) error {
		reqs = append(reqs, *r)
		return nil
	})
	return reqs, err
}

// Run generates the trace of c, calling emit with each request in time
// order; the request and its HashIDs are emit's to keep. An error from
// emit stops the run and is returned.
func Run(c Config, emit func(*replay.Request) error) error {
	if err := c.Validate(); err != nil {
		return err
	}
	g := newGen(&c)
	return g.run(func(r *replay.Request, _ *session) error { return emit(r) })
}

// segment is a run of prompt tokens of one content: a system prompt, a
// document, a message. Two segments with the same id hold the same tokens.
type segment struct {
	id     uint64
	tokens int
}

// session is one user's (or agent's) sequence of requests.
type session struct {
	seq    int     // arrival number: the tie-break and the rng stream
	shape  Shape   // base shape
	t      float64 // seconds: time of its next request
	r      *rng
	segs   []segment // the next request's prompt
	tokens int       // sum of segs' tokens
	output int       // the next request's output_length
	done   int       // requests emitted
	plan   int       // requests planned (turns, steps)
	pool   int       // index of its shared prefix in its pool, -1 if its own
}

// gen is one run's state.
type gen struct {
	c      *Config
	pools  map[Shape]*pool
	docs   *pool // RAG corpus; pool.shared unused
	unique uint64
	ids    map[blockKey]uint64 // chained block → hash id
	nextID uint64
}

// blockKey names a block by its parent's hash id and its content.
type blockKey struct{ parent, content uint64 }

// noParent is the parent of a prompt's first block.
const noParent = math.MaxUint64

// Content domains: a shared segment's id is mix64 of its domain and index.
const (
	domainPool = iota + 1 // + shape index << 8
	domainDoc
	domainUnique = 1 << 62
)

func newGen(c *Config) *gen {
	g := &gen{c: c, pools: map[Shape]*pool{}, ids: map[blockKey]uint64{}}
	r := newRNG(c.Seed, 1)
	for i, s := range baseShapes {
		var p Pool
		switch s {
		case Chat:
			p = c.Chat.Prefix
		case System:
			p = c.System.Prefix
		case Agent:
			p = c.Agent.Prefix
		case RAG:
			p = c.RAG.Prefix
		default:
			continue
		}
		if !g.uses(s) {
			continue
		}
		g.pools[s] = newPool(p, uint64(domainPool+i<<8), r)
	}
	if g.uses(RAG) {
		g.docs = newPool(Pool{Count: c.RAG.Docs, Zipf: c.RAG.DocZipf, Tokens: c.RAG.DocTokens, Shared: 1}, domainDoc, r)
	}
	return g
}

// uses reports whether sessions of base shape s can occur.
func (g *gen) uses(s Shape) bool {
	for _, u := range g.c.shapesUsed() {
		if u == s {
			return true
		}
	}
	return false
}

// pool is a Pool's drawn prefixes.
type pool struct {
	p      Pool
	tokens []int
	z      *zipf
	domain uint64
}

func newPool(p Pool, domain uint64, r *rng) *pool {
	pl := &pool{p: p, domain: domain, tokens: make([]int, p.Count)}
	for i := range pl.tokens {
		pl.tokens[i] = p.Tokens.drawInt(r)
	}
	if p.Count > 0 {
		pl.z = newZipf(p.Count, p.Zipf)
	}
	return pl
}

// item returns shared item i as a segment.
func (p *pool) item(i int) segment {
	return segment{id: mix64(p.domain<<40 ^ uint64(i)), tokens: p.tokens[i]}
}

// prefix draws a session's prefix: a shared one (Zipf rank) with
// probability Shared, else one of its own; and its pool index or -1.
func (p *pool) prefix(g *gen, r *rng) (segment, int) {
	if p.p.Count > 0 && r.bernoulli(p.p.Shared) {
		i := p.z.draw(r)
		return p.item(i), i
	}
	return g.fresh(p.p.Tokens.drawInt(r)), -1
}

// fresh returns a segment of content no other segment has.
func (g *gen) fresh(tokens int) segment {
	g.unique++
	return segment{id: mix64(domainUnique + g.unique), tokens: tokens}
}

// run merges the sessions in time order until c.Requests are emitted.
func (g *gen) run(emit func(*replay.Request, *session) error) error {
	arr := newArrivals(g.c.Arrival, newRNG(g.c.Seed, 2))
	pick := newRNG(g.c.Seed, 3)
	var weights []float64
	var total float64
	for _, w := range g.c.Mix {
		weights = append(weights, w.Weight)
		total += w.Weight
	}
	var q sessionQueue
	nextArrival := 0.0
	seq := 0
	for emitted := 0; emitted < g.c.Requests; {
		if len(q) == 0 || nextArrival < q[0].t {
			shape := g.c.Shape
			if shape == Mix {
				shape = g.c.Mix[pickWeighted(pick, weights, total)].Shape
			}
			s := &session{seq: seq, shape: shape, t: nextArrival, r: newRNG(g.c.Seed, 1000+uint64(seq)), pool: -1}
			seq++
			g.start(s)
			heap.Push(&q, s)
			nextArrival = arr.next()
			continue
		}
		s := q[0]
		req := &replay.Request{
			Timestamp:    int64(math.Round(s.t * 1000)),
			InputLength:  s.tokens,
			OutputLength: s.output,
			HashIDs:      g.hashIDs(s.segs, s.tokens),
		}
		if err := emit(req, s); err != nil {
			return err
		}
		emitted++
		s.done++
		if g.advance(s) {
			heap.Fix(&q, 0)
		} else {
			heap.Pop(&q)
		}
	}
	return nil
}

func pickWeighted(r *rng, w []float64, total float64) int {
	u := r.float64() * total
	for i, x := range w {
		if u < x {
			return i
		}
		u -= x
	}
	for i := len(w) - 1; i >= 0; i-- { // rounding: the last positive weight
		if w[i] > 0 {
			return i
		}
	}
	return 0
}

// hashIDs returns the chained block hash ids of a prompt of segs.
func (g *gen) hashIDs(segs []segment, total int) []uint64 {
	n := (total + BlockTokens - 1) / BlockTokens
	ids := make([]uint64, 0, n)
	parent := uint64(noParent)
	si, off := 0, 0
	for range n {
		need := BlockTokens
		h := uint64(0x9ae16a3b2f90404f)
		for need > 0 && si < len(segs) {
			avail := segs[si].tokens - off
			if avail <= 0 {
				si, off = si+1, 0
				continue
			}
			take := min(need, avail)
			h = mix64(h ^ segs[si].id)
			h = mix64(h ^ uint64(off)<<32 ^ uint64(take))
			off += take
			need -= take
		}
		key := blockKey{parent, h}
		id, ok := g.ids[key]
		if !ok {
			id = g.nextID
			g.nextID++
			g.ids[key] = id
		}
		ids = append(ids, id)
		parent = id
	}
	return ids
}

// push appends a segment to s's prompt.
func (s *session) push(seg segment) {
	if seg.tokens > 0 {
		s.segs = append(s.segs, seg)
		s.tokens += seg.tokens
	}
}

// fits reports whether s's prompt is within the context, cutting a first
// prompt down to it (a first request is always sent).
func (g *gen) fits(s *session) bool {
	if s.tokens <= g.c.MaxContext {
		return true
	}
	if s.done > 0 {
		return false
	}
	for s.tokens > g.c.MaxContext {
		last := &s.segs[len(s.segs)-1]
		cut := min(last.tokens, s.tokens-g.c.MaxContext)
		last.tokens -= cut
		s.tokens -= cut
		if last.tokens == 0 {
			s.segs = s.segs[:len(s.segs)-1]
		}
	}
	return true
}

// decodeS is the time to generate n output tokens, in seconds.
func (g *gen) decodeS(n int) float64 { return float64(n) * g.c.DecodeMsPerToken / 1000 }

// sessionQueue is a min-heap of sessions by (t, seq).
type sessionQueue []*session

func (q sessionQueue) Len() int { return len(q) }
func (q sessionQueue) Less(i, j int) bool {
	if q[i].t != q[j].t {
		return q[i].t < q[j].t
	}
	return q[i].seq < q[j].seq
}
func (q sessionQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *sessionQueue) Push(x any)   { *q = append(*q, x.(*session)) }
func (q *sessionQueue) Pop() any {
	old := *q
	s := old[len(old)-1]
	old[len(old)-1] = nil
	*q = old[:len(old)-1]
	return s
}
