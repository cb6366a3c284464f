// Package ratelimit implements per-tenant token buckets for operations and
// bytes. Excess load is refused (Allow returns false) with an exact
// retry-after, which the server answers as RATE_LIMITED; requests are never
// silently dropped.
//
// Design notes:
//
//   - Two independent buckets per tenant: one counts operations, one counts
//     payload bytes. A request must fit both; when it does not, nothing is
//     consumed and the retry-after is the larger of the two waits. A
//     dimension whose rate is <= 0 is unlimited.
//   - Retry-after is exact: it is the smallest duration d (to the
//     nanosecond) such that, with no other traffic from that tenant, the same
//     request submitted d later is admitted. It is computed with the same
//     refill formula Allow uses, then adjusted by ±1ns until minimal.
//   - Oversized requests (cost > burst) are admitted when the bucket is full
//     and drive it into debt, so a large value is never refused forever;
//     subsequent requests wait until the debt is repaid.
//   - Isolation: every tenant has its own bucket with its own mutex. Tenants
//     named in Config.Tenants live in an immutable map built by New, so their
//     hot path is a lock-free map read plus their own bucket mutex; a flooding
//     tenant only contends with itself. Tenants not in the config get a
//     bucket with the Default limit in a striped (sharded) table: the shard
//     lock (RWMutex, read-locked on hits) is held only for the lookup, never
//     while a bucket is updated.
//   - Bounded table: the dynamic table holds at most Config.MaxTenants
//     buckets. Inserting into a full shard evicts that shard's least recently
//     used bucket. A bucket idle for burst/rate is full again, so evicting it
//     is equivalent to recreating it; only under heavy churn of distinct
//     unknown tenant names can eviction forget recent usage (the tenant then
//     restarts with a full bucket). Configured tenants are never evicted.
//     Tenant names come from authentication, so unknown names should not be
//     attacker-chosen in the first place.
//   - Time comes from Config.Now (default time.Now) so tests are
//     deterministic; a clock going backwards refills nothing.
package ratelimit
