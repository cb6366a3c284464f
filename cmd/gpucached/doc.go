// Command gpucached runs one gpucache node. With no flags it serves the
// embedded default: data on 127.0.0.1:9400, admin on 127.0.0.1:9401, and a
// 1 GiB DRAM hot tier.
package main
