package workload

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
)

// Shape names a kind of session.
type Shape string

// The shapes.
const (
	Chat    Shape = "chat"    // multi-turn chat: each turn extends the last prompt
	System  Shape = "system"  // short sessions behind a few popular system prompts
	Agent   Shape = "agent"   // agentic tool loop: long prefix, many rapid appends
	RAG     Shape = "rag"     // system prompt + k shared documents (order matters) + query
	OneShot Shape = "oneshot" // unique prompts, no reuse
	Mix     Shape = "mix"     // sessions of the shapes above, by Config.Mix weights
)

// Shapes lists the shape names, Mix last.
func Shapes() []Shape { return []Shape{Chat, System, Agent, RAG, OneShot, Mix} }

// baseShapes are the shapes a session can have.
var baseShapes = []Shape{Chat, System, Agent, RAG, OneShot}

// ErrConfig marks a configuration Validate or ParseConfig refuses.
var ErrConfig = errors.New("gpucache/workload: bad config")

// Bounds on the parameters (Validate).
const (
	MaxRequests   = 5_000_000 // requests in one trace
	MaxContextCap = 1 << 20   // Config.MaxContext, tokens
	maxPool       = 1 << 16   // Pool.Count
	maxDocs       = 1 << 20   // RAGParams.Docs
	maxK          = 64        // documents per RAG request
	maxCount      = 10_000    // turns or steps of a session
	maxSeconds    = 1e7       // any time distribution, seconds
	maxRate       = 1e6       // sessions per second
	maxZipf       = 10        // Zipf exponents
	maxConfigSize = 1 << 20   // bytes of a JSON config
)

// Config describes a scenario. Default(shape) fills every field; a JSON
// file (ParseConfig) overrides some of them.
type Config struct {
	Shape    Shape  `json:"shape"`
	Requests int    `json:"requests"` // requests written; default 10000
	Seed     uint64 `json:"seed"`     // default 1

	Arrival Arrival `json:"arrival"`

	// MaxContext is the most tokens a prompt holds; a session ends rather
	// than exceed it. Default 131072.
	MaxContext int `json:"max_context"`
	// DecodeMsPerToken is the time one output token takes to generate; a
	// session's next request comes output_length × DecodeMsPerToken after
	// the last plus its think or tool time. Default 20.
	DecodeMsPerToken float64 `json:"decode_ms_per_token"`

	Chat    ChatParams    `json:"chat"`
	System  ChatParams    `json:"system"`
	Agent   AgentParams   `json:"agent"`
	RAG     RAGParams     `json:"rag"`
	OneShot OneShotParams `json:"oneshot"`
	// Mix weighs the shapes of sessions when Shape is Mix; default chat 4,
	// system 2, agent 2, rag 1, oneshot 1.
	Mix []Weight `json:"mix"`
}

// Weight is one shape's share of the sessions of a mix.
type Weight struct {
	Shape  Shape   `json:"shape"`
	Weight float64 `json:"weight"`
}

// Arrival is the session arrival process.
type Arrival struct {
	// Pattern is "poisson" (constant rate, the default), "diurnal" (rate ×
	// (1 + Amplitude·sin(2πt/PeriodS))) or "bursty" (rate × BurstFactor for
	// BurstFrac of the time, in bursts of mean BurstMeanS seconds, the mean
	// rate staying Rate).
	Pattern string `json:"pattern"`
	// Rate is the mean number of sessions starting per second; the default
	// depends on the shape (Default).
	Rate        float64 `json:"rate"`
	PeriodS     float64 `json:"period_s"`     // diurnal period (a compressed day); default 600
	Amplitude   float64 `json:"amplitude"`    // diurnal, in [0, 1); default 0.8
	BurstFactor float64 `json:"burst_factor"` // bursty, ≥ 1; default 10
	BurstFrac   float64 `json:"burst_frac"`   // bursty, in (0, 1); default 0.1
	BurstMeanS  float64 `json:"burst_mean_s"` // bursty; default 20
}

// The arrival patterns.
const (
	Poisson = "poisson"
	Diurnal = "diurnal"
	Bursty  = "bursty"
)

// Pool is a set of shared prompt prefixes (system prompts, tool
// definitions) of Zipf popularity.
type Pool struct {
	Count  int     `json:"count"`  // prefixes in the pool
	Zipf   float64 `json:"zipf"`   // popularity exponent: rank r drawn ∝ 1/r^Zipf
	Tokens Dist    `json:"tokens"` // length of each prefix, drawn once per prefix
	// Shared is the fraction of sessions whose prefix comes from the pool;
	// the others get a prefix of their own, of the same length law.
	Shared float64 `json:"shared"`
}

