// Package stamp is the encoding of the replay stamp that opens the body of
// every mutating request a credentialed client sends (FlagStamped in
// api/wire): a little-endian u64 of unix nanoseconds and a random 16-byte
// nonce (ADR 0012). The server's replay window
// (internal/security/antireplay) checks the stamps; this package only
// encodes and parses them, with the standard library alone, so the client
// module carries it (ADR 0028).
package stamp
