// Package crypt holds the cold tier's keys for encryption at rest and its
// zstd codec. The pack format (internal/cold/pack, manifest v4) decides
// what is encrypted and compressed; this package only supplies keys and
// the codec.
//
// # Keys
//
// A Keyring holds master keys by key id, like seal.Keyring holds seal
// keys: one current key (new packs are encrypted with it) and older keys
// that still decrypt until their grace period ends. Rotate(newID, secret,
// grace) makes newID current and lets the previous key decrypt until
// now+grace; at and after that instant Decrypter returns ErrExpiredKey
// (and the refill is a miss with an audit event). The clock is injected.
//
// Packs are keyed per tenant. The AES-256-GCM key of tenant T under master
// key id K is
//
//	HKDF-SHA256(secret = master[K], salt = "gpucache/cold/crypt/v1",
//	            info = u32be len(T) || T, length = 32)
//
// so one master key file serves every tenant, each tenant's packs are
// encrypted under a key no other tenant's packs use, and a block served
// under another tenant's namespace fails authentication even before the
// pack format's own binding (the AAD names the namespace digest) is
// checked. Master secrets are at least MinSecretLen (32) bytes, copied on
// entry and never printed: String, GoString, Format and LogValue show key
// ids and a count only. Derived keys are not kept: each Encrypter or
// Decrypter call derives the key again (an HKDF is two HMAC-SHA256 calls,
// negligible beside a block's AES-GCM pass).
//
// # Codec
//
// Zstd compresses and decompresses whole blocks with
// github.com/klauspost/compress/zstd. Decompress decodes into a buffer of
// exactly the expected size and fails rather than grow it, so a
// decompression bomb cannot allocate: a block's plaintext size comes from
// the (sealed) manifest, never from the compressed bytes.
package crypt