// ChatParams are the chat and system shapes' parameters.
type ChatParams struct {
	Prefix Pool `json:"prefix"`
	// Turns is a session's planned turn count (heavy-tailed).
	Turns Dist `json:"turns"`
	// Abandon is the probability that a user leaves after each turn, before
	// the planned count.
	Abandon      float64 `json:"abandon"`
	ThinkS       Dist    `json:"think_s"` // user think time between turns, seconds
	UserTokens   Dist    `json:"user_tokens"`
	OutputTokens Dist    `json:"output_tokens"`
}

// AgentParams are the agent shape's: a task prompt behind a long shared
// prefix (tool definitions), then Steps requests each appending the
// model's tool call and the tool's output.
type AgentParams struct {
	Prefix     Pool `json:"prefix"`
	TaskTokens Dist `json:"task_tokens"`
	Steps      Dist `json:"steps"`       // requests per session
	CallTokens Dist `json:"call_tokens"` // output_length of each step
	ToolTokens Dist `json:"tool_tokens"` // tool output appended to the next prompt
	ToolS      Dist `json:"tool_s"`      // tool latency, seconds
}

// RAGParams are the rag shape's: a system prompt, K documents of a
// Zipf-popular corpus in retrieval order, a query; optional follow-ups.
type RAGParams struct {
	Prefix    Pool    `json:"prefix"`
	Docs      int     `json:"docs"`       // corpus size
	DocZipf   float64 `json:"doc_zipf"`   // document popularity exponent
	DocTokens Dist    `json:"doc_tokens"` // each document's length, drawn once
	K         Dist    `json:"k"`          // documents per request
	// SortedFrac is the fraction of requests whose documents are put in a
	// canonical order (by corpus index) instead of retrieval order.
	SortedFrac   float64 `json:"sorted_frac"`
	QueryTokens  Dist    `json:"query_tokens"`
	OutputTokens Dist    `json:"output_tokens"`
	Turns        Dist    `json:"turns"` // 1 + follow-up questions
	ThinkS       Dist    `json:"think_s"`
}

// OneShotParams are the oneshot shape's: one request per session, all of
// it unique.
type OneShotParams struct {
	PromptTokens Dist `json:"prompt_tokens"`
	OutputTokens Dist `json:"output_tokens"`
}

// Default returns the reference scenario of shape: 10000 requests, seed 1.
// The sizes follow public descriptions of such traffic (chat turns of a
// few hundred tokens, system prompts of a few thousand, agent loops of
// tens of steps), not any cache policy.
func Default(shape Shape) Config {
	chatPrefix := Pool{Count: 4, Zipf: 1, Tokens: LogNormal(700, 0.5, 0, 8192), Shared: 0.9}
	c := Config{
		Shape:            shape,
		Requests:         10000,
		Seed:             1,
		Arrival:          Arrival{Pattern: Poisson, PeriodS: 600, Amplitude: 0.8, BurstFactor: 10, BurstFrac: 0.1, BurstMeanS: 20},
		MaxContext:       131072,
		DecodeMsPerToken: 20,
		Chat: ChatParams{
			Prefix:       chatPrefix,
			Turns:        Pareto(1, 1.3, 200),
			Abandon:      0.1,
			ThinkS:       LogNormal(60, 1.2, 1, 7200),
			UserTokens:   LogNormal(200, 1.5, 2, 32768),
			OutputTokens: LogNormal(250, 0.8, 1, 4096),
		},
		System: ChatParams{
			Prefix:       Pool{Count: 50, Zipf: 1.1, Tokens: LogNormal(2500, 0.6, 256, 16384), Shared: 0.8},
			Turns:        Pareto(1, 2.5, 20),
			Abandon:      0.2,
			ThinkS:       LogNormal(30, 1.0, 1, 3600),
			UserTokens:   LogNormal(200, 1.0, 2, 16384),
			OutputTokens: LogNormal(200, 0.8, 1, 4096),
		},
		Agent: AgentParams{
			Prefix:     Pool{Count: 8, Zipf: 1, Tokens: LogNormal(4000, 0.4, 512, 32768), Shared: 1},
			TaskTokens: LogNormal(300, 1.0, 8, 16384),
			Steps:      Pareto(2, 1.1, 300),
			CallTokens: LogNormal(80, 0.7, 1, 2048),
			ToolTokens: LogNormal(400, 1.2, 1, 32768),
			ToolS:      LogNormal(1.5, 1.0, 0.05, 600),
		},
		RAG: RAGParams{
			Prefix:       Pool{Count: 4, Zipf: 1, Tokens: LogNormal(500, 0.5, 0, 8192), Shared: 1},
			Docs:         5000,
			DocZipf:      0.9,
			DocTokens:    LogNormal(800, 0.6, 32, 16384),
			K:            Uniform(2, 6),
			QueryTokens:  LogNormal(60, 0.8, 2, 4096),
			OutputTokens: LogNormal(250, 0.8, 1, 4096),
			Turns:        Pareto(1, 2.0, 10),
			ThinkS:       LogNormal(45, 1.0, 1, 3600),
		},
		OneShot: OneShotParams{
			PromptTokens: LogNormal(1500, 1.0, 16, 65536),
			OutputTokens: LogNormal(250, 0.8, 1, 4096),
		},
		Mix: []Weight{{Chat, 4}, {System, 2}, {Agent, 2}, {RAG, 1}, {OneShot, 1}},
	}
	c.Arrival.Rate = defaultRate(shape)
	return c
}

