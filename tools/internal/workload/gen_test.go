package workload

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/gpucache/gpucache/tools/internal/replay"
)

// small returns the default scenario of shape with n requests.
func small(shape Shape, n int) Config {
	c := Default(shape)
	c.Requests = n
	return c
}

func encode(t *testing.T, reqs []replay.Request) []byte {
	t.Helper()
	var b []byte
	for i := range reqs {
		b = AppendJSONL(b, &reqs[i])
	}
	return b
}

func mustGenerate(t *testing.T, c Config) []replay.Request {
	t.Helper()
	reqs, err := Generate(c)
	if err != nil {
		t.Fatal(err)
	}
	if len(reqs) != c.Requests {
		t.Fatalf("%s: %d requests, want %d", c.Shape, len(reqs), c.Requests)
	}
	return reqs
}

// TestDeterministic: the same config writes the same bytes; another seed
// writes other bytes.
func TestDeterministic(t *testing.T) {
	for _, s := range Shapes() {
		t.Run(string(s), func(t *testing.T) {
			c := small(s, 2000)
			a := encode(t, mustGenerate(t, c))
			b := encode(t, mustGenerate(t, c))
			if !bytes.Equal(a, b) {
				t.Fatal("two runs of one config differ")
			}
			c.Seed++
			if bytes.Equal(a, encode(t, mustGenerate(t, c))) {
				t.Fatal("seeds 1 and 2 wrote the same trace")
			}
		})
	}
}

// TestPrefixStable: a trace of n requests is the first n of a longer one
// (sessions draw from their own streams), so --requests only cuts.
func TestPrefixStable(t *testing.T) {
	long := encode(t, mustGenerate(t, small(Mix, 3000)))
	short := encode(t, mustGenerate(t, small(Mix, 1000)))
	if !bytes.HasPrefix(long, short) {
		t.Fatal("the 1000-request trace is not a prefix of the 3000-request one")
	}
}

// TestParsesWithReplay: replay.ReadTrace reads the output unchanged, and
// every line is well formed: time order, hash_ids fitting input_length.
func TestParsesWithReplay(t *testing.T) {
	for _, s := range Shapes() {
		t.Run(string(s), func(t *testing.T) {
			c := small(s, 3000)
			reqs := mustGenerate(t, c)
			got, err := replay.ReadTrace(bytes.NewReader(encode(t, reqs)), 0)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(reqs) {
				t.Fatalf("read %d requests, wrote %d", len(got), len(reqs))
			}
			for i := range got {
				g, w := got[i], reqs[i]
				if g.Timestamp != w.Timestamp || g.InputLength != w.InputLength || g.OutputLength != w.OutputLength || !slices.Equal(g.HashIDs, w.HashIDs) {
					t.Fatalf("request %d: read %+v, wrote %+v", i, g, w)
				}
				n := len(g.HashIDs)
				if (n-1)*BlockTokens >= g.InputLength || g.InputLength > n*BlockTokens {
					t.Fatalf("request %d: %d hash ids for %d tokens", i, n, g.InputLength)
				}
				if g.InputLength > c.MaxContext {
					t.Fatalf("request %d: %d tokens, context %d", i, g.InputLength, c.MaxContext)
				}
				if i > 0 && g.Timestamp < got[i-1].Timestamp {
					t.Fatalf("request %d: timestamp %d before %d", i, g.Timestamp, got[i-1].Timestamp)
				}
			}
			if got[0].Timestamp != 0 {
				t.Fatalf("first timestamp %d, want 0", got[0].Timestamp)
			}
		})
	}
}

// TestFormat: the line format is the published traces'.
func TestFormat(t *testing.T) {
	r := replay.Request{Timestamp: 3, InputLength: 6758, OutputLength: 500, HashIDs: []uint64{0, 1, 2}}
	want := `{"timestamp": 3, "input_length": 6758, "output_length": 500, "hash_ids": [0, 1, 2]}` + "\n"
	if got := string(AppendJSONL(nil, &r)); got != want {
		t.Fatalf("got %q\nwant %q", got, want)
	}
}

// TestValidateRejects: absurd parameters are refused, naming the field.
func TestValidateRejects(t *testing.T) {
	cases := []struct {
		field string
		edit  func(*Config)
	}{
		{"requests", func(c *Config) { c.Requests = 0 }},
		{"requests", func(c *Config) { c.Requests = MaxRequests + 1 }},
		{"max_context", func(c *Config) { c.MaxContext = 100 }},
		{"arrival.rate", func(c *Config) { c.Arrival.Rate = 0 }},
		{"arrival.pattern", func(c *Config) { c.Arrival.Pattern = "weekly" }},
		{"arrival.amplitude", func(c *Config) { c.Arrival.Pattern = Diurnal; c.Arrival.Amplitude = 1.5 }},
		{"arrival.burst_frac", func(c *Config) { c.Arrival.Pattern = Bursty; c.Arrival.BurstFrac = 1 }},
		{"chat.turns", func(c *Config) { c.Chat.Turns = Pareto(1, 1.3, 1e9) }},
		{"chat.turns", func(c *Config) { c.Chat.Turns = Uniform(0, 3) }},
		{"chat.user_tokens", func(c *Config) { c.Chat.UserTokens = LogNormal(100, 1, 0, 1<<30) }},
		{"chat.user_tokens", func(c *Config) { c.Chat.UserTokens = LogNormal(-1, 1, 0, 100) }},
		{"chat.user_tokens", func(c *Config) { c.Chat.UserTokens = Dist{Kind: "gamma", Max: 10} }},
		{"chat.think_s", func(c *Config) { c.Chat.ThinkS = Uniform(10, 5) }},
		{"chat.abandon", func(c *Config) { c.Chat.Abandon = 2 }},
		{"chat.prefix.count", func(c *Config) { c.Chat.Prefix.Count = 0 }},
		{"chat.prefix.zipf", func(c *Config) { c.Chat.Prefix.Zipf = -1 }},
		{"shape", func(c *Config) { c.Shape = "video" }},
	}
	for _, tc := range cases {
		c := Default(Chat)
		tc.edit(&c)
		err := c.Validate()
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%s: Validate = %v, want ErrConfig naming it", tc.field, err)
		}
		if _, err := Generate(c); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: Generate = %v, want ErrConfig", tc.field, err)
		}
	}
	for _, s := range Shapes() {
		c := Default(s)
		if err := c.Validate(); err != nil {
			t.Errorf("Default(%s): %v", s, err)
		}
	}
}
