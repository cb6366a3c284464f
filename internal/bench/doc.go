// Package bench is the load generator behind `gpucache-bench bench`: it drives a
// running server with GET and PUT cases over payload sizes and worker
// counts, and reports throughput, latency percentiles, errors, misses and
// corrupt replies, plus the server's heap and GC figures.
package bench
