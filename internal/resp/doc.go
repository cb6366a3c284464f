// Package resp speaks the subset of RESP2, the Redis serialisation
// protocol, that LMCache's remote tiers use (docs/RESP.md).
//
// Reader decodes requests strictly and with bounds: a request is an array
// of bulk strings ("*<n>\r\n" then n × "$<len>\r\n<bytes>\r\n"). Every
// argument but the last is at most Limits.MaxArg bytes and all of them
// together at most Limits.MaxArgBytes; the last may be as long as
// Limits.MaxBulk, and when it is longer than MaxArg it is left on the
// stream (Command.Pending) so the caller can read it straight into memory
// of its own (a reserved hot-tier slot) with ReadPending, or skip it. A
// declared length is never trusted for an allocation beyond those limits,
// so a short read or a garbage length costs at most the configured
// maximum. Inline commands (a line without '*') are refused.
//
// The Append functions encode replies: simple strings, errors, integers,
// bulk headers, the nil bulk and arrays.
//
// ParseKey parses LMCache's key strings (MP mode and in-process mode).
package resp
