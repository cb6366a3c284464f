package workload

import (
	"math"
	"slices"
)

// start draws s's plan and builds its first prompt.
func (g *gen) start(s *session) {
	r := s.r
	switch s.shape {
	case Chat, System:
		p := g.chatParams(s.shape)
		seg, i := g.pools[s.shape].prefix(g, r)
		s.pool = i
		s.push(seg)
		s.push(g.fresh(max(p.UserTokens.drawInt(r), 1)))
		s.plan = p.Turns.drawInt(r)
		s.output = p.OutputTokens.drawInt(r)
	case Agent:
		a := &g.c.Agent
		seg, i := g.pools[Agent].prefix(g, r)
		s.pool = i
		s.push(seg)
		s.push(g.fresh(max(a.TaskTokens.drawInt(r), 1)))
		s.plan = a.Steps.drawInt(r)
		s.output = a.CallTokens.drawInt(r)
	case RAG:
		p := &g.c.RAG
		seg, i := g.pools[RAG].prefix(g, r)
		s.pool = i
		s.push(seg)
		for _, d := range g.retrieve(r) {
			s.push(g.docs.item(d))
		}
		s.push(g.fresh(max(p.QueryTokens.drawInt(r), 1)))
		s.plan = p.Turns.drawInt(r)
		s.output = p.OutputTokens.drawInt(r)
	case OneShot:
		p := &g.c.OneShot
		s.push(g.fresh(max(p.PromptTokens.drawInt(r), 1)))
		s.plan = 1
		s.output = p.OutputTokens.drawInt(r)
	}
	g.fits(s)
}

// advance moves s to its next request: the answer and a new message (or
// tool output) appended to the prompt, after a think (or tool) time. It
// reports false when the session ends: its plan is done, the user
// abandons it, or the prompt would outgrow the context.
func (g *gen) advance(s *session) bool {
	if s.done >= s.plan {
		return false
	}
	r := s.r
	answer := g.fresh(s.output)
	gap := g.decodeS(s.output)
	var msg, out int
	switch s.shape {
	case Chat, System:
		p := g.chatParams(s.shape)
		if r.bernoulli(p.Abandon) {
			return false
		}
		gap += p.ThinkS.draw(r)
		msg, out = max(p.UserTokens.drawInt(r), 1), p.OutputTokens.drawInt(r)
	case Agent:
		a := &g.c.Agent
		gap += a.ToolS.draw(r)
		msg, out = max(a.ToolTokens.drawInt(r), 1), a.CallTokens.drawInt(r)
	case RAG:
		p := &g.c.RAG
		gap += p.ThinkS.draw(r)
		msg, out = max(p.QueryTokens.drawInt(r), 1), p.OutputTokens.drawInt(r)
	default:
		return false
	}
	s.push(answer)
	s.push(g.fresh(msg))
	s.output = out
	s.t += gap
	return g.fits(s)
}

func (g *gen) chatParams(s Shape) *ChatParams {
	if s == System {
		return &g.c.System
	}
	return &g.c.Chat
}

// retrieve draws K distinct documents by popularity, in retrieval order
// (the order drawn) or, with probability SortedFrac, by corpus index.
func (g *gen) retrieve(r *rng) []int {
	p := &g.c.RAG
	k := min(p.K.drawInt(r), p.Docs)
	docs := make([]int, 0, k)
	for len(docs) < k {
		d := -1
		for range 32 {
			if x := g.docs.z.draw(r); !slices.Contains(docs, x) {
				d = x
				break
			}
		}
		if d < 0 { // a very skewed corpus: the most popular one not taken
			for x := 0; ; x++ {
				if !slices.Contains(docs, x) {
					d = x
					break
				}
			}
		}
		docs = append(docs, d)
	}
	if r.bernoulli(p.SortedFrac) {
		slices.Sort(docs)
	}
	return docs
}

// arrivals draws session start times, in seconds, the first at 0.
type arrivals struct {
	a Arrival
	r *rng
	t float64

	// bursty: a two-state Markov chain, burst periods of mean BurstMeanS,
	// calm ones of mean BurstMeanS·(1-BurstFrac)/BurstFrac, so a burst
	// holds BurstFrac of the time.
	rc, rb float64 // calm and burst rates
	burst  bool    // the state at t
	decay  float64 // 1/burst mean + 1/calm mean: the chain's mixing rate
}

func newArrivals(a Arrival, r *rng) *arrivals {
	p := &arrivals{a: a, r: r}
	if a.Pattern == Bursty {
		f, F := a.BurstFrac, a.BurstFactor
		p.rc = a.Rate / ((1 - f) + f*F)
		p.rb = F * p.rc
		p.decay = 1/a.BurstMeanS + f/(a.BurstMeanS*(1-f))
	}
	return p
}

// next returns the next session's start time, by thinning for the
// time-varying rates.
func (p *arrivals) next() float64 {
	switch p.a.Pattern {
	case Diurnal:
		lmax := p.a.Rate * (1 + p.a.Amplitude)
		for {
			p.t += p.r.exp() / lmax
			if p.r.float64()*(1+p.a.Amplitude) < 1+p.a.Amplitude*math.Sin(2*math.Pi*p.t/p.a.PeriodS) {
				return p.t
			}
		}
	case Bursty:
		for {
			dt := p.r.exp() / p.rb
			p.t += dt
			// The chain's state after dt, from its transition law (O(1)
			// however many switches dt spans): P(burst) relaxes from the
			// current state to BurstFrac at rate decay.
			b0 := 0.0
			if p.burst {
				b0 = 1
			}
			f := p.a.BurstFrac
			p.burst = p.r.float64() < f+(b0-f)*math.Exp(-dt*p.decay)
			if p.burst || p.r.float64()*p.rb < p.rc {
				return p.t
			}
		}
	default:
		p.t += p.r.exp() / p.a.Rate
		return p.t
	}
}
