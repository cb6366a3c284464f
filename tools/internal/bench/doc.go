// Package bench is the load generator behind `gpucache-bench bench`: it drives a
// running server with GET and PUT cases over payload sizes and worker
// counts, and reports throughput, latency percentiles, errors, misses and
// corrupt replies, plus the server's heap and GC figures.
//
// Against a cluster (--cluster), each worker routes through a
// client.Cluster and every case is also split by key owner under the
// run's view: blocks, bytes, rates, errors, misses and corrupt replies per
// member (NodeResult), with every member's STAT and the cluster client's
// WRONG_EPOCH, retry and unreachable counts. Latency percentiles and
// READ_ONLY refusals stay per case: one batch may span several owners, so
// a per-member latency would not be a measurement of that member.
package bench
