// Package daemon wires the config, the hot tier, the data-plane server and
// the admin endpoints into one running node, and owns its lifecycle.
package daemon
