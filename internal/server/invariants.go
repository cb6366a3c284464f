//go:build invariants

package server

// repanicConnPanics: the invariants build stops at a connection panic
// (after counting it), as if nothing recovered it (ADR 0022).
const repanicConnPanics = true
