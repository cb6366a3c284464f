package workload

import (
	"strconv"

	"github.com/gpucache/gpucache/tools/internal/replay"
)

// AppendJSONL appends r as one Mooncake trace line, formatted as the
// published traces are:
//
//	{"timestamp": 0, "input_length": 6758, "output_length": 500, "hash_ids": [0, 1, 2]}
func AppendJSONL(dst []byte, r *replay.Request) []byte {
	dst = append(dst, `{"timestamp": `...)
	dst = strconv.AppendInt(dst, r.Timestamp, 10)
	dst = append(dst, `, "input_length": `...)
	dst = strconv.AppendInt(dst, int64(r.InputLength), 10)
	dst = append(dst, `, "output_length": `...)
	dst = strconv.AppendInt(dst, int64(r.OutputLength), 10)
	dst = append(dst, `, "hash_ids": [`...)
	for i, h := range r.HashIDs {
		if i > 0 {
			dst = append(dst, ", "...)
		}
		dst = strconv.AppendUint(dst, h, 10)
	}
	return append(dst, "]}\n"...)
}

// Stats summarises a trace as a cache sees it.
type Stats struct {
	Requests     int   `json:"requests"`
	UniqueBlocks int   `json:"unique_blocks"`
	Accesses     int64 `json:"accesses"` // block accesses: the sum of len(hash_ids)
	PromptTokens int64 `json:"prompt_tokens"`
	DurationMs   int64 `json:"duration_ms"` // last timestamp − first
	// MaxHitRatio is the prefix-hit ratio of an infinite cache: the share
	// of accesses in the leading run of blocks seen before, the most any
	// policy can reach under tools/internal/replay's prefix semantics.
	MaxHitRatio float64 `json:"max_hit_ratio"`
	// MaxComputeSaved is the same for compute saved (replay.Simulate's
	// attention-cost weights).
	MaxComputeSaved float64 `json:"max_compute_saved"`
}

// Counter accumulates Stats request by request, for any trace.
type Counter struct {
	s           Stats
	seen        map[uint64]struct{}
	hits        int64
	cost, saved float64
	first       int64
}

// NewCounter returns an empty Counter.
func NewCounter() *Counter { return &Counter{seen: map[uint64]struct{}{}} }

// Add counts r.
func (c *Counter) Add(r *replay.Request) {
	if c.s.Requests == 0 {
		c.first = r.Timestamp
	}
	c.s.Requests++
	c.s.DurationMs = r.Timestamp - c.first
	hit := true
	for _, b := range replay.PromptBlocks(*r) {
		cost := float64(b.Tokens)*BlockTokens*float64(b.Position) + float64(b.Tokens)*float64(b.Tokens+1)/2
		c.cost += cost
		c.s.Accesses++
		c.s.PromptTokens += int64(b.Tokens)
		if _, ok := c.seen[b.Hash]; hit && ok {
			c.hits++
			c.saved += cost
		} else {
			hit = false
		}
	}
	for _, h := range r.HashIDs {
		c.seen[h] = struct{}{}
	}
}

// Stats returns the counts so far.
func (c *Counter) Stats() Stats {
	s := c.s
	s.UniqueBlocks = len(c.seen)
	if s.Accesses > 0 {
		s.MaxHitRatio = float64(c.hits) / float64(s.Accesses)
	}
	if c.cost > 0 {
		s.MaxComputeSaved = c.saved / c.cost
	}
	return s
}
