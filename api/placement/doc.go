// Package placement is the cluster's placement contract, shared by the
// client and the nodes: membership views, epochs and which member owns a
// key.
//
// # Views and epochs
//
// A View is an immutable snapshot of the member set under one epoch.
// Members carry an ID, an advertised address, a fault domain, a protocol
// version and a hot-tier capacity from which the placement weight derives.
// NewView validates members (unique IDs, non-empty address and fault
// domain, non-zero capacity). The control plane (the nodes' membership,
// built on this package) advances the epoch by one per membership change.
//
// # Placement contract
//
// Placement is weighted rendezvous (highest random weight) hashing of a
// BlockKey over the view's active (non-draining) members; see the contract
// at the top of placement.go and the golden vectors in
// testdata/placement_golden.json. It is wire level: clients route batches
// with Route and nodes check ownership with Owner, and both must compute the
// same owner under the same epoch. Any change to the hash, the seed, the
// weight or the tie-break is a protocol version bump. Weighted HRW gives
// member m a share w(m)/sum(w) of the keys; adding a member moves only the
// keys it now owns (to it), removing or draining one moves only its keys.
//
// The package needs only the standard library and api/identity, so the
// client module (github.com/gpucache/gpucache/client) carries it without
// the server's dependencies (ADR 0028).
package placement
