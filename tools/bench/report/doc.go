// Command report turns the raw files written by bench/compare.sh into a
// markdown comparison of gpucache against Redis and the iperf3 loopback
// ceiling, with a table of targets marked PASS, MISS, INVALID or NOT_RUN.
//
// Usage:
//
//	go run ./tools/bench/report -dir bench/results/<stamp> [-out report.md]
//
// The directory holds:
//
//	machine.txt          "key<TAB>value" lines describing the machine
//	plan.txt             "key<TAB>value" lines: duration, reps, quick, sizes, conns, gc
//	notes.txt            optional, one line per problem the script saw
//	iperf3/*.json        iperf3 -J output, one file per repetition
//	redis/<op>_<size>_c<conns>_P<pipeline>_r<rep>.csv
//	                     redis-benchmark --csv output (op is get or put)
//	gpucache/*.json      gpucache-bench bench --json output, any number of cases each
//	gc/gc.json           gpucache-bench bench --json output of the GC and memory run
//	                     (gpucached at the runtime's default GOMAXPROCS; the targets use it)
//	gc/gc-procs<N>.json  the same run with gpucached at GOMAXPROCS=N, one row each
//	gc/<run>.forced      GC cycles the script forced during that run's GET load
//	gc/NOT_RUN.txt       why the GC and memory run was skipped, if it was
//
// Every figure printed comes from those files; a case without data prints
// NOT_RUN. The bench JSON is read with the bench's own types
// (tools/internal/bench.Report); otherwise only the standard library is used.
package main
