// Package audit writes security audit events (authentication failures, ACL
// denials, rate limiting, key rotations, admin actions, cold-tier integrity
// failures) as structured slog
// JSON lines to a dedicated sink, separate from the operational log.
//
// Design notes:
//
//   - One event = one JSON line produced by slog.JSONHandler. Every event has
//     "audit":true and an "event" field naming its kind ("auth_failure",
//     "denied", "rate_limited", "rotation", "admin_action", "integrity"), plus
//     kind-specific fields.
//   - Audit events never contain a secret or its fingerprint. Three layers
//     enforce this:
//     1. The typed helpers take only non-secret identifiers (tenant, model,
//     key ID, reason). Callers must pass a key *ID*, never key material or
//     a hash of it.
//     2. Secret is a byte-slice type whose LogValue, String, GoString, Format
//     and MarshalJSON/MarshalText all yield "[REDACTED]", so it cannot leak
//     through slog, fmt (%v %+v %#v %s %q %x ...) or encoding/json.
//     3. A ReplaceAttr hook applied to every attribute (including nested
//     groups and free-form AdminAction attrs) redacts any attr whose key
//     looks secret-bearing (secret, token, password, passwd, credential,
//     bearer, authorization, private key, key material, fingerprint, hash,
//     digest, ...), and any value of type Secret wherever it appears.
//     Redaction keeps the key and replaces the value with "[REDACTED]" so the
//     event still shows that something was withheld.
//   - An unauthenticated peer can make the node report failed
//     authentications as fast as it can send credentials, so auth_failure
//     is the one event kind that is throttled (Throttle): every failure is
//     counted (Stats), but per source address at most Throttle.Lines are
//     written per Throttle.Interval, then one "suppressed" line per source
//     and interval gives the count not written. The table of sources is
//     bounded; sources that find it full share one aggregate bucket ("*").
//     Every other kind (denied, rate_limited, rotation, admin_action,
//     integrity) comes from an authenticated session or the node itself
//     and is always written.
//   - File is a size-bounded sink: it rotates at a size like a daemon's
//     log (audit.log, audit.log.1, ...; the oldest dropped), so audit
//     logging takes at most maxBytes × (maxFiles + 1) on disk.
//   - The logger is safe for concurrent use (slog handlers serialize writes).
//     Write errors to the sink are not reported to callers, who must go on
//     serving (a full disk loses events, never requests): each lost event is
//     counted in Stats.WriteErrors.
package audit
