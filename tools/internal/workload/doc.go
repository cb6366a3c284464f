// Package workload generates synthetic KV-cache traces in the Mooncake
// JSONL format that tools/internal/replay reads (one request a line:
// timestamp in ms, input_length and output_length in tokens, hash_ids the
// chained hashes of the prompt's 512-token blocks).
//
// # Model
//
// A trace is the merge, in time order, of sessions. Sessions arrive by a
// Poisson process whose rate is constant, diurnal (sinusoidal) or bursty
// (two-state Markov-modulated); each session is one of the shapes — chat,
// system, agent, rag, oneshot — and emits one or more requests separated
// by think or tool times. A session's prompt is a list of segments
// (system prompt, documents, user messages, model answers, tool output),
// each with a content identity and a length in tokens. A request's prompt
// is cut into replay.BlockTokens-token blocks; the hash id of a block is
// determined by its parent's hash id and the content pieces it covers,
// exactly as a chained prefix hash is: two prompts share the hash id of
// block i if and only if their first (i+1)×512 tokens are the same, so
//
//   - a turn that extends the previous prompt reuses all its full blocks,
//     while the previous prompt's partial last block becomes a new block;
//   - a popular system prompt or document is shared only when it sits at
//     the same offset after the same prefix (document order matters).
//
// Hash ids are dense, assigned in order of first appearance from 0, as in
// the published Mooncake traces.
//
// # Determinism
//
// Generation is a pure function of the Config: the random source is a
// splitmix64 stream written here (not math/rand, whose derived streams may
// change between Go releases) and every tie is broken by session number.
// The same Config, seed included, gives the same bytes.
//
// # Parameters
//
// Every parameter is a size, a rate or a distribution of one, each with a
// bound (Validate); none is tuned to a cache policy. Default(shape) gives
// the reference scenario of each shape, described field by field in
// config.go and in docs/BENCHMARKS.md ("Generated traces").
//
// # Not modelled
//
// Prompt compaction (an agent's context is cut only by ending its session
// at MaxContext), multi-modal inputs, and per-tenant namespaces: every
// request of a trace belongs to one namespace, as in the Mooncake traces.
package workload
