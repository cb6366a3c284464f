// Package auth maps credentials to tenants: bearer secrets presented in
// HELLO, and verified client-certificate names under mTLS.
//
// A Table is immutable; the daemon builds a new one from its config on every
// reload and swaps it in. Secrets are kept only as SHA-256 digests and are
// compared with crypto/subtle, so neither the table nor an error ever holds
// or prints one. Each secret has a public id (for audit events) and an
// optional expiry, so a tenant can hold an old and a new secret during a
// rotation and the old one can be given an end date.
package auth
