package workload

import (
	"math"
	"slices"
	"testing"

	"github.com/gpucache/gpucache/tools/internal/replay"
)

// item is one generated request with its session.
type item struct {
	req   replay.Request
	seq   int
	shape Shape
	pool  int
	plan  int
}

// runItems generates c's trace with each request's session.
func runItems(t *testing.T, c Config) []item {
	t.Helper()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	g := newGen(&c)
	var items []item
	err := g.run(func(r *replay.Request, s *session) error {
		items = append(items, item{req: *r, seq: s.seq, shape: s.shape, pool: s.pool, plan: s.plan})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return items
}

// bySession groups items by session, in order.
func bySession(items []item) map[int][]item {
	m := map[int][]item{}
	for _, it := range items {
		m[it.seq] = append(m[it.seq], it)
	}
	return m
}

// checkExtends asserts that every request of a session extends the last:
// the prompt grows by the last answer and at least one token, all the last
// prompt's full blocks are reused, and its partial last block is not.
func checkExtends(t *testing.T, items []item) (followUps int) {
	t.Helper()
	for seq, turns := range bySession(items) {
		for i := 1; i < len(turns); i++ {
			prev, cur := turns[i-1].req, turns[i].req
			if cur.InputLength < prev.InputLength+prev.OutputLength+1 {
				t.Fatalf("session %d turn %d: %d tokens after %d + answer %d", seq, i, cur.InputLength, prev.InputLength, prev.OutputLength)
			}
			full := prev.InputLength / BlockTokens
			if !slices.Equal(cur.HashIDs[:full], prev.HashIDs[:full]) {
				t.Fatalf("session %d turn %d: the previous prompt's %d full blocks are not reused", seq, i, full)
			}
			if full < len(prev.HashIDs) && cur.HashIDs[full] == prev.HashIDs[full] {
				t.Fatalf("session %d turn %d: the partial block %d kept its hash id", seq, i, full)
			}
			if cur.Timestamp < prev.Timestamp {
				t.Fatalf("session %d turn %d: goes back in time", seq, i)
			}
			followUps++
		}
	}
	return followUps
}

func TestChatTurnsExtend(t *testing.T) {
	items := runItems(t, small(Chat, 5000))
	if n := checkExtends(t, items); n < 1000 {
		t.Fatalf("only %d follow-up turns in 5000 requests", n)
	}
	// Heavy-tailed turn counts: the longest session is many times the median.
	var counts []int
	for _, turns := range bySession(items) {
		counts = append(counts, len(turns))
	}
	slices.Sort(counts)
	if med, top := counts[len(counts)/2], counts[len(counts)-1]; top < 10*med {
		t.Fatalf("turns per session: median %d, max %d: no heavy tail", med, top)
	}
}

// TestChatAbandon: with 5 planned turns and a 0.3 chance of leaving after
// each, P(1 turn) = 0.3 and P(5 turns) = 0.7^4 ≈ 0.24.
func TestChatAbandon(t *testing.T) {
	c := small(Chat, 20000)
	c.Chat.Turns = Const(5)
	c.Chat.Abandon = 0.3
	c.MaxContext = MaxContextCap
	items := runItems(t, c)
	sessions := bySession(items)
	last := items[len(items)-1].req.Timestamp
	var n, one, five int
	for _, turns := range sessions {
		if turns[0].req.Timestamp > last/2 { // may be cut by the trace's end
			continue
		}
		n++
		switch len(turns) {
		case 1:
			one++
		case 5:
			five++
		}
		if len(turns) > 5 {
			t.Fatalf("a session of %d turns, planned 5", len(turns))
		}
	}
	p1, p5 := float64(one)/float64(n), float64(five)/float64(n)
	if math.Abs(p1-0.3) > 0.03 || math.Abs(p5-0.2401) > 0.03 {
		t.Fatalf("over %d sessions: P(1 turn) = %.3f (want 0.30), P(5 turns) = %.3f (want 0.24)", n, p1, p5)
	}
}

// TestSystemPromptShare: the share of sessions behind a pooled system
// prompt is the configured fraction; sessions behind one prompt share its
// full blocks, a session's own prompt shares no block; popularity is Zipf.
func TestSystemPromptShare(t *testing.T) {
	for _, shared := range []float64{0.8, 0.3} {
		c := small(System, 10000)
		c.System.Prefix.Shared = shared
		items := runItems(t, c)
		sessions := bySession(items)
		pooled := 0
		uses := make([]int, c.System.Prefix.Count)
		firstOf := map[uint64]int{} // first block id → sessions
		for _, turns := range sessions {
			firstOf[turns[0].req.HashIDs[0]]++
			if p := turns[0].pool; p >= 0 {
				pooled++
				uses[p]++
			}
		}
		frac := float64(pooled) / float64(len(sessions))
		if math.Abs(frac-shared) > 0.03 {
			t.Fatalf("shared %.2f: %.3f of %d sessions use a pooled prompt", shared, frac, len(sessions))
		}
		if uses[0] <= uses[9] || uses[9] <= uses[49] {
			t.Fatalf("shared %.2f: uses of ranks 1, 10, 50 = %d, %d, %d: not Zipf", shared, uses[0], uses[9], uses[49])
		}
		for _, turns := range sessions {
			first := turns[0].req.HashIDs[0]
			if turns[0].pool < 0 && firstOf[first] != 1 {
				t.Fatalf("a session's own prompt shares its first block with %d sessions", firstOf[first]-1)
			}
		}
		// Two sessions behind prompt p share its full blocks.
		prefix := map[int][]uint64{}
		g := newGen(&c)
		for _, turns := range sessions {
			p := turns[0].pool
			if p < 0 {
				continue
			}
			full := g.pools[System].tokens[p] / BlockTokens
			ids := turns[0].req.HashIDs[:full]
			if want, ok := prefix[p]; ok && !slices.Equal(ids, want) {
				t.Fatalf("two sessions behind prompt %d differ in its %d full blocks", p, full)
			}
			prefix[p] = ids
		}
	}
}

// TestAgentLoops: each step extends the last, steps come seconds apart,
// and sessions run many steps on a long prefix.
func TestAgentLoops(t *testing.T) {
	items := runItems(t, small(Agent, 5000))
	if n := checkExtends(t, items); n < 4000 {
		t.Fatalf("only %d follow-up steps in 5000 requests", n)
	}
	var gaps []int64
	for _, steps := range bySession(items) {
		for i := 1; i < len(steps); i++ {
			gaps = append(gaps, steps[i].req.Timestamp-steps[i-1].req.Timestamp)
		}
	}
	slices.Sort(gaps)
	if med := gaps[len(gaps)/2]; med > 10_000 {
		t.Fatalf("median gap between steps %d ms: not rapid", med)
	}
	st := stats(items)
	if st.MaxHitRatio < 0.8 {
		t.Fatalf("agent trace reuses %.3f of its accesses, want ≥ 0.8", st.MaxHitRatio)
	}
}

func stats(items []item) Stats {
	c := NewCounter()
	for i := range items {
		c.Add(&items[i].req)
	}
	return c.Stats()
}

// TestRAGOrderMatters: the same documents in another order share only the
// blocks before the first one; in the same order, all their full blocks.
func TestRAGOrderMatters(t *testing.T) {
	c := Default(RAG)
	g := newGen(&c)
	sys := segment{id: 1, tokens: 1300}
	a, b := segment{id: 2, tokens: 900}, segment{id: 3, tokens: 1100}
	prompt := func(segs ...segment) ([]segment, int) {
		n := 0
		for _, s := range segs {
			n += s.tokens
		}
		return segs, n
	}
	ab := g.hashIDs(prompt(sys, a, b, g.fresh(40)))
	ab2 := g.hashIDs(prompt(sys, a, b, g.fresh(70)))
	ba := g.hashIDs(prompt(sys, b, a, g.fresh(40)))
	if n := common(ab, ba); n != 1300/BlockTokens {
		t.Fatalf("reordered documents share %d blocks, want the system prompt's %d", n, 1300/BlockTokens)
	}
	if n := common(ab, ab2); n != (1300+900+1100)/BlockTokens {
		t.Fatalf("same documents, same order share %d blocks, want %d", n, (1300+900+1100)/BlockTokens)
	}
	// Over a trace: sorting the documents canonically raises the reuse.
	c = small(RAG, 5000)
	c.RAG.Docs, c.RAG.K = 200, Const(3)
	retrieval := stats(runItems(t, c)).MaxHitRatio
	c.RAG.SortedFrac = 1
	sorted := stats(runItems(t, c)).MaxHitRatio
	if sorted <= retrieval {
		t.Fatalf("max hit ratio sorted %.3f, retrieval order %.3f: order has no effect", sorted, retrieval)
	}
}

// common is the length of the common prefix of a and b.
func common(a, b []uint64) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

func TestOneShotNoReuse(t *testing.T) {
	items := runItems(t, small(OneShot, 5000))
	seen := map[uint64]bool{}
	for _, it := range items {
		for _, h := range it.req.HashIDs {
			if seen[h] {
				t.Fatalf("hash id %d repeats", h)
			}
			seen[h] = true
		}
	}
}

// TestMixWeights: sessions follow the mix weights.
func TestMixWeights(t *testing.T) {
	c := small(Mix, 20000)
	c.Mix = []Weight{{Chat, 1}, {OneShot, 3}}
	count := map[Shape]int{}
	for _, turns := range bySession(runItems(t, c)) {
		count[turns[0].shape]++
	}
	total := count[Chat] + count[OneShot]
	if len(count) != 2 || math.Abs(float64(count[OneShot])/float64(total)-0.75) > 0.03 {
		t.Fatalf("sessions by shape %v, want chat:oneshot 1:3", count)
	}
}

func TestArrivals(t *testing.T) {
	const rate, horizon = 5.0, 20000.0
	count := func(a Arrival) []float64 {
		p := newArrivals(a, newRNG(1, 2))
		var ts []float64
		for t := 0.0; t < horizon; t = p.next() {
			ts = append(ts, t)
		}
		return ts
	}
	base := Default(Chat).Arrival
	base.Rate = rate
	for _, pat := range []string{Poisson, Diurnal, Bursty} {
		a := base
		a.Pattern = pat
		ts := count(a)
		if got := float64(len(ts)) / horizon; math.Abs(got-rate)/rate > 0.1 {
			t.Errorf("%s: mean rate %.2f, want %.2f", pat, got, rate)
		}
		// Counts per 10 s window: variance/mean is 1 for Poisson.
		win := make([]float64, int(horizon/10))
		peak, trough := 0, 0
		for _, x := range ts {
			win[min(int(x/10), len(win)-1)]++
			if math.Sin(2*math.Pi*x/a.PeriodS) > 0 {
				peak++
			} else {
				trough++
			}
		}
		var mean, sq float64
		for _, w := range win {
			mean += w
		}
		mean /= float64(len(win))
		for _, w := range win {
			sq += (w - mean) * (w - mean)
		}
		disp := sq / float64(len(win)) / mean
		switch pat {
		case Poisson:
			if disp > 1.3 {
				t.Errorf("poisson: dispersion %.2f", disp)
			}
		case Diurnal:
			// Expected peak/trough = (1+2A/π)/(1-2A/π) ≈ 3.07 for A = 0.8.
			if r := float64(peak) / float64(trough); r < 2.5 || r > 3.7 {
				t.Errorf("diurnal: peak/trough %.2f, want ≈ 3.07", r)
			}
		case Bursty:
			if disp < 3 {
				t.Errorf("bursty: dispersion %.2f, want bursts", disp)
			}
		}
	}
}

func TestDistBounds(t *testing.T) {
	r := newRNG(1, 9)
	for _, d := range []Dist{Const(7), Uniform(2, 9), Exp(5, 1, 50), LogNormal(100, 2, 3, 1000), Pareto(1, 0.5, 300)} {
		if err := d.check(1e6); err != nil {
			t.Fatal(err)
		}
		var xs []float64
		for range 20000 {
			x := d.draw(r)
			if x < d.lower() || x > d.Max {
				t.Fatalf("%+v drew %v", d, x)
			}
			xs = append(xs, x)
		}
		slices.Sort(xs)
		med := xs[len(xs)/2]
		switch d.Kind {
		case KindLogNormal:
			if math.Abs(med-100)/100 > 0.1 {
				t.Errorf("lognormal median %v, want 100", med)
			}
		case KindPareto: // median = min·2^(1/alpha) = 4
			if math.Abs(med-4) > 0.4 {
				t.Errorf("pareto median %v, want 4", med)
			}
		}
	}
}

// TestCounter: the infinite cache's hits are the leading runs of blocks
// seen before.
func TestCounter(t *testing.T) {
	c := NewCounter()
	for _, r := range []replay.Request{
		{Timestamp: 5, InputLength: 1024, HashIDs: []uint64{0, 1}},
		{Timestamp: 9, InputLength: 1500, HashIDs: []uint64{0, 1, 2}},  // 2 hits
		{Timestamp: 12, InputLength: 1500, HashIDs: []uint64{0, 3, 2}}, // 1 hit: 2 is after a miss
	} {
		c.Add(&r)
	}
	s := c.Stats()
	if s.Requests != 3 || s.UniqueBlocks != 4 || s.Accesses != 8 || s.DurationMs != 7 || s.MaxHitRatio != 3.0/8 {
		t.Fatalf("stats %+v", s)
	}
	if s.MaxComputeSaved <= 0 || s.MaxComputeSaved >= s.MaxHitRatio {
		t.Fatalf("compute saved %v: hits are early blocks, so less than the hit ratio %v", s.MaxComputeSaved, s.MaxHitRatio)
	}
}
