package plot

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpucache/gpucache/tools/internal/replay"
)

func sample() []replay.Result {
	var rs []replay.Result
	for _, pol := range []string{"lru", "prefix", "opt"} {
		// Unsorted on purpose: the series must come out sorted.
		for _, c := range []float64{0.10, 0.01, 0.50, 0.02, 0.05} {
			hr := c * 2
			if pol == "opt" {
				hr = 0.3 + c/2
			}
			rs = append(rs, replay.Result{Policy: pol, CapacityFrac: c, HitRatio: min(hr, 0.37)})
		}
	}
	return rs
}

func TestSeriesOf(t *testing.T) {
	s := SeriesOf(sample())
	if len(s) != 3 || s[0].Policy != "lru" || s[1].Policy != "prefix" || s[2].Policy != "opt" {
		t.Fatalf("series %+v", s)
	}
	want := []float64{1, 2, 5, 10, 50}
	for _, se := range s {
		if len(se.X) != len(want) {
			t.Fatalf("%s: %v", se.Policy, se.X)
		}
		for i := range want {
			if d := se.X[i] - want[i]; d > 1e-9 || d < -1e-9 {
				t.Fatalf("%s: x %v, want %v", se.Policy, se.X, want)
			}
		}
		if se.Policy == "lru" && (se.Y[0] != 0.02 || se.Y[4] != 0.37) {
			t.Fatalf("lru y %v not sorted with x", se.Y)
		}
	}
}

// svgDoc is what the test reads back from the SVG.
type svgDoc struct {
	root  xml.StartElement
	paths int
	texts []string
}

func parseSVG(t *testing.T, b []byte) svgDoc {
	t.Helper()
	if !bytes.HasPrefix(bytes.TrimSpace(b), []byte("<?xml")) {
		t.Fatalf("no XML header: %.60q", b)
	}
	var doc svgDoc
	dec := xml.NewDecoder(bytes.NewReader(b))
	depth, inText := 0, false
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("SVG does not parse: %v", err)
		}
		switch v := tok.(type) {
		case xml.StartElement:
			if depth == 0 {
				doc.root = v.Copy()
			}
			depth++
			switch v.Name.Local {
			case "path":
				doc.paths++
			case "text":
				inText = true
			}
		case xml.EndElement:
			depth--
			if v.Name.Local == "text" {
				inText = false
			}
		case xml.CharData:
			if inText {
				doc.texts = append(doc.texts, strings.TrimSpace(string(v)))
			}
		}
	}
	if depth != 0 {
		t.Fatalf("unbalanced SVG (depth %d)", depth)
	}
	return doc
}

func TestWriteSVG(t *testing.T) {
	rs := sample()
	p, series, err := Build(rs, Options{Subtitle: "tiny trace"})
	if err != nil {
		t.Fatal(err)
	}
	if len(series) != 3 || p.Title.Text == "" || p.X.Label.Text == "" || p.Y.Label.Text == "" {
		t.Fatalf("series %d, title %q, labels %q %q", len(series), p.Title.Text, p.X.Label.Text, p.Y.Label.Text)
	}
	path := filepath.Join(t.TempDir(), "hit.svg")
	if err := WriteFile(path, rs, Options{Subtitle: "tiny trace"}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	doc := parseSVG(t, b)
	if doc.root.Name.Local != "svg" {
		t.Fatalf("root element %q, want svg", doc.root.Name.Local)
	}
	// One legend entry per policy: each name is drawn exactly once.
	for _, pol := range []string{"lru", "prefix", "opt"} {
		n := 0
		for _, s := range doc.texts {
			if s == pol {
				n++
			}
		}
		if n != 1 {
			t.Errorf("policy %q drawn %d times in the SVG text, want 1 (texts %q)", pol, n, doc.texts)
		}
	}
	joined := strings.Join(doc.texts, "|")
	for _, want := range []string{"Prefix-hit ratio vs cache capacity", "tiny trace", "prefix-hit ratio", "cache capacity", "10%", "50%"} {
		if !strings.Contains(joined, want) {
			t.Errorf("SVG text lacks %q: %q", want, joined)
		}
	}
	// Each policy draws one polyline plus its legend thumbnail.
	if doc.paths < 2*len(series) {
		t.Errorf("%d paths, want at least %d", doc.paths, 2*len(series))
	}
}

func TestWritePNG(t *testing.T) {
	var buf bytes.Buffer
	if err := Write(&buf, "png", sample(), Options{}); err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(buf.Bytes(), []byte("\x89PNG\r\n\x1a\n")) {
		t.Fatalf("not a PNG: %.8q", buf.Bytes())
	}
}

func TestErrors(t *testing.T) {
	if _, err := Format("out.gif"); err == nil {
		t.Error("Format(out.gif): no error")
	}
	if _, _, err := Build(nil, Options{}); err == nil {
		t.Error("Build(nil): no error")
	}
	if _, _, err := Build([]replay.Result{{Policy: "lru", CapacityFrac: 0}}, Options{}); err == nil {
		t.Error("Build with capacity 0: no error")
	}
	path := filepath.Join(t.TempDir(), "x.svg")
	if err := WriteFile(path, nil, Options{}); err == nil {
		t.Error("WriteFile(nil): no error")
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("failed WriteFile left %s behind (%v)", path, err)
	}
}
