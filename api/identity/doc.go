// Package identity defines CacheIdentity, the full identity of a block of KV
// cache, its canonical encoding, the namespace digest and the BlockKey chain.
//
// # Canonical encoding
//
// A Namespace encodes as
//
//	"GCNS" | u8 version (1) | u8 field count (15) | fields
//
// and a full CacheIdentity as
//
//	"GCID" | u8 version (1) | u8 field count (19) | namespace fields | block fields
//
// Every field is tag (u8) | length (u32 LE) | value, in tag order, with no
// field omitted, so the encoding is deterministic and length-prefixed. Strings
// are UTF-8 bytes; integers are little-endian. Tags:
//
//	1 tenant            6 adapter (may be empty)   11 tp (rank u32, size u32)     16 parent (32 bytes)
//	2 trust_domain      7 rope                     12 pp (rank u32, size u32)     17 position (u64)
//	3 model_id          8 dtype                    13 layers (start u32, count)   18 valid_length (u32)
//	4 config_revision   9 quantization             14 heads (kv_heads, head_dim)  19 tokens (u32 each)
//	5 tokenizer_rev.   10 layout.format            15 block_tokens (u32)
//
// The namespace digest is SHA-256 of the namespace encoding. A BlockKey is
//
//	SHA-256("gpucache/blockkey/v1\x00" || namespace digest || parent key ||
//	        u32 valid length || u32 token count || u32 token ids...)
//
// with the zero key as the parent of the first block. Position is not hashed
// into the key: the parent key already commits to the whole prefix, and so to
// the block's position. Position is part of the full identity encoding, which
// is what a reader compares.
//
// # Opaque-key blocks
//
// A client that names its blocks by keys of its own (LMCache chunk keys over
// RESP) stores opaque-key blocks: CacheIdentity.Opaque holds the name, and
// parent, position, tokens and valid length are zero. Such an identity
// encodes as
//
//	"GCID" | u8 version (1) | u8 field count (16) | namespace fields | 20 opaque name
//
// and its key is
//
//	SHA-256("gpucache/opaquekey/v1\x00" || namespace digest || u32 len(name) || name)
//
// The domain string keeps every opaque key apart from every token-chain key;
// the namespace digest binds tenant, model, dtype and layout exactly as for a
// token chain. testdata/opaque_golden.json pins these bytes.
//
// Golden vectors in testdata/golden.json pin these
// bytes so other languages can match them; testdata/README.md describes them.
package identity
