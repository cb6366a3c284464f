package benchcli

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// replayGoldenText is what `replay --trace trace.jsonl --policies lru,opt
// --capacities 100,50,25 --workers 2` printed on tinyTrace before the
// flash tier's flags existed (commit 5d6beb6), the run time masked, with
// the realistic compute-saved table and JSON fields (cost_model,
// model_compute_saved) added since.
const replayGoldenText = `trace trace.jsonl: 5 requests, 8 unique blocks, 13 block accesses
simulated 2 policies × 3 capacities in 0.0s (2 workers)

prefix-hit ratio (leading-run hits / block accesses)
  capacity  blocks     lru     opt
       25%       2  0.0000  0.3077
       50%       4  0.1538  0.3846
      100%       8  0.3846  0.3846

prefill tokens saved, % of 6000 prompt tokens
  capacity  blocks     lru     opt
       25%       2   0.00%  34.13%
       50%       4  17.07%  42.07%
      100%       8  42.07%  42.07%

compute saved, % of prefill attention work (a block at position p costs ∝ its attention span)
  capacity  blocks     lru     opt
       25%       2   0.00%  23.10%
       50%       4  11.55%  36.33%
      100%       8  36.33%  36.33%

compute saved, % of prefill FLOPs under llama-3-8b (2 × parameters per token, plus attention over its context)
  capacity  blocks     lru     opt
       25%       2   0.00%  33.87%
       50%       4  16.93%  41.93%
      100%       8  41.93%  41.93%

`

// replayGoldenJSON is its --json file, the trace's path and the run times
// masked.
const replayGoldenJSON = `{
  "trace": {
    "file": "TRACE",
    "requests": 5,
    "unique_blocks": 8,
    "blocks": 13
  },
  "results": [
    {
      "policy": "lru",
      "capacity_frac": 0.25,
      "capacity_blocks": 2,
      "requests": 5,
      "blocks": 13,
      "hit_blocks": 0,
      "hit_ratio": 0,
      "prompt_tokens": 6000,
      "saved_tokens": 0,
      "compute_saved": 0,
      "cost_model": "llama-3-8b",
      "model_compute_saved": 0,
      "seconds": 0
    },
    {
      "policy": "opt",
      "capacity_frac": 0.25,
      "capacity_blocks": 2,
      "requests": 5,
      "blocks": 13,
      "hit_blocks": 4,
      "hit_ratio": 0.3076923076923077,
      "prompt_tokens": 6000,
      "saved_tokens": 2048,
      "compute_saved": 0.23103675985031918,
      "cost_model": "llama-3-8b",
      "model_compute_saved": 0.33867277088162073,
      "seconds": 0
    },
    {
      "policy": "lru",
      "capacity_frac": 0.5,
      "capacity_blocks": 4,
      "requests": 5,
      "blocks": 13,
      "hit_blocks": 2,
      "hit_ratio": 0.15384615384615385,
      "prompt_tokens": 6000,
      "saved_tokens": 1024,
      "compute_saved": 0.11551837992515959,
      "cost_model": "llama-3-8b",
      "model_compute_saved": 0.16933638544081037,
      "seconds": 0
    },
    {
      "policy": "opt",
      "capacity_frac": 0.5,
      "capacity_blocks": 4,
      "requests": 5,
      "blocks": 13,
      "hit_blocks": 5,
      "hit_ratio": 0.38461538461538464,
      "prompt_tokens": 6000,
      "saved_tokens": 2524,
      "compute_saved": 0.363317191283293,
      "cost_model": "llama-3-8b",
      "model_compute_saved": 0.4192832885977739,
      "seconds": 0
    },
    {
      "policy": "lru",
      "capacity_frac": 1,
      "capacity_blocks": 8,
      "requests": 5,
      "blocks": 13,
      "hit_blocks": 5,
      "hit_ratio": 0.38461538461538464,
      "prompt_tokens": 6000,
      "saved_tokens": 2524,
      "compute_saved": 0.363317191283293,
      "cost_model": "llama-3-8b",
      "model_compute_saved": 0.4192832885977739,
      "seconds": 0
    },
    {
      "policy": "opt",
      "capacity_frac": 1,
      "capacity_blocks": 8,
      "requests": 5,
      "blocks": 13,
      "hit_blocks": 5,
      "hit_ratio": 0.38461538461538464,
      "prompt_tokens": 6000,
      "saved_tokens": 2524,
      "compute_saved": 0.363317191283293,
      "cost_model": "llama-3-8b",
      "model_compute_saved": 0.4192832885977739,
      "seconds": 0
    }
  ]
}
`

// TestReplayWithoutFlashUnchanged: without --flash-capacities, the
// simulate mode prints and writes byte for byte what it did before the
// flash tier (run times and the trace's path aside).
func TestReplayWithoutFlashUnchanged(t *testing.T) {
	trace := tinyTrace(t)
	js := filepath.Join(t.TempDir(), "out.json")
	r := run(t, "", "replay", "--trace", trace, "--policies", "lru,opt", "--capacities", "100,50,25",
		"--workers", "2", "--progress", "off", "--json", js)
	if r.code != 0 {
		t.Fatalf("replay: %+v", r)
	}
	elapsed := regexp.MustCompile(`in [0-9]+\.[0-9]s \(`)
	if got, want := elapsed.ReplaceAllString(r.stdout, "in X.Xs ("), elapsed.ReplaceAllString(replayGoldenText, "in X.Xs ("); got != want {
		t.Errorf("stdout changed:\n got:\n%s\nwant:\n%s", got, want)
	}
	b, err := os.ReadFile(js)
	if err != nil {
		t.Fatal(err)
	}
	seconds := regexp.MustCompile(`"seconds": [0-9.e+-]+`)
	got := seconds.ReplaceAllString(strings.Replace(string(b), `"file": "`+trace+`"`, `"file": "TRACE"`, 1), `"seconds": 0`)
	if got != replayGoldenJSON {
		t.Errorf("JSON changed:\n got:\n%s\nwant:\n%s", got, replayGoldenJSON)
	}
}
