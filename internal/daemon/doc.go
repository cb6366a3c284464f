// Package daemon wires the config, the hot tier, the data-plane server and
// the admin endpoints into one running node, and owns its lifecycle: Start
// builds the node phase by phase (each phase registers its own cleanup)
// and returns a *Node, the handle that says where it listens (Addrs), when
// it serves (Ready) and when and why it stopped (Done, Err), and that
// drains and releases it (Close).
package daemon
