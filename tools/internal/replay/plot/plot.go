// Package plot draws the replay's hit-ratio curves: prefix-hit
// ratio against cache capacity, one line per policy, as SVG, PNG or PDF,
// with gonum.org/v1/plot (ADR 0009).
package plot

import (
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	gplot "gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"

	"github.com/gpucache/gpucache/tools/internal/replay"
)

// Options style the figure. The zero value is usable.
type Options struct {
	// Title is the figure's title. Default "Prefix-hit ratio vs cache capacity".
	Title string
	// Subtitle, if set, is a second title line (the trace, its size).
	Subtitle string
	// LogX selects a logarithmic capacity axis. Nil: logarithmic when the
	// capacities span a factor of 10 or more.
	LogX *bool
	// Width and Height of the figure. Default 8 × 5 inches.
	Width, Height vg.Length
}

// Series is one policy's curve: capacity in percent of the trace's unique
// blocks (X) against prefix-hit ratio (Y), sorted by X.
type Series struct {
	Policy string
	X, Y   []float64
}

// SeriesOf groups results by policy, in the order policies first appear,
// each sorted by capacity.
func SeriesOf(results []replay.Result) []Series {
	var out []Series
	at := map[string]int{}
	for _, r := range results {
		i, ok := at[r.Policy]
		if !ok {
			i = len(out)
			at[r.Policy] = i
			out = append(out, Series{Policy: r.Policy})
		}
		out[i].X = append(out[i].X, r.CapacityFrac*100)
		out[i].Y = append(out[i].Y, r.HitRatio)
	}
	for i := range out {
		s := &out[i]
		idx := make([]int, len(s.X))
		for j := range idx {
			idx[j] = j
		}
		slices.SortStableFunc(idx, func(a, b int) int {
			switch {
			case s.X[a] < s.X[b]:
				return -1
			case s.X[a] > s.X[b]:
				return 1
			}
			return 0
		})
		x, y := make([]float64, len(idx)), make([]float64, len(idx))
		for j, k := range idx {
			x[j], y[j] = s.X[k], s.Y[k]
		}
		s.X, s.Y = x, y
	}
	return out
}

// Build returns the figure: one line (with point markers) per policy, a
// legend, axis labels and the title.
func Build(results []replay.Result, opt Options) (*gplot.Plot, []Series, error) {
	series := SeriesOf(results)
	if len(series) == 0 {
		return nil, nil, fmt.Errorf("plot: no results")
	}
	minX, maxX, caps, err := capacities(series)
	if err != nil {
		return nil, nil, err
	}
	logX := maxX/minX >= 10
	if opt.LogX != nil {
		logX = *opt.LogX
	}

	p := gplot.New()
	p.Title.Text = opt.Title
	if p.Title.Text == "" {
		p.Title.Text = "Prefix-hit ratio vs cache capacity"
	}
	if opt.Subtitle != "" {
		p.Title.Text += "\n" + opt.Subtitle
	}
	p.X.Label.Text = "cache capacity (% of the trace's unique blocks)"
	if logX {
		p.X.Label.Text += ", log scale"
		p.X.Scale = gplot.LogScale{}
	}
	p.Y.Label.Text = "prefix-hit ratio (leading-run hits / blocks)"
	p.X.Tick.Marker = capTicks(caps)
	p.Y.Min = 0
	p.X.Min, p.X.Max = minX, maxX
	if logX {
		p.X.Min, p.X.Max = minX/1.15, maxX*1.15
	} else {
		pad := (maxX - minX) * 0.03
		p.X.Min, p.X.Max = max(0, minX-pad), maxX+pad
	}
	p.Legend.Top = true
	p.Legend.Left = true
	p.Legend.XOffs = vg.Points(6)
	p.Legend.YOffs = -vg.Points(6)
	grid := plotter.NewGrid()
	grid.Vertical.Color = plotutil.Color(6)
	grid.Horizontal.Color = plotutil.Color(6)
	grid.Vertical.Dashes = []vg.Length{vg.Points(1), vg.Points(3)}
	grid.Horizontal.Dashes = grid.Vertical.Dashes
	p.Add(grid)

	maxY := 0.0
	for i, s := range series {
		xys := make(plotter.XYs, len(s.X))
		for j := range s.X {
			xys[j].X, xys[j].Y = s.X[j], s.Y[j]
			maxY = max(maxY, s.Y[j])
		}
		line, points, err := plotter.NewLinePoints(xys)
		if err != nil {
			return nil, nil, fmt.Errorf("plot: policy %s: %w", s.Policy, err)
		}
		c := plotutil.DarkColors[i%len(plotutil.DarkColors)]
		line.Color = c
		line.Width = vg.Points(1.5)
		// Distinct dashes as well as colours: policies that nearly agree
		// (lru and prefix) draw over each other, and the dashes let both
		// show.
		line.Dashes = plotutil.Dashes(i)
		points.Color = c
		points.Shape = plotutil.Shape(i)
		points.Radius = vg.Points(2.5)
		p.Add(line, points)
		p.Legend.Add(s.Policy, line, points)
	}
	p.Y.Max = math.Min(1, math.Ceil((maxY+0.02)*20)/20)
	if p.Y.Max <= p.Y.Min {
		p.Y.Max = 1
	}
	p.Y.Tick.Marker = ratioTicks(p.Y.Max)
	return p, series, nil
}

