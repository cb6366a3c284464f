// The package comment continues here from doc.go: go doc joins the
// package comments of a package's files in file-name order. This half:
// block statuses, errors, cluster mode, limits, deadlines, the namespace
// blob and this package.

// # Block statuses
//
//	value name       used by   meaning
//	0     HIT        GET       bytes follow
//	1     MISS       GET       absent, expired, or under another namespace: no bytes
//	                 DELETE    nothing to delete
//	2     STORED     PUT       published
//	3     EXISTS     PUT,      the key is already cached; payload discarded
//	                 PUT_OPAQUE
//	4     TOO_LARGE  PUT       larger than MaxPayload or the largest size class; discarded
//	5     NO_SPACE   PUT       nothing evictable; discarded
//	6     DELETED    DELETE    removed
//	7     BUSY       DELETE    leased, being written, or still pinned by a reader after 2 s; not removed
//	8     FENCED     FILL_*    the token's epoch is stale; nothing stored
//	9     NOT_LEADER FILL_*    the token is not the fill's current turn
//	10    ABORTED    FILL_ABORT the turn passed on
//	11    KEY_MISMATCH PUT, FILL_COMMIT, PUT_OPAQUE  the key does not derive from the
//	                 block's identity, or the identity is invalid; discarded
//	12    READ_ONLY  PUT, PUT_OPAQUE  version 4: the node's control plane is
//	                 unreachable (read-only or unknown mode); discarded
//	13    FAULT      GET_INTO, PUT_FROM  version 5: the region faulted during
//	                 the copy; nothing delivered or stored; the region is dropped
//
// In versions 1, 2 and 3, a status greater than 11 is MALFORMED; in version
// 4, one greater than 12; in version 5, one greater than 13. A GET answer
// carries only HIT and MISS.
//
// Version 4 adds READ_ONLY and nothing else. A node in read-only or unknown
// control mode (its control plane unreachable; see "Cluster mode (version
// 2)") stores nothing new; it used to answer every PUT and PUT_OPAQUE block
// NO_SPACE, which reads as "the cache is full". A version-4 session gets
// READ_ONLY for those blocks instead; the payload is skipped and the
// connection stays usable. A session before version 4 still gets NO_SPACE:
// the server never sends READ_ONLY to it, and its decoder
// (StatusResponse.DecodeVersion) treats status 12 as MALFORMED. NO_SPACE
// keeps its meaning in every version (nothing evictable, or the admission
// policy or a tenant quota refused). STAT readonly_refused
// (gpucache_readonly_refused_total on /metrics) counts these refusals,
// with the LOOKUP, GET and ACQUIRE entries refused in those modes. The Go
// client reports the status as client.StatusReadOnly, per block in
// client.Cluster.Put. A server pinned to --protocol-max 3 answers NO_SPACE
// to every session.
//
// # Errors
//
// A request that fails as a whole gets an error response instead of its
// normal response. The header of an error response is:
//   - frame version FrameVersion (1), like every frame;
//   - flags RESPONSE|ERROR;
//   - the request's opcode and request id. When the header itself could not
//     be parsed (BAD_MAGIC), opcode and request id are 0.
//
// The body of an error response:
//
//	u16  code
//	str  message          for humans; at most 256 bytes, possibly truncated
//	trailing field, by code:
//	u64  epoch            WRONG_EPOCH: required; the refusing node's current epoch
//	u32  retry_after_ms   any other code: optional, sent only with RATE_LIMITED;
//	                      > 0 (a zero is MALFORMED: omit it)
//
// Which trailing field applies depends on the code: a WRONG_EPOCH body ends
// with exactly the 8-byte epoch and carries no retry-after; any other body
// ends after the message or after the 4-byte retry-after. Any other
// trailing bytes are MALFORMED.
//
// The error codes, and what happens to the connection after each:
//
//	code name                 connection  meaning
//	0    OK                   -           never sent
//	1    BAD_MAGIC            closes      the frame does not start with "GPUC"
//	2    UNSUPPORTED_VERSION  stays       header version byte is not FrameVersion (1), or no
//	                                      common version in HELLO
//	3    UNKNOWN_OPCODE       stays       opcode not defined, or defined in a later version
//	                                      than the session's
//	4    FRAME_TOO_LARGE      closes      body length > MaxFrame
//	5    MALFORMED            stays       body did not decode; reserved header bytes
//	                                      or flags set; body too long for its opcode
//	6    BATCH_TOO_LARGE      stays       a list count > its limit
//	7    TOO_MANY_IN_FLIGHT   -           reserved: never sent, the server applies backpressure
//	8    INVALID_IDENTITY     stays       namespace blob did not decode or validate
//	9    TENANT_MISMATCH      stays       namespace tenant is not the session tenant, or
//	                                      a later HELLO names another tenant
//	10   HELLO_REQUIRED       stays       a request other than HELLO before the session
//	11   PAYLOAD_TOO_LARGE    -           reserved: never sent, a PUT block over MaxPayload
//	                                      gets status TOO_LARGE
//	12   SHUTTING_DOWN        stays       not executed: the server is draining and will close
//	                                      the connection; retry on another node
//	13   INTERNAL             stays       server bug
//	14   TIMEOUT              stays       a server-side deadline passed; treat as a miss
//	15   UNAUTHENTICATED      stays       HELLO credential missing, unknown, expired or of another
//	                                      tenant; or the session's credential was revoked or
//	                                      expired (send HELLO again); three failed HELLOs close
//	16   DENIED               stays       the tenant lacks the right the operation needs
//	17   RATE_LIMITED         stays       over quota; not executed; retry after retry_after_ms
//	18   REPLAY               stays       mutating request unstamped, outside the window,
//	                                      with a reused nonce, or beyond what the tenant's
//	                                      nonce memory vouches for (retry with a fresh stamp)
//	19   WRONG_EPOCH          stays       version 2 only: a key of the request is not this
//	                                      node's under its current epoch (the trailing u64);
//	                                      not executed; refresh the view and retry once (see
//	                                      "Cluster mode (version 2)")
//	20   REGION               stays       version 5: no descriptor with REGISTER, not shareable
//	                                      memory, region bounds reached, or the region is not
//	                                      registered on this connection (see "Registered regions")
//
// BAD_MAGIC and FRAME_TOO_LARGE are fatal (Code.Fatal). The stream cannot be
// resynchronised safely after them:
//   - after a bad magic, the frame boundaries are lost;
//   - an oversized body would have to be read in order to be skipped, and
//     refusing to read it is what the limit is for.
//
// For either code, the server sends the error response on a best-effort
// basis, stops reading and closes the connection.
//
// Every other error leaves the connection usable. When the server rejects a
// request by its header, it reads and discards exactly body_length bytes.
// This is safe because the length has already been checked against MaxFrame.
//
// The server checks a request header in this order, and the first failure
// decides the answer:
//
//  1. magic: BAD_MAGIC (fatal);
//  2. body length <= MaxFrame: FRAME_TOO_LARGE (fatal);
//  3. reserved bytes are zero: MALFORMED;
//  4. version byte is FrameVersion (1): UNSUPPORTED_VERSION;
//  5. flags: MALFORMED;
//  6. opcode is defined (1..18): UNKNOWN_OPCODE.
//
// After the header, a request other than HELLO or PING before a successful
// HELLO is HELLO_REQUIRED, and an opcode of a later version than the
// session's is UNKNOWN_OPCODE; both skip the body.
//
// DecodeHeader performs checks 1 and 3. After check 3 fails, it still
// returns the parsed header with its error. Limits.CheckRequest performs
// checks 2, 4, 5 and 6. So a server that gets MALFORMED from DecodeHeader
// must still check the body length before it skips the body. A header whose
// reserved bytes are nonzero and whose body length is over MaxFrame is
// fatal.
//
// The reference server (internal/server) does not send SHUTTING_DOWN or
// TIMEOUT yet. When it drains, it answers the requests it has already read
// and then closes the connection. TIMEOUT is meant for operations that have
// their own deadline, such as a cold-tier refill. Clients handle both codes.
//
// A client treats any code it does not know as a non-fatal failure of that
// one request.
//
// # Cluster mode (version 2)
//
// A cluster is a set of nodes, its members, that share a view: an epoch and
// the members. Epochs only grow. Every key has one owner under a view,
// computed by placement (below). Nodes learn the view from the control plane
// (ADR 0007); clients learn it from the nodes, with MEMBERS (ADR 0008).
//
// Ownership. A node checks ownership only for a version-2 or version-3
// session (below, "version-2 session" means either), and not
// in the unknown control mode (there is no view to check against):
//   - LOOKUP, GET, DELETE, ACQUIRE, PUT and PUT_OPAQUE: every key of the
//     request (of PUT and PUT_OPAQUE: every entry's key) is checked against one view, after the body
//     has decoded and the namespace has passed its checks. If any key is not
//     owned by this node under its current view, the whole request is
//     refused with WRONG_EPOCH carrying that view's epoch, and nothing of it
//     is executed. A refused PUT's payload bytes are skipped. A node that is
//     draining, or absent from its own view, owns no key.
//   - FILL_COMMIT, FILL_ABORT and WAIT are not checked: their tokens were
//     granted by this node. They are fenced by epoch instead: each newer
//     view advances the node's fill epoch, and fills granted under an older
//     epoch are FENCED, except when the node is draining in the new view. A
//     draining node thus finishes the fills it granted. A node absent from
//     the new view (isolated, or its lease expired) fences them: its keys
//     have new owners.
//   - HELLO, PING, STAT and MEMBERS are not checked.
//
// Version-1 sessions are never checked and never get WRONG_EPOCH: they are
// served from the node's local hot tier. The control mode applies to them
// too, and a node that is draining or absent from its view starts no fill
// for them: ACQUIRE answers HIT for a cached block and DENIED otherwise.
//
// The client's rule. On WRONG_EPOCH with epoch e, the client fetches MEMBERS
// from the refusing node, whose epoch is >= e, installs that view if it is
// newer than its own, re-routes the refused keys and retries once. A second
// refusal is a miss: no payload, nothing stored, compute the block yourself.
// The reference client also refreshes its view in the background, every 2 s
// by default.
//
// Control modes. A node also tracks whether its view can be trusted (ADR
// 0008): live while the control plane answers; read-only from the first
// failed probe until the grace (control_grace, default 10 s) after the last
// success; unknown after that. The mode changes what these operations
// answer:
//
//	op       live    read-only                          unknown
//	LOOKUP   served  served                             hits 0, no lease
//	GET      served  served                             every key MISS; a named lease
//	                                                    is still released
//	PUT      served  READ_ONLY for every block          READ_ONLY for every block
//	                 (NO_SPACE before version 4);       (NO_SPACE before version 4);
//	                 nothing stored                     nothing stored
//	ACQUIRE  served  HIT for a cached block, DENIED     DENIED for every key
//	                 otherwise; no fill starts
//	DELETE   served  served                             served
//
// Ownership is checked, as above, in live and read-only mode, before the
// mode applies. HELLO, PING, STAT, MEMBERS, FILL_COMMIT, FILL_ABORT and WAIT
// are answered the same in every mode.
//
// Placement. The owner of a key is computed by the weighted rendezvous
// contract in api/placement/placement.go. It is part of the wire
// contract: clients and nodes of every version and language compute exactly
// this, and changing any step moves keys and needs a protocol version bump.
// For member m of the view (id, capacity as in MEMBERS) and a key:
//
//	seed(m)     = FNV-1a 64 over the bytes of m.ID
//	                (offset 0xcbf29ce484222325, prime 0x100000001b3)
//	k(key)      = little-endian uint64 of key[0:8]
//	                (keys are SHA-256 outputs, so these bits are uniform)
//	h(m, key)   = mix64(k ^ seed(m)), mix64 the SplitMix64 finalizer:
//	                z ^= z >> 30; z *= 0xbf58476d1ce4e5b9
//	                z ^= z >> 27; z *= 0x94d049bb133111eb
//	                z ^= z >> 31
//	u           = (float64(h >> 12) + 0.5) / 2^52      in (0, 1), exact
//	w(m)        = float64(m.CapacityBytes) / 2^30       exact scaling
//	score(m, k) = -w(m) / ln(u)                        IEEE-754 binary64
//
// The owner of a key is the active (not DRAINING) member with the highest
// score; equal scores go to the smaller ID (byte order). Draining members
// own nothing. Under a view with no active member no key has an owner: a
// node refuses every key of a version-2 session, and a client treats every
// key as a miss. The only non-exact step is ln: two implementations whose ln
// differ in the last bit can disagree only when two scores are within an ulp
// of each other, and the disagreement costs a WRONG_EPOCH round trip and
// then a miss, never a wrong payload.
// api/placement/testdata/placement_golden.json gives golden vectors.
//
// # Limits
//
// There are two kinds of limit. The server announces the first four in HELLO
// and enforces them. The others are fixed by the protocol, and every
// decoder enforces them.
//
//	MaxFrame         announced  largest body, either direction. Default 65 MiB
//	                            (DefaultMaxFrame = 64 MiB of payload + 1 MiB)
//	MaxBatch         announced  most entries in a request list or response
//	                            table. Default 1024
//	MaxInFlight      announced  most requests in flight on one connection.
//	                            Default 64
//	MaxPayload       announced  largest payload of one block. Set by the
//	                            server's hot tier (64 MiB by default, ADR 0015)
//	MaxStringLen     fixed      256 bytes per str
//	MaxNamespaceLen  fixed      4096 bytes per namespace blob
//	                            (identity.MaxCanonicalLen)
//	MaxPingLen       fixed      1024 bytes of PING body
//	MaxStatEntries   fixed      256 STAT entries
//	MaxMembers       fixed      4096 members in a MEMBERS response
//	MaxBlockTokens   fixed      65536 token ids per PUT or FILL_COMMIT entry
//	MaxRequestTokens fixed      1 << 20 token ids per PUT or FILL_COMMIT table
//
// The server also bounds each request body by the largest valid body of its
// opcode, so that it never buffers more than a request can need. It skips a
// longer body without storing it and answers MALFORMED. For PUT, the bound
// applies to the table (4 + 4096 + 4 + 88 × MaxBatch + 4 × MaxRequestTokens
// bytes; FILL_COMMIT: 108 × MaxBatch in place of 88 × MaxBatch), and a
// longer table is answered BATCH_TOO_LARGE.
//
// A request is in flight from the moment the server has read its header until
// its response has been written. When a connection has MaxInFlight requests
// in flight, the server stops reading from it: this is backpressure, not an
// error. TCP flow control then stalls the client's writes. The client gets no
// error, and TOO_MANY_IN_FLIGHT is never sent. A client should keep at most
// MaxInFlight requests outstanding per connection, and open more connections
// to go further.
//
// # Deadlines
//
// Deadlines are not part of the byte format, but both sides must apply them;
// nothing may wait forever.
//
// The server bounds:
//   - the idle time between requests: it closes an idle connection without a
//     response;
//   - the time to read one frame once its header has begun;
//   - the time to write its responses;
//   - the time from connecting (TLS handshake included) to a successful
//     HELLO, and again from a session's end (UNAUTHENTICATED) to the next
//     HELLO: a client sends HELLO at once.
//
// If a deadline passes in the middle of a frame, the server closes the
// connection, because the stream is out of sync. The reference server
// (internal/server) uses 5 minutes idle, 30 s per frame read (from the
// frame's first byte), 30 s per write and 5 s to HELLO by default. It also
// closes, on accept, a connection from a source address that already has
// too many connections without a session (64 by default), and answers
// RATE_LIMITED, with a retry-after, to a request it has no memory for
// (its request-buffer budget is exhausted): the request is not executed.
//
// A client puts a deadline on every request. When a deadline passes, the
// client treats the request as a miss: no payload, recompute. The response
// may still arrive afterwards. The client either discards it by request id
// or closes the connection.
//
// TIMEOUT is the server's answer when one of its own operation deadlines (for
// example a cold-tier refill) passes before the request completes.
//
// # Namespace blob
//
// The namespace blob is exactly the canonical encoding of an
// identity.Namespace (api/identity, doc.go). In this encoding, every
// field is
//
//	u8 tag | u32 length | value
//
// in tag order, with no field omitted. The whole encoding is
//
//	"GCNS" | u8 version (1) | u8 field count (15) | fields
//
// with these fields:
//
//	tag field               value
//	1   tenant              UTF-8, 1..256 bytes
//	2   trust_domain        UTF-8, 1..256 bytes
//	3   model_id            UTF-8, 1..256 bytes
//	4   config_revision     UTF-8, 1..256 bytes
//	5   tokenizer_revision  UTF-8, 1..256 bytes
//	6   adapter             UTF-8, 0..256 bytes (empty: base model)
//	7   rope                UTF-8, 1..256 bytes
//	8   dtype               UTF-8, 1..256 bytes
//	9   quantization        UTF-8, 1..256 bytes
//	10  layout.format       UTF-8, 1..256 bytes
//	11  tp                  u32 rank | u32 size     (rank < size)
//	12  pp                  u32 rank | u32 size     (rank < size)
//	13  layers              u32 start | u32 count   (count >= 1, start+count < 2^32)
//	14  heads               u32 kv_heads | u32 head_dim  (both >= 1)
//	15  block_tokens        u32                     (1..65536)
//
// The namespace digest is SHA-256 of this encoding. A block key is
//
//	SHA-256("gpucache/blockkey/v1\x00" | namespace digest | parent key |
//	        u32 valid_length | u32 token count | u32 token id ...)
//
// with the all-zero key as the parent of a chain's first block. Clients
// compute keys; the server recomputes the key of every block written (PUT,
// FILL_COMMIT) and compares it, and only compares keys on reads. api/identity/testdata/
// golden.json gives vectors for the namespace encoding, the digest and the
// keys, and its README.md describes them for other languages.
//
// # Worked examples
//
// api/wire/testdata/golden_frames.json holds a whole frame (header and
// body, in hex) of every request and response of every operation, error
// bodies, and a stamped request, each with its decoded fields in JSON; its
// README.md describes the file for implementers in other languages. The
// Go codec and the Python client (python/gpucache/wire.py) decode and
// encode every frame of it in their tests. Three of them, annotated; a
// test checks that these bytes are the file's.
//
// The golden frame "hello_request", the first request of a connection:
// tenant acme, a client that speaks versions 1 to 5, no auth section.
//
//	47 50 55 43                     magic "GPUC"
//	01                              frame version 1
//	01                              opcode 1: HELLO
//	00 00                           flags 0
//	01 00 00 00 00 00 00 00         request id 1
//	12 00 00 00                     body length 18
//	00 00 00 00                     reserved
//	01                              min_version 1
//	05                              max_version 5
//	04 00 61 63 6d 65               tenant: str, 4 bytes, "acme"
//	08 00 67 6f 6c 64 65 6e 2f 31   client: str, 8 bytes, "golden/1"
//
// The golden frame "error_rate_limited": the answer to a PUT of a tenant
// over its rate limit, with a retry-after.
//
//	47 50 55 43                                       magic "GPUC"
//	01                                                frame version 1
//	04                                                opcode 4: PUT, the refused request's
//	03 00                                             flags RESPONSE|ERROR
//	10 00 00 00 00 00 00 00                           request id 16, the refused request's
//	2a 00 00 00                                       body length 42
//	00 00 00 00                                       reserved
//	11 00                                             code 17: RATE_LIMITED
//	22 00                                             message: str, 34 bytes
//	74 65 6e 61 6e 74 20 61 63 6d 65 20 69 73 20 6f   "tenant acme is over its rate limit"
//	76 65 72 20 69 74 73 20 72 61 74 65 20 6c 69 6d
//	69 74
//	fa 00 00 00                                       retry_after_ms 250
//
// The golden frame "get_into_request" (version 5): read the two blocks of
// the chain of tokens 1..8 into region 1, at offsets 0 and 4096. Every
// frame of the file with a namespace carries this namespace; the keys are
// identity.KeyFor of the namespace's digest, the parent key and the four
// token ids of each block.
//
//	47 50 55 43                                       magic "GPUC"
//	01                                                frame version 1
//	10                                                opcode 16: GET_INTO
//	00 00                                             flags 0
//	14 00 00 00 00 00 00 00                           request id 20
//	fd 00 00 00                                       body length 253
//	00 00 00 00                                       reserved
//	91 00 00 00                                       namespace: blob, 145 bytes
//	47 43 4e 53 01 0f                                 "GCNS", encoding version 1, 15 fields
//	01 04 00 00 00 61 63 6d 65                        tag 1 tenant, 4 bytes: "acme"
//	02 04 00 00 00 70 72 6f 64                        tag 2 trust_domain: "prod"
//	03 04 00 00 00 74 69 6e 79                        tag 3 model_id: "tiny"
//	04 01 00 00 00 31                                 tag 4 config_revision: "1"
//	05 01 00 00 00 31                                 tag 5 tokenizer_revision: "1"
//	06 00 00 00 00                                    tag 6 adapter: empty
//	07 04 00 00 00 6e 6f 6e 65                        tag 7 rope: "none"
//	08 04 00 00 00 62 66 31 36                        tag 8 dtype: "bf16"
//	09 04 00 00 00 6e 6f 6e 65                        tag 9 quantization: "none"
//	0a 02 00 00 00 6b 76                              tag 10 layout.format: "kv"
//	0b 08 00 00 00 00 00 00 00 01 00 00 00            tag 11 tp: rank 0, size 1
//	0c 08 00 00 00 00 00 00 00 01 00 00 00            tag 12 pp: rank 0, size 1
//	0d 08 00 00 00 00 00 00 00 02 00 00 00            tag 13 layers: start 0, count 2
//	0e 08 00 00 00 01 00 00 00 40 00 00 00            tag 14 heads: kv_heads 1, head_dim 64
//	0f 04 00 00 00 04 00 00 00                        tag 15 block_tokens: 4
//	00 00 00 00 00 00 00 00                           lease_id 0: none
//	01 00 00 00                                       region 1
//	02 00 00 00                                       count 2
//	63 34 2a 82 af 46 81 f5 50 95 af af c3 b6 60 e1   entry 0: key of the chain's first block
//	c1 83 05 2d 06 07 5c 08 23 52 93 d0 82 72 8a 06
//	00 00 00 00 00 00 00 00                           offset 0
//	00 10 00 00                                       capacity 4096
//	08 55 cf 5a da 69 42 22 76 a5 15 df ba 08 0c 53   entry 1: key of the second block
//	b0 ef 87 3d 09 47 9b c8 83 f0 b2 2b 2b 8f 5d 65
//	00 10 00 00 00 00 00 00                           offset 4096
//	00 10 00 00                                       capacity 4096
//
// # This package
//
// The types mirror the layouts above: Header, the request and response
// messages (MembersResponse for MEMBERS), and Error for error bodies and for
// every decoding failure (Error.Epoch carries WRONG_EPOCH's epoch,
// Error.RetryAfter the retry-after). Opcode.Since is the version that
// introduced an opcode. For a body that carries payloads, AppendMeta,
// MetaLen and CheckPayload frame the table.
//
// Decoders return a *Error with code MALFORMED or BATCH_TOO_LARGE; test for
// a code with
//
//	errors.Is(err, &wire.Error{Code: wire.CodeMalformed})
//
// Decoders copy what they return, except the Namespace field of LookupRequest,
// GetRequest, PutRequest and DeleteRequest, which aliases the input buffer.
// A decoder that fills a list (Keys, Blocks, Members) reuses the backing
// array the message already holds when it is large enough, so a message
// decoded into again and again does not allocate; the previous contents are
// overwritten.
// Encoders (AppendTo) do not check limits: the caller keeps strings, lists
// and blobs within them. The one exception is Error.AppendTo, which truncates
// the message to MaxStringLen.
//
// Every decoder has a fuzz target (fuzz_test.go). Each target checks that
// the decoder never panics, that its errors are typed, and that a successful
// decode is canonical.
package wire
