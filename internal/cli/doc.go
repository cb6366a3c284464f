// Package cli implements the gpucache command: put, get, lookup, delete,
// stat, ping, bench and version subcommands over the public client.
package cli
