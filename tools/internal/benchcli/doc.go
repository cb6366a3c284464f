// Package benchcli implements the gpucache-bench command: the load tools
// (bench, noisy, replay, soak), the paired-report checklists (report) and
// the demos (shard-demo, cold-demo, dpu-demo). They link the server, the
// hot tier, the transport and the plotting code, which the gpucache
// command (internal/cli) leaves out; the two share cli's connection flags,
// one-line errors and exit codes.
package benchcli
