//go:build !invariants

package server

// repanicConnPanics: other builds, -race included, recover a connection
// panic and go on serving (ADR 0022).
const repanicConnPanics = false
