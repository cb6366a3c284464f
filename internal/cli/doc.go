// Package cli implements the gpucache command over the public client: the
// data commands (put, get, lookup, delete, stat, ping, members), admin,
// doctor and version. It links neither the server nor the hot tier: the
// demos and load tools are the gpucache-bench command (tools/internal/benchcli),
// which shares this package's connection flags, one-line errors and exit
// codes (ConnFlags, NSFlags, NewFlagSet, ParseNoArgs, UsageErr, Exit).
package cli
