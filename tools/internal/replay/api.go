// Package replay replays Mooncake-format KV-cache traces: a
// metadata-only simulator of the hot tier's policies (internal/policy)
// and the shared types of the live replay.
package replay

// This file fixes the package's exported API so that the CLI, the live
// replay and the simulator can be written in parallel. Keep the signatures.

// BlockTokens is the trace's block size: 512 tokens per hash id.
const BlockTokens = 512

// Request is one line of a Mooncake trace.
type Request struct {
	Timestamp    int64    `json:"timestamp"` // ms since the trace start
	InputLength  int      `json:"input_length"`
	OutputLength int      `json:"output_length"`
	HashIDs      []uint64 `json:"hash_ids"` // chained block hashes of the prompt
}

// Result is one simulated (policy, capacity) run.
type Result struct {
	Policy       string  `json:"policy"`
	CapacityFrac float64 `json:"capacity_frac"`   // of the trace's unique blocks
	Capacity     int     `json:"capacity_blocks"` // floor(frac × unique)
	Requests     int     `json:"requests"`
	Blocks       int64   `json:"blocks"`     // block accesses
	HitBlocks    int64   `json:"hit_blocks"` // leading-run hits
	HitRatio     float64 `json:"hit_ratio"`  // HitBlocks / Blocks
	PromptTokens int64   `json:"prompt_tokens"`
	SavedTokens  int64   `json:"saved_tokens"`  // prefill tokens not recomputed
	ComputeSaved float64 `json:"compute_saved"` // fraction of attention work saved
	// CostModel names the policy.CostModel that prices ModelComputeSaved
	// (and the "cost" policy's blocks).
	CostModel string `json:"cost_model"`
	// ModelComputeSaved is the fraction of prefill FLOPs saved, linear
	// cost and attention, under CostModel.
	ModelComputeSaved float64 `json:"model_compute_saved"`
	Seconds           float64 `json:"seconds"` // wall time of the run
}

// The functions below are the simulator's API (sim.go implements them):
//
//	// ReadTrace parses JSONL; limit > 0 keeps the first limit requests.
//	// A malformed line is an error naming its line number.
//	func ReadTrace(r io.Reader, limit int) ([]Request, error)
//	// UniqueBlocks counts distinct hash ids.
//	func UniqueBlocks(reqs []Request) int
//	// Policies lists the policy names Simulate accepts, online ones first;
//	// "opt" (offline Belady) is last.
//	func Policies() []string
//	// Simulate replays reqs through a cache of floor(frac × unique)
//	// blocks under the named policy, with the prefix semantics of sim.go,
//	// calling progress (if not nil) with the number of requests done.
//	func Simulate(reqs []Request, policyName string, frac float64, progress func(done int)) (Result, error)
//	// PromptBlocks returns the policy.Block descriptions (Position, Tokens,
//	// Partial) of a request's blocks, as both the simulator and the live
//	// replay present them to a cache.
//	func PromptBlocks(r Request) []BlockInfo
//
// and flash.go adds the two-tier simulation (DRAM above a log-structured
// flash tier above cold): SimulateFlash, FlashConfig, FlashResult.
