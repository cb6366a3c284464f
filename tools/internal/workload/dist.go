package workload

import (
	"errors"
	"fmt"
	"math"
	"sort"
)

// Dist is a distribution of a non-negative quantity (tokens, seconds,
// counts), always clamped to [Min, Max] so every draw is bounded.
//
//	const      Value
//	uniform    uniform on [Min, Max]
//	exp        exponential of mean Mean
//	lognormal  median Median, log-scale deviation Sigma (heavy right tail)
//	pareto     scale Min, shape Alpha: P(X > x) = (Min/x)^Alpha (heavy tail)
type Dist struct {
	Kind   string  `json:"kind"`
	Value  float64 `json:"value,omitempty"`
	Mean   float64 `json:"mean,omitempty"`
	Median float64 `json:"median,omitempty"`
	Sigma  float64 `json:"sigma,omitempty"`
	Alpha  float64 `json:"alpha,omitempty"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
}

// The distribution kinds.
const (
	KindConst     = "const"
	KindUniform   = "uniform"
	KindExp       = "exp"
	KindLogNormal = "lognormal"
	KindPareto    = "pareto"
)

// Const returns the distribution that always draws v.
func Const(v float64) Dist { return Dist{Kind: KindConst, Value: v, Min: v, Max: v} }

// Uniform returns the uniform distribution on [lo, hi].
func Uniform(lo, hi float64) Dist { return Dist{Kind: KindUniform, Min: lo, Max: hi} }

// Exp returns the exponential distribution of the given mean, clamped.
func Exp(mean, lo, hi float64) Dist { return Dist{Kind: KindExp, Mean: mean, Min: lo, Max: hi} }

// LogNormal returns the log-normal distribution of the given median and
// log-scale deviation, clamped to [lo, hi].
func LogNormal(median, sigma, lo, hi float64) Dist {
	return Dist{Kind: KindLogNormal, Median: median, Sigma: sigma, Min: lo, Max: hi}
}

// Pareto returns the Pareto distribution of scale lo and shape alpha,
// clamped to hi.
func Pareto(lo, alpha, hi float64) Dist {
	return Dist{Kind: KindPareto, Alpha: alpha, Min: lo, Max: hi}
}

// check validates d, whose draws must lie in [0, hi].
func (d Dist) check(hi float64) error {
	for _, x := range []float64{d.Value, d.Mean, d.Median, d.Sigma, d.Alpha, d.Min, d.Max} {
		if math.IsNaN(x) || math.IsInf(x, 0) || x < 0 {
			return errors.New("parameters must be finite and not negative")
		}
	}
	if d.Min > d.Max {
		return fmt.Errorf("min %v is more than max %v", d.Min, d.Max)
	}
	if d.Max > hi {
		return fmt.Errorf("max %v is more than the bound %v", d.Max, hi)
	}
	return d.checkKind(hi)
}

// checkKind validates the parameters d's kind reads.
func (d Dist) checkKind(hi float64) error {
	switch d.Kind {
	case KindConst:
		if d.Value > hi {
			return fmt.Errorf("value %v is more than the bound %v", d.Value, hi)
		}
	case KindUniform:
	case KindExp:
		if d.Mean <= 0 {
			return errors.New("exp needs mean > 0")
		}
	case KindLogNormal:
		if d.Median <= 0 || d.Sigma > 10 {
			return errors.New("lognormal needs median > 0 and sigma <= 10")
		}
	case KindPareto:
		if d.Alpha <= 0 || d.Alpha > 100 || d.Min <= 0 {
			return errors.New("pareto needs 0 < alpha <= 100 and min > 0")
		}
	default:
		return fmt.Errorf("kind %q is not const, uniform, exp, lognormal or pareto", d.Kind)
	}
	return nil
}

// lower is the least value d draws.
func (d Dist) lower() float64 {
	if d.Kind == KindConst {
		return d.Value
	}
	return d.Min
}

// draw samples d (which check accepted).
func (d Dist) draw(r *rng) float64 {
	var x float64
	switch d.Kind {
	case KindConst:
		return d.Value
	case KindUniform:
		x = d.Min + r.float64()*(d.Max-d.Min)
	case KindExp:
		x = d.Mean * r.exp()
	case KindLogNormal:
		x = d.Median * math.Exp(d.Sigma*r.norm())
	case KindPareto:
		x = d.Min / math.Pow(r.open01(), 1/d.Alpha)
	}
	return min(max(x, d.Min), d.Max)
}

// drawInt samples d rounded to the nearest integer.
func (d Dist) drawInt(r *rng) int { return int(math.Round(d.draw(r))) }

// rng is a splitmix64 stream: deterministic, fast, and defined here so a
// seed gives the same trace on every Go release.
type rng struct{ s uint64 }

func newRNG(seed, stream uint64) *rng {
	r := &rng{s: seed ^ mix64(stream+0x632be59bd9b4e019)}
	return r
}

func mix64(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

func (r *rng) uint64() uint64 {
	r.s += 0x9e3779b97f4a7c15
	return mix64(r.s)
}

// float64 is uniform on [0, 1).
func (r *rng) float64() float64 { return float64(r.uint64()>>11) / (1 << 53) }

// open01 is uniform on (0, 1].
func (r *rng) open01() float64 { return float64(r.uint64()>>11+1) / (1 << 53) }

// exp is exponential of mean 1.
func (r *rng) exp() float64 { return -math.Log(r.open01()) }

// norm is standard normal (Box-Muller; one of the pair is dropped).
func (r *rng) norm() float64 {
	return math.Sqrt(-2*math.Log(r.open01())) * math.Cos(2*math.Pi*r.float64())
}

// bernoulli is true with probability p.
func (r *rng) bernoulli(p float64) bool { return r.float64() < p }

// zipf draws ranks 0..n-1 with P(r) ∝ 1/(r+1)^s.
type zipf struct{ cdf []float64 }

func newZipf(n int, s float64) *zipf {
	cdf := make([]float64, n)
	sum := 0.0
	for i := range n {
		sum += math.Pow(float64(i+1), -s)
		cdf[i] = sum
	}
	for i := range cdf {
		cdf[i] /= sum
	}
	return &zipf{cdf: cdf}
}

func (z *zipf) draw(r *rng) int {
	u := r.float64()
	i := sort.SearchFloat64s(z.cdf, u)
	return min(i, len(z.cdf)-1)
}
