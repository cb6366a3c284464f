// Package seal authenticates cached KV blocks with keyed, rotatable
// HMAC-SHA256 seals.
//
// # What a seal is
//
// A Seal is a key id plus a 32-byte MAC:
//
//	MAC = HMAC-SHA256(secret[keyID],
//	        "gpucache/seal/v1\x00" ||
//	        u32be len(identity) || identity ||
//	        u64be len(payload)  || payload)
//
// identity is the block's canonical identity encoding (tenant, model, layer,
// block key, ...), supplied by the caller; payload is the block bytes. The
// domain string separates these MACs from any other use of the same secret
// and names the version; the length prefixes make the (identity, payload)
// split unambiguous, so bytes cannot move from one to the other. MACs are
// compared only with hmac.Equal.
//
// # Keys and rotation
//
// A Keyring holds one current key (used by Seal) and any number of keys
// that still verify. Rotate(newID, secret, grace) makes newID current and
// lets the previous key verify until now+grace; at and after that instant
// Verify returns ErrExpiredKey. Prune drops expired keys (then
// ErrUnknownKey). Add loads keys that verify from a notBefore instant, for
// start-up and for keys peers may still seal with. The clock is injected.
//
// Secrets are copied on entry, never returned, and never printed: String,
// GoString, Format (every verb) and slog's LogValue print key ids and a
// count only.
//
// # Where seals are checked
//
// Seals are verified on every cold-tier refill, and on hot reads where the
// configuration asks for it. A seal verified once is not a licence to skip
// the next check after the block crosses a trust boundary again.
//
// # Storage encoding
//
// A Seal is stored by the codec of what it seals; this package has none of
// its own. The cold tier's pack manifest holds it in its seal slot (u8
// kind, u8 key id length 1..MaxKeyIDLen, key id, u8 MAC length, MAC:
// internal/cold/pack, fuzzed by FuzzDecodeManifest); a hot-tier block's
// tag holds a u16 index of the key id and the MAC (internal/server,
// hotseal.go).
//
// # Threat model
//
// Protects against: a cold store, disk, peer or network path that alters a
// block's bytes or serves one block under another block's identity (for
// example across tenants), by anyone without the secret; use of a retired
// key after its grace period.
//
// Does not protect against: anyone holding a current or in-grace secret
// (a compromised node can seal anything); replay of an old but
// validly sealed block under the same identity (a seal carries no time or
// version: put a generation number in the identity if rollback matters);
// confidentiality (nothing is encrypted); denial of service (a store can
// always withhold or corrupt data, which surfaces as ErrBadSeal).
// Accidental corruption is detected by the MAC too, but should be caught and
// reported by the separate SHA-256 checksum so that it is not confused with
// an attack: keep both. Expired secrets are not zeroed in memory, since a
// concurrent Verify may still read them; they become garbage.
package seal
