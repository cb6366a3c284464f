package replay

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/gpucache/gpucache/internal/policy"
)

// maxLine bounds one JSONL line (a request of 2^20 blocks is far beyond any
// model's context).
const maxLine = 64 << 20

// ReadTrace parses a Mooncake JSONL trace; limit > 0 keeps the first limit
// requests. Blank lines are skipped. A malformed line — bad JSON, a
// negative input or output length, or a request without hash_ids (which is
// also what a misspelt field name parses to) — is an error naming its line
// number. An input_length that does not fit the number of hash_ids is
// tolerated: PromptBlocks clamps the last block.
func ReadTrace(r io.Reader, limit int) ([]Request, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxLine)
	var reqs []Request
	line := 0
	for sc.Scan() {
		line++
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		var q Request
		if err := json.Unmarshal(b, &q); err != nil {
			return nil, fmt.Errorf("replay: trace line %d: %w", line, err)
		}
		if err := q.validate(); err != nil {
			return nil, fmt.Errorf("replay: trace line %d: %w", line, err)
		}
		reqs = append(reqs, q)
		if limit > 0 && len(reqs) >= limit {
			return reqs, nil
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, fmt.Errorf("replay: trace line %d: longer than %d bytes", line+1, maxLine)
		}
		return nil, fmt.Errorf("replay: trace line %d: %w", line+1, err)
	}
	return reqs, nil
}

// validate checks one request's fields.
func (q *Request) validate() error {
	switch {
	case q.InputLength < 0:
		return fmt.Errorf("negative input_length %d", q.InputLength)
	case q.OutputLength < 0:
		return fmt.Errorf("negative output_length %d", q.OutputLength)
	case len(q.HashIDs) == 0:
		return errors.New("no hash_ids")
	case len(q.HashIDs) > maxBlocks:
		return fmt.Errorf("%d hash_ids, more than %d", len(q.HashIDs), maxBlocks)
	}
	return nil
}

// maxBlocks bounds a request's blocks, so a block position fits its uint32
// and token offsets stay far from overflow.
const maxBlocks = 1 << 24

// UniqueBlocks counts the distinct hash ids of reqs.
func UniqueBlocks(reqs []Request) int {
	n := 0
	for i := range reqs {
		n += len(reqs[i].HashIDs)
	}
	seen := make(map[uint64]struct{}, n/2)
	for i := range reqs {
		for _, h := range reqs[i].HashIDs {
			seen[h] = struct{}{}
		}
	}
	return len(seen)
}

// BlockInfo describes one block of a prompt as a cache presents it to a
// policy (see policy.Block).
type BlockInfo struct {
	Hash     uint64 // the trace's hash id
	Position uint32 // index in the prompt's chain (0 = first)
	Tokens   uint32 // valid tokens: BlockTokens except, perhaps, the last block
	Partial  bool   // Tokens < BlockTokens
}

// Block returns the policy.Block of b cached under id, with its cached
// parent (policy.NoParent when none).
func (b BlockInfo) Block(id, parent policy.ID) policy.Block {
	return policy.Block{ID: id, Parent: parent, Position: b.Position, Tokens: b.Tokens, Partial: b.Partial, Key: b.Hash}
}

// PromptBlocks returns the blocks of r's prompt: Position is the index,
// Tokens is BlockTokens except for the last block, which holds
// InputLength - BlockTokens×(n-1) tokens clamped to 1..BlockTokens, and
// Partial is Tokens < BlockTokens.
func PromptBlocks(r Request) []BlockInfo {
	return appendPromptBlocks(make([]BlockInfo, 0, len(r.HashIDs)), &r)
}

// appendPromptBlocks appends r's PromptBlocks to dst.
func appendPromptBlocks(dst []BlockInfo, r *Request) []BlockInfo {
	n := len(r.HashIDs)
	for i, h := range r.HashIDs {
		t := uint32(BlockTokens)
		if i == n-1 {
			t = lastTokens(r.InputLength, n)
		}
		dst = append(dst, BlockInfo{Hash: h, Position: uint32(i), Tokens: t, Partial: t < BlockTokens})
	}
	return dst
}

// lastTokens is the token count of the last of n blocks of a prompt of
// input tokens, clamped to 1..BlockTokens.
func lastTokens(input, n int) uint32 {
	t := int64(input) - int64(BlockTokens)*int64(n-1)
	return uint32(min(max(t, 1), BlockTokens))
}
