package workload

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/gpucache/gpucache/tools/internal/replay"
)

func TestParseConfig(t *testing.T) {
	c, err := ParseConfig([]byte(`{"shape": "rag", "requests": 50, "rag": {"docs": 10, "k": {"kind": "const", "value": 2, "min": 2, "max": 2}}}`))
	if err != nil {
		t.Fatal(err)
	}
	want := Default(RAG)
	want.Requests, want.RAG.Docs, want.RAG.K = 50, 10, Const(2)
	if !configEqual(c, want) {
		t.Fatalf("got %+v\nwant %+v", c, want)
	}
	// --print-config's output parses back to the same scenario.
	for _, s := range Shapes() {
		b, err := json.Marshal(Default(s))
		if err != nil {
			t.Fatal(err)
		}
		c, err := ParseConfig(b)
		if err != nil || !configEqual(c, Default(s)) {
			t.Fatalf("%s: round trip: %v", s, err)
		}
	}
	for _, bad := range []struct{ in, says string }{
		{`{"requests": 5}`, "shape"},
		{`{"shape": "video"}`, "shape"},
		{`{"shape": "chat", "reqests": 5}`, "reqests"},
		{`{"shape": "chat", "requests": -5}`, "requests"},
		{`{"shape": "chat"} {}`, "after"},
		{`{"shape": "chat", "chat": {"turns": {"kind": "pareto", "alpha": 1, "min": 1, "max": 1e12}}}`, "chat.turns"},
		{`{"shape": "rag", "rag": {"docs": 3, "k": {"kind": "uniform", "min": 2, "max": 6}}}`, "rag.k"},
		{`{"shape": "mix", "mix": [{"shape": "chat", "weight": 0}]}`, "mix"},
		{`{"shape": "mix", "mix": [{"shape": "mix", "weight": 1}]}`, "mix"},
		{`[`, "bad config"},
		{strings.Repeat(" ", maxConfigSize+1), "bytes"},
	} {
		_, err := ParseConfig([]byte(bad.in))
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), bad.says) {
			t.Errorf("ParseConfig(%.40q) = %v, want ErrConfig saying %q", bad.in, err, bad.says)
		}
	}
}

func configEqual(a, b Config) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return bytes.Equal(x, y)
}

// FuzzParseConfig: any input is a config that Validate accepts and that
// generates a trace replay reads, or an ErrConfig; never a panic.
func FuzzParseConfig(f *testing.F) {
	for _, s := range Shapes() {
		b, _ := json.Marshal(Default(s))
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseConfig(data)
		if err != nil {
			if !errors.Is(err, ErrConfig) {
				t.Fatalf("error %v is not ErrConfig", err)
			}
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("parsed config fails Validate: %v", err)
		}
		if c.RAG.Docs > 10000 || c.Chat.Prefix.Count > 1000 || c.System.Prefix.Count > 1000 ||
			c.Agent.Prefix.Count > 1000 || c.RAG.Prefix.Count > 1000 {
			return // valid, but slow to set up in a fuzz loop
		}
		c.Requests = min(c.Requests, 30)
		var buf []byte
		err = Run(c, func(r *replay.Request) error {
			buf = AppendJSONL(buf, r)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		reqs, err := replay.ReadTrace(bytes.NewReader(buf), 0)
		if err != nil || len(reqs) != c.Requests {
			t.Fatalf("generated trace: %d requests, %v", len(reqs), err)
		}
	})
}
