// Package soak is gpucache's robustness run: a bounded, self-stopping
// soak that drives a mixed workload through the real Go client against
// real daemons, injects faults on a schedule, and checks the whole history.
//
// # Setup
//
//   - etcd: a real single-member etcd, embedded in the soak process
//     (go.etcd.io/etcd/server/v3/embed), so the soak can stop it and start
//     it again on the same ports and data.
//   - S3: versitygw (posix backend), the cluster's shared cold tier.
//   - Three cluster nodes, authenticated (tenants alpha, beta and the admin
//     ops, with bearer secrets; manifests sealed): n1 and n2 are the
//     gpucached binary; n3 runs the same daemon code through NodeMain, so
//     its failpoints can be armed. n2 runs in a network namespace (ip
//     netns, a veth pair) when the soak is root, so it can be cut from
//     etcd while clients still reach it.
//   - One open-mode node ("open", no tenants, loopback, through NodeMain),
//     whose fs cold tier lives on a tmpfs the soak mounts and can fill.
//
// # Load
//
// Workers pick a tenant (alpha and beta through client.DialCluster, open
// through client.Dial) and one of its chains (hot chains that fit in DRAM,
// or scan chains that overflow it, so blocks go through write-behind to
// the cold tier and come back by refill), then one operation: GET (and PUT
// of what missed), LOOKUP with a lease then GET under it (WithLease),
// GetOrFill (single-flight ACQUIRE / FILL_COMMIT / WAIT), PUT, or DELETE
// then GET. Every payload is derived from its block's key by the
// Oracle, so the check needs no memory: every block a call returns must be
// the exact bytes or a miss with a reason, and every call must return
// within OverrunSlack (50 ms) of the deadline it was given.
//
// # Faults
//
// One fault per phase, cycled until the load ends: kill -9 of n1 and a
// restart; etcd stopped and restarted; the S3 server killed and restarted;
// the open node's cold disk filled to the last byte; n2 partitioned from
// etcd; and the daemon's failpoints s3_unavailable, s3_slow and
// control_plane_loss on n3, storage_loss and nvme_timeout on the open
// node. After each heal the soak waits (bounded) for what recovery means
// for that fault (FaultRecord.Means), then lets the load settle. A fault
// that cannot run here (no root for the namespace or the tmpfs) is
// reported NOT_RUN with the reason.
//
// # Growth
//
// Each phase is measured at its start and end on every node process that
// lived through it: goroutines (go_goroutines on /metrics) and resident
// memory outside the hot tier's mapped slabs (VmRSS − hot_bytes_mapped),
// each the minimum of three scrapes. Thresholds bounds what may grow. RSS
// is also sampled every SampleEvery into rss.csv.
//
// # Report
//
// Client calls checked (by kind, with latency quantiles and overruns),
// blocks checked (verified hits, misses by reason, wrong payloads), every
// fault with its injection, heal and recovery times, phase growth, RSS
// per node. Run returns ErrFailed when a check failed.
package soak