// defaultRate is the default session rate of shape, sessions per second.
// It sizes the live working set (concurrent sessions × their context) at
// a few to a few tens of percent of a 10-20k-request trace's unique
// blocks, so that capacities of 1-50% span from thrashing to holding every
// live session.
func defaultRate(shape Shape) float64 {
	switch shape {
	case System, RAG:
		return 3
	case Mix:
		return 6
	case OneShot:
		return 10
	default: // chat, agent
		return 2
	}
}

// ParseConfig decodes a JSON scenario: the fields it names override
// Default of its "shape" (which it must name); unknown fields are errors.
// The result is validated.
func ParseConfig(data []byte) (Config, error) {
	if len(data) > maxConfigSize {
		return Config{}, fmt.Errorf("%w: config is %d bytes, more than %d", ErrConfig, len(data), maxConfigSize)
	}
	var head struct {
		Shape Shape `json:"shape"`
	}
	if err := json.Unmarshal(data, &head); err != nil {
		return Config{}, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	if !slices.Contains(Shapes(), head.Shape) {
		return Config{}, fmt.Errorf("%w: shape %q is not one of %s", ErrConfig, head.Shape, shapeList())
	}
	c := Default(head.Shape)
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return Config{}, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	if dec.More() {
		return Config{}, fmt.Errorf("%w: data after the JSON object", ErrConfig)
	}
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

func shapeList() string {
	var s []string
	for _, sh := range Shapes() {
		s = append(s, string(sh))
	}
	return strings.Join(s, ", ")
}

// Validate checks every field against its bound, naming the first that
// fails.
func (c *Config) Validate() error {
	v := validator{}
	if !slices.Contains(Shapes(), c.Shape) {
		v.fail("shape", fmt.Sprintf("%q is not one of %s", c.Shape, shapeList()))
	}
	v.intIn("requests", c.Requests, 1, MaxRequests)
	v.intIn("max_context", c.MaxContext, BlockTokens, MaxContextCap)
	v.floatIn("decode_ms_per_token", c.DecodeMsPerToken, 0, 1e4)
	c.Arrival.validate(&v)
	tok := float64(c.MaxContext)
	for _, s := range c.shapesUsed() {
		switch s {
		case Chat:
			c.Chat.validate(&v, "chat", tok)
		case System:
			c.System.validate(&v, "system", tok)
		case Agent:
			a := &c.Agent
			a.Prefix.validate(&v, "agent.prefix", tok)
			v.dist("agent.task_tokens", a.TaskTokens, tok)
			v.countDist("agent.steps", a.Steps)
			v.dist("agent.call_tokens", a.CallTokens, tok)
			v.dist("agent.tool_tokens", a.ToolTokens, tok)
			v.dist("agent.tool_s", a.ToolS, maxSeconds)
		case RAG:
			r := &c.RAG
			r.Prefix.validate(&v, "rag.prefix", tok)
			v.intIn("rag.docs", r.Docs, 1, maxDocs)
			v.floatIn("rag.doc_zipf", r.DocZipf, 0, maxZipf)
			v.dist("rag.doc_tokens", r.DocTokens, tok)
			v.dist("rag.k", r.K, maxK)
			if v.err == nil && r.K.Max > float64(r.Docs) {
				v.fail("rag.k", fmt.Sprintf("max %v is more than rag.docs %d", r.K.Max, r.Docs))
			}
			v.floatIn("rag.sorted_frac", r.SortedFrac, 0, 1)
			v.dist("rag.query_tokens", r.QueryTokens, tok)
			v.dist("rag.output_tokens", r.OutputTokens, tok)
			v.countDist("rag.turns", r.Turns)
			v.dist("rag.think_s", r.ThinkS, maxSeconds)
		case OneShot:
			v.dist("oneshot.prompt_tokens", c.OneShot.PromptTokens, tok)
			v.dist("oneshot.output_tokens", c.OneShot.OutputTokens, tok)
		}
	}
	if c.Shape == Mix {
		total := 0.0
		seen := map[Shape]bool{}
		for _, w := range c.Mix {
			if !slices.Contains(baseShapes, w.Shape) {
				v.fail("mix", fmt.Sprintf("shape %q is not one of chat, system, agent, rag, oneshot", w.Shape))
			} else if seen[w.Shape] {
				v.fail("mix", fmt.Sprintf("shape %q named twice", w.Shape))
			}
			seen[w.Shape] = true
			v.floatIn("mix weight of "+string(w.Shape), w.Weight, 0, 1e6)
			total += w.Weight
		}
		if v.err == nil && !(total > 0) {
			v.fail("mix", "weights sum to 0")
		}
	}
	return v.err
}

// shapesUsed are the base shapes whose parameters c uses.
func (c *Config) shapesUsed() []Shape {
	if c.Shape != Mix {
		return []Shape{c.Shape}
	}
	var s []Shape
	for _, w := range c.Mix {
		if w.Weight > 0 && slices.Contains(baseShapes, w.Shape) {
			s = append(s, w.Shape)
		}
	}
	return s
}

func (a *Arrival) validate(v *validator) {
	switch a.Pattern {
	case Poisson, "":
	case Diurnal:
		v.floatIn("arrival.period_s", a.PeriodS, 1, maxSeconds)
		v.floatIn("arrival.amplitude", a.Amplitude, 0, 0.99)
	case Bursty:
		v.floatIn("arrival.burst_factor", a.BurstFactor, 1, 1000)
		v.floatIn("arrival.burst_frac", a.BurstFrac, 0.001, 0.999)
		v.floatIn("arrival.burst_mean_s", a.BurstMeanS, 0.001, maxSeconds)
	default:
		v.fail("arrival.pattern", fmt.Sprintf("%q is not poisson, diurnal or bursty", a.Pattern))
	}
	v.floatIn("arrival.rate", a.Rate, 1e-6, maxRate)
}

func (p *ChatParams) validate(v *validator, name string, tok float64) {
	p.Prefix.validate(v, name+".prefix", tok)
	v.countDist(name+".turns", p.Turns)
	v.floatIn(name+".abandon", p.Abandon, 0, 1)
	v.dist(name+".think_s", p.ThinkS, maxSeconds)
	v.dist(name+".user_tokens", p.UserTokens, tok)
	v.dist(name+".output_tokens", p.OutputTokens, tok)
}

func (p *Pool) validate(v *validator, name string, tok float64) {
	v.floatIn(name+".shared", p.Shared, 0, 1)
	lo := 1
	if p.Shared == 0 {
		lo = 0
	}
	v.intIn(name+".count", p.Count, lo, maxPool)
	v.floatIn(name+".zipf", p.Zipf, 0, maxZipf)
	v.dist(name+".tokens", p.Tokens, tok)
}

// validator keeps the first error.
type validator struct{ err error }

func (v *validator) fail(field, msg string) {
	if v.err == nil {
		v.err = fmt.Errorf("%w: %s: %s", ErrConfig, field, msg)
	}
}

func (v *validator) intIn(field string, x, lo, hi int) {
	if x < lo || x > hi {
		v.fail(field, fmt.Sprintf("%d is outside [%d, %d]", x, lo, hi))
	}
}

func (v *validator) floatIn(field string, x, lo, hi float64) {
	if math.IsNaN(x) || x < lo || x > hi {
		v.fail(field, fmt.Sprintf("%v is outside [%v, %v]", x, lo, hi))
	}
}

// dist checks d and that its values stay within [0, hi].
func (v *validator) dist(field string, d Dist, hi float64) {
	if err := d.check(hi); err != nil {
		v.fail(field, err.Error())
	}
}

// countDist checks a distribution of counts: at least 1, at most maxCount.
func (v *validator) countDist(field string, d Dist) {
	v.dist(field, d, maxCount)
	if v.err == nil && d.lower() < 1 {
		v.fail(field, "can draw less than 1")
	}
}
