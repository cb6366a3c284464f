// Package acl implements the tenant/namespace access-control policy that the
// server enforces on every operation, including LOOKUP and STAT (existence is
// information, so a tenant without Read on a model must not learn whether a
// key exists there).
//
// Design notes:
//
//   - Rights are independent bits: Read, Write, Admin. Admin does NOT imply
//     Read or Write; a rule must grant each right it wants explicitly
//     (e.g. "ops:*=rwa").
//   - Default deny: a (tenant, model) pair with no matching rule has no rights.
//   - Rules are per tenant and per model (namespace). Model "*" matches any
//     model. Rights from all matching rules are OR-ed together (the exact-model
//     rule and the wildcard rule for a tenant combine); there are no negative
//     rules, so evaluation order never matters.
//   - A Policy is immutable after construction and safe for concurrent use;
//     a lookup is two map reads and no allocation.
//   - A Policy never sees tenant credentials; the server's denial names the
//     tenant, the model and the missing right, never a secret.
//
// Compact config form (ParseRule): "tenant:model=rights", where rights is a
// non-empty combination of the letters r, w, a (e.g. "acme:llama-3-8b=rw",
// "ops:*=a").
package acl