// capacities returns the least and greatest capacity of the series and
// every capacity once, in order; each must be positive and finite.
func capacities(series []Series) (minX, maxX float64, caps []float64, err error) {
	minX, maxX = math.Inf(1), math.Inf(-1)
	for _, s := range series {
		for _, x := range s.X {
			if !(x > 0) || math.IsInf(x, 0) {
				return 0, 0, nil, fmt.Errorf("plot: policy %s: capacity %v%% is not positive", s.Policy, x)
			}
			minX, maxX = min(minX, x), max(maxX, x)
			if !slices.Contains(caps, x) {
				caps = append(caps, x)
			}
		}
	}
	slices.Sort(caps)
	return minX, maxX, caps, nil
}

// ratioTicks labels the ratio axis every 0.05 up to 0.5, every 0.1 above.
func ratioTicks(top float64) gplot.ConstantTicks {
	step := 0.05
	if top > 0.5 {
		step = 0.1
	}
	var t gplot.ConstantTicks
	for i := 0; float64(i)*step <= top+1e-9; i++ {
		v := float64(i) * step
		t = append(t, gplot.Tick{Value: v, Label: strconv.FormatFloat(v, 'f', 2, 64)})
	}
	return t
}

// capTicks labels the capacities that were run.
func capTicks(caps []float64) gplot.ConstantTicks {
	t := make(gplot.ConstantTicks, len(caps))
	for i, c := range caps {
		t[i] = gplot.Tick{Value: c, Label: strconv.FormatFloat(c, 'g', 4, 64) + "%"}
	}
	return t
}

// Format returns the image format of a file name ("svg", "png", "pdf"),
// from its extension.
func Format(path string) (string, error) {
	ext := strings.ToLower(strings.TrimPrefix(filepath.Ext(path), "."))
	switch ext {
	case "svg", "png", "pdf":
		return ext, nil
	}
	return "", fmt.Errorf("plot: %s: want a .svg, .png or .pdf file name", path)
}

// Write draws the figure of results to w in format ("svg", "png", "pdf").
func Write(w io.Writer, format string, results []replay.Result, opt Options) error {
	p, _, err := Build(results, opt)
	if err != nil {
		return err
	}
	width, height := opt.Width, opt.Height
	if width <= 0 {
		width = 8 * vg.Inch
	}
	if height <= 0 {
		height = 5 * vg.Inch
	}
	wt, err := p.WriterTo(width, height, format)
	if err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	_, err = wt.WriteTo(w)
	return err
}

// WriteFile writes the figure to path, in the format its extension names.
func WriteFile(path string, results []replay.Result, opt Options) error {
	format, err := Format(path)
	if err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := Write(f, format, results, opt); err != nil {
		f.Close()
		os.Remove(path)
		return err
	}
	return f.Close()
}
