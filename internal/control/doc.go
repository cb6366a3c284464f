// Package control is the cluster control plane's dependency-free core:
// membership views, epochs, placement and fault-domain isolation planning.
// The etcd-backed membership (internal/control/etcdmember) builds on it; nothing here talks to
// the network.
//
// # Views and epochs
//
// A View is an immutable snapshot of the member set under one epoch.
// Members carry an ID, an advertised address, a fault domain, a protocol
// version and a hot-tier capacity from which the placement weight derives.
// The epoch advances by exactly one per membership change (join, leave,
// drain); an isolation of k members is k changes committed in one
// transaction (epoch e to e+k, intermediate epochs never published). The
// directory fences in-flight fills whose epoch is older than the new one:
// the glue calls directory.AdvanceEpoch(view.Epoch()) once per new view.
//
// # Membership
//
// Membership is Current, Watch and Close. Watch channels hold one view and
// drop to the latest, so the publisher never blocks. Static is the
// embedded single-node (or fixed-list) default at epoch 1; Memory is an
// in-memory implementation for tests whose every change is a
// compare-and-swap on the epoch (CompareAndSwap, Apply).
//
// # Placement contract
//
// The view and the placement contract (weighted rendezvous hashing: Owner,
// Route) live in the public package api/placement, which the client module
// shares; View, Member, NewView, Owner and Route here are its names under
// the control plane's vocabulary (ADR 0028).
//
// # What the etcd implementation must mirror
//
//   - One key per member under a lease (ID, Addr, FaultDomain,
//     ProtoVersion, CapacityBytes, Draining), plus one epoch key.
//   - Every change is one etcd transaction: compare the epoch key's value
//     with the epoch the change was computed from, then write the member
//     keys and epoch+steps together (Memory.commit); on a failed compare,
//     re-read and retry (Memory.update). A lease expiry is a leave and must
//     advance the epoch the same way (a watcher that sees a member key vanish
//     commits the epoch bump).
//   - Isolation: PlanIsolate against the current view, then Apply as one
//     transaction; a short budget changes nothing.
//   - Watch delivers views (member set + epoch read at one revision), drop
//     to latest, never blocking the etcd watch loop.
//   - Validation: NewView's rules (unique IDs, non-empty address and domain,
//     non-zero capacity) apply to what is read from etcd; an invalid member
//     key is ignored and reported, not fatal.
package control
