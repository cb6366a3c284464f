// Command gpucache is the gpucache client: the data commands (put, get,
// lookup, delete, stat, ping, members), admin and doctor. The demos and
// load tools are tools/cmd/gpucache-bench.
package main
