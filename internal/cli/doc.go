// Package cli implements the gpucache command; cmd/gpucache only calls
// Main. Main dispatches on the first argument, and Usage lists every
// command with a line of help. The commands, by file:
//
//   - data, over the public client (commands.go, store.go): put, get,
//     lookup, delete, stat, ping and members;
//   - admin (admincmd.go): a node's cold-tier lifecycle over its admin
//     listener (inventory, purge, expire, backfill);
//   - doctor (doctor.go): the host and configuration checks of
//     internal/doctor;
//   - load tools: bench, noisy, replay and soak;
//   - demos and reports: shard-demo, cold-demo, dpu-demo, and report,
//     which states what a paired hardware run needs (NOT_RUN_HARDWARE);
//   - version and help.
//
// Exit codes (exitcodes.go) tell a miss, a usage error, a refusal and an
// unavailable server apart; Usage lists them.
package cli
