// Package pack defines how blocks of KV cache are laid out in the cold tier
// (G4): the pack object, manifest v3, the per-block pointer, and the object
// keys, with Build (or BuildWith) to make them and Verify (or
// VerifyWith) to admit them before any write.
//
// A pack holds many blocks of one namespace, and so of one tenant. Each
// publication writes three kinds of object:
//
//	packs/<ns>/<sha256(pack)>.pack          the payloads
//	manifests/<ns>/<sha256(manifest)>.m3    what the payloads are
//	index/<ns>/<block key>                  one pointer per block
//
// <ns> is the lower-case hex namespace digest (identity.Namespace.Digest),
// <block key> the lower-case hex identity.BlockKey; the other two are the
// lower-case hex SHA-256 of the object's own bytes. The parsers accept only
// these exact forms.
//
// # Why the keys carry content digests
//
// The pack and manifest keys name their content, so an object is never
// overwritten by different bytes: two distinct packs of one namespace always
// have distinct keys, and a delayed retry of an older pack writes its own
// key, not over a later pack. Rewriting the same key writes the same bytes,
// so a retry after a lost acknowledgement is harmless, and a PUT error never
// calls for a speculative DELETE (the manifest may already be visible).
// Objects no manifest references are reclaimed only by an explicit,
// reference-safe pass, not by this package.
//
// A reader knows only the identity it expects, and from it the block key. A
// manifest key cannot be derived from that: it names the manifest's bytes,
// which depend on every other block of the pack. The pointer bridges the
// two: its key is derived from the block key, and its body names the
// manifest key and digest. Pointers are the only objects whose key does not
// name their content; a later pack of the same block overwrites the pointer,
// and an older retry may overwrite it back. Either way it names a manifest
// that binds that exact key to the full identity and a checksummed range,
// so a reader gets a correct block or a miss, never another block's bytes.
// The <ns> path component lets a tenant's objects be listed or removed by
// prefix (NamespacePrefixes).
//
// Publication order: pack object, then manifest, then pointers (a pointer
// never names a manifest that is not yet written, and a manifest never a
// missing pack). Pack and manifest may be written with IfNoneMatch;
// cold.ErrExists there means the same bytes are already stored.
//
// All integers below are little-endian. Reserved flags must be zero.
//
// # Pack object
//
//	off  size  field
//	0    4     magic "GCPK"
//	4    2     u16 version = 1
//	6    2     u16 flags = 0
//	8    32    namespace digest
//	40   4     u32 block count, 1..MaxRanges (4096)
//	44   8     u64 payload length (object size - 52)
//	52   ...   payloads, concatenated in manifest order, no padding
//
// HeaderLen is 52. The pack object holds no per-block metadata: offsets,
// lengths and SHA-256 checksums live in the manifest. A pack is at most
// MaxPackSize (64 GiB) bytes.
//
// # Manifest v3
//
//	size  field
//	4     magic "GCMF"
//	2     u16 version = 3
//	2     u16 flags = 0
//	4     u32 namespace length N, 1..4096
//	N     canonical namespace encoding ("GCNS", identity/doc.go)
//	2     u16 pack key length K
//	K     pack key, packs/<ns>/<pack digest>.pack
//	32    pack digest: SHA-256 of the whole pack object
//	8     u64 pack size in bytes, 53..MaxPackSize
//	4     u32 range count C, 1..4096
//	C ×   range record:
//	        4    u32 identity length L, at most maxIdentityLen
//	        L    full canonical CacheIdentity ("GCID", identity/doc.go)
//	        32   block key = identity.KeyFor(namespace digest, parent, tokens, valid length),
//	             or identity.OpaqueKey(namespace digest, name) for an opaque-key identity
//	        8    u64 offset in the pack object
//	        8    u64 length, >= 1
//	        32   SHA-256 of the payload
//	1     seal kind: 0 = none, 1 = HMAC-SHA256
//	1     u8 key id length I: 0 for kind 0, 1..32 for kind 1
//	I     key id
//	1     u8 MAC length M: 0 for kind 0, 32 for kind 1
//	M     MAC
//
// Nothing may follow the seal slot. The manifest is at most MaxManifestLen
// (64 MiB) bytes, and its key names SHA-256 of all of its bytes, seal
// included.
//
// A decoder accepts a v3 manifest only if: the namespace decodes and
// validates; the pack key is the exact key of the namespace and pack digest;
// the count is in range and the bytes present could hold that many records
// (checked before allocating); every identity decodes, validates, re-encodes
// to exactly its bytes and belongs to the manifest's namespace; every key is
// KeyFor of its identity and no key repeats; the ranges tile the payload
// area exactly, in order (the first starts at 52, each starts where the last
// ended, the last ends at the pack size), which rules out overlap and out of
// bounds; the seal slot is empty (kind 0, both lengths 0) or a well-formed
// kind 1 seal (key id 1..32 bytes, MAC exactly 32 bytes); no bytes trail.
// Anything else, an unknown seal kind included, is an error wrapping
// cold.ErrCorrupt: malformed v3 fails closed.
//
// # Manifest seal (kind 1, HMAC-SHA256)
//
// The sealed span is every manifest byte before the seal slot: header,
// namespace, pack key, digest and size, and every range record (identity,
// key, offset, length, payload checksum). The MAC is made by a seal.Keyring
// (internal/security/seal) with its current key:
//
//	seal = keyring.Seal(canonical namespace encoding, sealed span)
//	MAC  = HMAC-SHA256(secret[key id], "gpucache/seal/v1\x00" ||
//	         u32be len(namespace) || namespace || u64be len(span) || span)
//
// so a seal is domain-bound to the manifest's namespace as well as covering
// it. Payloads are covered through their SHA-256 in the sealed range
// records, which readers check after the read. The key id is stored in the slot; it is not secret. BuildWith with a Sealer writes
// it (Manifest.EncodeSealed for a manifest Build did not make); Build
// writes an empty slot. Manifest.VerifySeal checks it with
// keyring.Verify over the same inputs (hmac.Equal inside): unknown,
// expired or not-yet-valid keys and MAC mismatches are ErrSealInvalid.
//
// The SHA-256 digests in the keys and the pointer only catch accidental
// damage: anyone able to write the bucket can rewrite a manifest (another
// identity, checksum or range), recompute its digest and key, and re-point
// the pointer, and every digest still matches. The seal is what stops that;
// it needs a secret the store never sees. It does not stop replay of an
// older manifest that was validly sealed for the same namespace.
//
// Readers apply one policy (Manifest.VerifySeal), on every read, including
// reads of a manifest decoded earlier and cached, so a key that expires
// after the manifest was cached stops verifying:
//
//   - with a keyring: the manifest must carry a kind-1 seal that verifies;
//     an unsealed manifest is ErrSealMissing;
//   - without one: an unsealed manifest is read as before, and a sealed one
//     is ErrSealUnverifiable, so a sealed manifest is never read unchecked.
//
// All three errors wrap cold.ErrCorrupt.
//
// # Manifest v4 and encoded blocks (ADR 0019)
//
// Manifest v4 is v3 with two additions; Build writes it only when a block
// is encrypted or compressed (BuildWith), and v3 otherwise:
//
//	after the u64 pack size:
//	1     cipher: 0 = none, 1 = AES-256-GCM
//	1     u8 cipher key id length J: 0 for cipher 0, 1..32 for cipher 1
//	J     cipher key id (not secret)
//	after each range record's SHA-256:
//	8     u64 plaintext length, 1..MaxBlockSize (1 GiB)
//	1     codec: 0 = raw, 1 = zstd, 2 = zstd over byte planes
//
// A range's offset and length locate its stored bytes in the pack (the
// ranges tile it as in v3); its SHA-256 is of the plaintext. A v4 manifest
// with no encrypted or compressed range is malformed (Build writes v3).
// The seal slot and sealed span are as in v3, so a seal covers the cipher
// slot, every plaintext length, codec and checksum.
//
// A stored block is the plaintext (codec 0) or one zstd frame of it
// (codec 1) or of its byte planes (codec 2, crypt.Shuffle2: even-indexed
// bytes, then odd-indexed bytes), kept only if at least
// Options.MinSavingPct percent smaller than the plaintext. With cipher 1
// it is then
//
//	nonce (12 random bytes) || AES-256-GCM(key, nonce, inner, aad) || tag (16)
//	aad = "gpucache/cold/block/v1\x00" || namespace digest || block key ||
//	      plaintext SHA-256 || u64be plaintext length || u8 codec ||
//	      u8 len(key id) || key id
//
// under the tenant's key for the key id (internal/cold/crypt: HKDF-SHA256
// of the master key with the tenant's name). A reader (Manifest.Decrypter,
// then Manifest.OpenRange) first checks that the key id is usable now
// (ErrKeyUnavailable, before any payload read), then authenticates and
// decrypts (ErrDecrypt), decompresses into a buffer of exactly the
// plaintext length (ErrDecode), and checks the plaintext's SHA-256
// (ErrDecode). Verify rejects an encoded pack; VerifyWith decodes and
// checks every block before any write.
//
// # Legacy manifests (v1, v2)
//
// A legacy header is the magic "GCMF" followed by u16 version 1 or 2; the
// bytes after it are not interpreted. DecodeManifest and OpenManifest return
// ErrLegacyManifest for it. That is a clean miss: the caller reads no
// payload, does not rewrite or delete the entry, and recomputes and repacks
// the block under v3. Editing a version header migrates nothing: a v3 body
// labelled v2 is a legacy miss, and a v1/v2 body labelled v3 is malformed v3.
// Any other version (0, or above 4) is ErrManifestVersion, which wraps
// cold.ErrCorrupt.
//
// # Pointer
//
//	size  field
//	4     magic "GCPT"
//	2     u16 version = 1
//	2     u16 flags = 0
//	32    namespace digest
//	32    block key
//	2     u16 manifest key length = 142
//	142   manifest key, manifests/<ns>/<manifest digest>.m3
//	32    manifest digest
//	8     u64 manifest size, 1..MaxManifestLen
//
// Every pointer is exactly PointerLen (256) bytes. The manifest key's
// namespace must be the pointer's and its digest the pointer's digest. The
// size lets a reader refuse an over-budget manifest before downloading it,
// and read the pointer and then the manifest with one ranged read each: a
// size that lies gives bytes whose SHA-256 is not the key's digest.
//
// # Admission (Verify)
//
// A sink calls Verify before its first store write. Verify trusts only the
// bytes and the namespace the pack was built for; see its doc comment for
// the list. A rejected pack wraps ErrRejected and cold.ErrCorrupt, and
// nothing of it is written.
//
// # Ownership
//
// Build copies payloads; the caller keeps its blocks. A Pack owns its byte
// slices and must not be modified after Build. DecodeManifest does not alias
// its input; it keeps one private copy of the sealed span, which
// SealedBytes, NamespaceCanonical and every Range.Canonical share (callers
// must not modify them). Encode returns a fresh slice.
//
// # Errors
//
// ErrLegacyManifest (a clean miss, not corruption), ErrManifestVersion and
// every decode failure (wrap cold.ErrCorrupt), ErrSealMissing,
// ErrSealInvalid and ErrSealUnverifiable (VerifySeal; wrap
// cold.ErrCorrupt), ErrRejected (Verify, VerifyWith; also wraps
// cold.ErrCorrupt), ErrInvalid (bad input to Build or Encode).
package pack
