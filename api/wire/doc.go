// Package wire specifies the gpucache wire protocol, versions 1 to 5, and
// implements its codec. This comment is the normative specification and
// its one source: docs/PROTOCOL.md is generated from it (go run
// ./tools/internal/protodoc, or go generate ./api/wire), and a test fails
// when the two differ. api/wire/testdata/golden_frames.json holds a whole
// frame of every message, in hex, with its decoded fields ("Worked
// examples" below).
//
// Version 1 is the single-node protocol. Version 2 adds cluster mode (ADR
// 0008): the MEMBERS operation, the WRONG_EPOCH code and the ownership rules
// of "Cluster mode (version 2)" below. Version 3 adds one operation,
// PUT_OPAQUE, which stores opaque-key blocks (a RESP key under a tenant's
// profile namespace). Version 4 adds the READ_ONLY block status. Version 5
// adds registered regions on Unix-domain connections (REGISTER,
// UNREGISTER, GET_INTO, PUT_FROM, the FAULT status and the REGION code;
// ADR 0026). Everything else is the same in every version.
//
// # Conventions
//
// All integers are unsigned and little-endian: u8, u16, u32, u64. The body
// layouts below use these compound types:
//
//	str    u16 length | length bytes          length <= MaxStringLen (256)
//	blob   u32 length | length bytes          namespace: length <= MaxNamespaceLen (4096)
//	key    32 bytes                           an identity.BlockKey
//	list   u32 count | count elements
//
// Every decoder is strict. A body must have exactly the announced lengths and
// no trailing bytes; otherwise it is MALFORMED. Because of this, the encoding
// is canonical: a body decodes only if re-encoding the decoded message gives
// the same bytes.
//
// A list count is checked before anything is allocated, in this order:
//
//  1. count > the list's limit (MaxBatch, MaxStatEntries for STAT, or
//     MaxMembers for MEMBERS): BATCH_TOO_LARGE;
//  2. count × the element's minimum size > the bytes left in the body:
//     MALFORMED.
//
// A small body can therefore never make a peer allocate for a large count.
//
// # Connection and frames
//
// A client opens a byte stream to a server: TCP, optionally TLS, or a
// Unix-domain stream socket (see "Registered regions (version 5)"). The client
// sends request frames. The server sends response frames, one for each
// request. The server never sends a frame that is not a response. Each frame
// is a fixed 24-byte header followed by BodyLen bytes of body:
//
//	offset size field
//	0      4    magic "GPUC" (0x47 0x50 0x55 0x43)
//	4      1    frame version (FrameVersion, 1)
//	5      1    opcode
//	6      2    flags (u16)
//	8      8    request id (u64)
//	16     4    body length (u32), excluding the header
//	20     4    reserved, zero
//
// # Versioning
//
// The 24-byte header is the same in every version of the protocol. Only
// opcodes, error codes and body layouts may change. Whatever the version, a
// peer can therefore find where the next frame starts.
//
// The header's version byte is the frame format, FrameVersion = 1, not the
// protocol version. Protocol versions 1 to 5 share it: every frame,
// request or response, carries 1 there in every version. A request whose header
// carries another value is answered with UNSUPPORTED_VERSION. Its body is
// read and discarded, and the connection stays usable.
//
// The protocol version is a property of the session, negotiated by HELLO.
// The HELLO request and response bodies are the same in every version and
// frozen, so every server can read them. The client sends the range of
// versions it speaks, min_version..max_version. A server speaks every
// version from 1 up to its maximum (VersionMax = 5; the reference server
// can be pinned lower, --protocol-max 1 to 4, during a rolling upgrade;
// version 4 only adds the READ_ONLY block status, version 5 only the
// region operations). It
// negotiates
//
//	v = min(max_version, server maximum)
//
// If v < min_version or v < 1, it answers UNSUPPORTED_VERSION and no session
// is established. Otherwise v is the session's version, and the HELLO
// response carries it.
//
// The session's version decides:
//   - which operations exist. An opcode introduced after the session's
//     version (Opcode.Since: MEMBERS in a version-1 session, PUT_OPAQUE
//     in a version-1 or version-2 session, the region operations before
//     version 5) is answered
//     UNKNOWN_OPCODE. Its body is skipped, and the connection stays usable;
//   - which codes and statuses the server sends. It never sends a
//     version-2 code (WRONG_EPOCH) to a version-1 session, nor the
//     version-4 status READ_ONLY to a session before version 4, nor the
//     version-5 status FAULT or code REGION before version 5;
//   - whether requests are checked for ownership: only in versions 2 to 5
//     (see "Cluster mode (version 2)").
//
// # Flags
//
//	bit 0   RESPONSE  set on every frame the server sends
//	bit 1   ERROR     set on a response whose body is an error body
//	bit 2   STAMPED   request only: the body starts with a 24-byte replay stamp
//	bits 3-15         reserved, zero
//
// Versions 1 to 5 define one request flag, STAMPED (ADR 0006). A stamped request's
// body is a 24-byte stamp followed by the operation's own body; the body
// length counts both. The stamp is
//
//	u64  unix_nanos   the request's time; little-endian like every integer
//	                  here, top bit clear (0 <= unix_nanos <= 2^63-1)
//	16   nonce        random per request, sent as is
//
// For example 2026-01-02T03:04:05.000000006Z (1767323045000000006) with the
// nonce f0e1d2c3b4a5968778695a4b3c2d1e0f is the 24 bytes
//
//	06 32 96 1c f2 ca 86 18 f0 e1 d2 c3 b4 a5 96 87 78 69 5a 4b 3c 2d 1e 0f
//
// internal/security/antireplay/testdata/stamp_golden.json gives more
// vectors (valid, malformed, and the old big-endian form); a client in
// another language should pass them. Before ADR 0012 the Go client and
// server wrote unix_nanos big-endian, against this rule; a server now
// refuses such a stamp (REPLAY, whose message says the stamp reads as
// big-endian, or MALFORMED when the reversed bytes set the top bit).
//
// Stamp byte order (ADR 0012). With authentication on (in open mode
// clients do not stamp, and nothing changes), Go peers from before and
// after ADR 0012 meet like this:
//
//	client               server  mutating requests
//	new (little-endian)  new     accepted
//	old (big-endian)     new     refused: REPLAY ("reads as big-endian ...
//	                             upgrade the client") or MALFORMED
//	new                  old     refused: REPLAY (the old server reads a time
//	                             decades off) or MALFORMED
//	old                  old     accepted, as before
//
// There is no negotiation: the session flags have no spare meaning old
// clients accept, and no version was bumped for it. Upgrade the nodes and
// the Go clients of an authenticated deployment together; reads (LOOKUP,
// GET, WAIT, STAT, MEMBERS) are unaffected while they disagree.
//
// A stamped body shorter than 24 bytes, a timestamp with the top bit set, or
// any other flag on a request (RESPONSE, ERROR, a reserved bit) is
// MALFORMED, and the body is skipped.
//
// A server with authentication requires the stamp on the mutating operations
// (PUT, DELETE, ACQUIRE, FILL_COMMIT, FILL_ABORT, PUT_OPAQUE, PUT_FROM; Opcode.Mutating) and says so
// in the HELLO session flags. It answers REPLAY to a missing stamp; a
// timestamp older than its clock minus the replay window (replay_window,
// default 5 minutes) or newer than its clock plus replay_max_future (default
// 5 seconds); a nonce the tenant already used inside the window; or a stamp
// the tenant's own bounded nonce memory cannot vouch for (replay_tenant_nonces:
// a tenant that sends more stamps than that inside the window may have its
// older in-window stamps refused, and retries with a fresh stamp). Each
// tenant's nonce memory is its own: one tenant's stamps never make another's
// fresh request fail. A server in open mode checks a stamp when one is
// present.
//
// # Request ids and pipelining
//
// The client chooses each request's id. The server copies the request's id
// and opcode into the header of the response. (The Go and Python clients
// give HELLO id 10: its low byte, the frame's ninth, is `\n`, so a
// line-oriented server that is not gpucache, such as an HTTP admin
// listener, sees a whole request line and answers at once, and the client
// reports the wrong port instead of waiting for its dial timeout.) While a
// request is in flight on a connection, the client must not reuse its id
// there. The server does
// not check that ids are unique.
//
// A client may pipeline: it may send further requests without waiting for
// responses, up to MaxInFlight outstanding (see Limits). A server executes
// the requests of one connection in order and answers them in order,
// except WAIT, which is answered when its notices arrive. Clients
// must not rely on the order: they match responses to requests by request
// id.
//
// Every request gets exactly one response, either a success or an error
// response, unless the connection closes first. When the connection closes,
// every request still waiting for a response has failed. The client cannot
// tell whether it took effect: for example, a PUT may have been stored.
//
// # Session
//
// The first request on a connection must be HELLO. The one exception is
// PING, which is answered before HELLO too. Any other request before a
// successful HELLO is answered with HELLO_REQUIRED. Its body is skipped, and
// the connection stays usable, so the client can still send HELLO.
//
// A server runs in one of two modes:
//
//   - Open mode (no tenants configured; loopback and Unix sockets only). The tenant in HELLO
//     becomes the session tenant; an empty tenant is MALFORMED in a HELLO
//     without an auth section and default in one with it. Every operation is
//     allowed.
//   - Authenticated. HELLO must authenticate: a bearer secret in the auth
//     section, or a verified client certificate under mTLS. The server derives
//     the session tenant from the credential; the tenant field cannot choose it:
//     a non-empty tenant that differs is refused. A failed HELLO is
//     UNAUTHENTICATED and opens no session; after three on one connection the
//     server closes it. Each operation then needs a right on the namespace's
//     model: read for LOOKUP, GET and WAIT; write for PUT, FILL_COMMIT,
//     FILL_ABORT and PUT_OPAQUE; read and write for DELETE and ACQUIRE (their answers reveal
//     whether a block exists). A missing right is DENIED. STAT and MEMBERS
//     carry no namespace and need no right, only the session. A tenant over
//     its rate limit gets RATE_LIMITED with a retry-after; the request is
//     not executed. When a reload revokes or expires the session's credential, the
//     next request is UNAUTHENTICATED and the session ends: send HELLO again.
//
// A connection cannot change tenant. A later HELLO for the same tenant is
// answered like the first one, and the version it negotiates becomes the
// session's. A later HELLO for another tenant is TENANT_MISMATCH, and the
// session keeps its tenant.
//
// LOOKUP, GET, PUT, PUT_OPAQUE and DELETE each carry a namespace blob. The server checks
// it before touching any block:
//   - The blob must be a canonical identity namespace encoding that
//     identity.DecodeNamespace accepts (see "Namespace blob" below).
//     Otherwise the answer is INVALID_IDENTITY.
//   - Its tenant field must equal the session tenant byte for byte.
//     Otherwise the answer is TENANT_MISMATCH.
//
// The server stores each block with its namespace digest. A block that
// exists under another namespace digest is never served: it reads as MISS,
// with no payload bytes.
//
// # Opcodes
//
//	opcode name         version  purpose
//	1      HELLO        1        open the session, negotiate the version, learn the limits
//	2      LOOKUP       1        length of the leading cached run of a key chain; optional lease
//	3      GET          1        read blocks
//	4      PUT          1        write blocks
//	5      DELETE       1        remove blocks
//	6      STAT         1        server counters
//	7      PING         1        echo
//	8      ACQUIRE      1        per key: hit, lead the fill, or wait for it (single-flight)
//	9      FILL_COMMIT  1        publish led blocks (payload follows, as in PUT)
//	10     FILL_ABORT   1        give up led turns; each passes to the next waiter
//	11     WAIT         1        long-poll for notices on fills this session joined
//	12     MEMBERS      2        the node's view of the cluster: epoch and members
//	13     PUT_OPAQUE   3        write opaque-key blocks (a name in place of tokens)
//	14     REGISTER     5        map a client's shared memory (descriptor passed with the frame)
//	15     UNREGISTER   5        unmap a registered region
//	16     GET_INTO     5        read blocks into a registered region: one copy, no payload bytes
//	17     PUT_FROM     5        write blocks from a registered region
//	18     PUT_OPAQUE_FROM 5     write opaque-key blocks from a registered region
//
// Any other opcode is answered with UNKNOWN_OPCODE. Its body is skipped. So
// is an opcode of a later version than the session's (see Versioning).
//
// HELLO (1). Request, HelloRequest:
//
//	u8   min_version      <= max_version, else MALFORMED
//	u8   max_version
//	str  tenant           see Session; may be empty with an auth section
//	str  client           free-form client name and version, for logs
//	optional auth section (ADR 0006):
//	u8   auth_kind        0 NONE, 1 BEARER; any other value is MALFORMED
//	u16  credential_len   <= 512; 0 exactly when auth_kind is NONE
//	     credential       the bearer secret
//
// Response, HelloResponse:
//
//	u8   version          negotiated version (1 to 5): the session's version
//	str  server           free-form server name, for logs
//	u32  max_frame        Limits.MaxFrame
//	u32  max_batch        Limits.MaxBatch
//	u32  max_in_flight    Limits.MaxInFlight
//	u32  max_payload      Limits.MaxPayload
//	session section, only in answer to a HELLO with an auth section:
//	str  tenant           the session tenant the server derived; not empty
//	u8   session_flags    bit 0: mutating requests must be STAMPED; others zero
//
// The client keeps to these limits for the rest of the connection. Both
// sections are optional trailing extensions of the frozen HELLO: a client
// without credentials sends the HELLO of before and gets the response of
// before.
//
// LOOKUP (2). Request, LookupRequest:
//
//	blob namespace
//	u32  lease_ttl_ms     0: take no lease
//	list keys             count <= max_batch; count × key
//
// Response, LookupResponse:
//
//	u32  hits
//	u64  lease_id         0: no lease taken
//	u32  lease_ttl_ms     granted TTL; 0 when lease_id is 0
//
// The keys are a chain in order: key i+1 extends key i. hits is the length
// of the leading run: the largest n such that keys[0..n) are all cached under
// the request's namespace. The run stops at the first key that is not cached.
// Keys after that point are not reported, even if they are cached.
//
// Cached means in DRAM, or in the cold tier when the node has one: after
// the leading run of DRAM hits the run goes on through the blocks the cold
// tier's presence index holds (and DRAM blocks after them), since a GET
// refills those. A cold hit is an answer from memory, without a payload
// read; a GET after it may still miss (the block was reclaimed, the store
// is down, a fingerprint collided), never return other bytes. The lease
// covers only the leading run of DRAM hits: a block only in the cold tier
// cannot be leased, and a GET refills it into DRAM.
//
// When lease_ttl_ms > 0 and hits > 0, the server leases keys[0..hits). It may
// shorten the TTL to its own maximum. It may also take no lease, for example
// when it holds too many; it then returns lease_id 0 and still reports hits.
// A leased block is neither evicted nor deleted until its lease is released
// or expires. A lease belongs to the session tenant that took it, and a GET
// from any connection of that tenant may name it. The lease is released:
//   - by the GET that names it, once that GET's response has been written;
//   - when its TTL passes;
//   - when the server shuts down.
//
// Closing the connection does not release a lease: it lasts until its TTL
// passes. A client that wants its lease back early sends the GET.
//
// Without a lease, hits is only a hint: a later GET may miss.
//
// GET (3). Request, GetRequest:
//
//	blob namespace
//	u64  lease_id         0: none
//	list keys             count <= max_batch; count × key
//
// The response body carries payload after a table:
//
//	u32  table_length     bytes of table
//	     table            GetResponse
//	     payloads         the payloads of the HIT entries, in table order
//
// The table, GetResponse:
//
//	u32  count            = the request's key count
//	count × {
//	  u8  status          HIT or MISS
//	  u32 length          payload bytes; 0 unless status is HIT
//	}
//
// The payloads are the HIT entries' bytes, one after another, in table order,
// with nothing between them. Their lengths must add up to body_length − 4 −
// table_length. A decoder rejects a non-HIT entry with a nonzero length, an
// unknown status, or a payload total that does not match (see MetaLen and
// CheckPayload).
//
// Each key is read on its own. A key that is absent, or cached under another
// namespace, is MISS and has no bytes. If lease_id names a live lease of the
// session tenant, the server releases that lease after the response has been
// written, or after writing it failed. A lease id that is unknown, has
// expired or belongs to another tenant is ignored, and the GET is served
// without it.
//
// The server never sends a body larger than MaxFrame. Every HIT that would
// push the body past MaxFrame is answered MISS instead; a later, smaller
// block may still be a HIT. A client that needs a batch in full keeps
// 8 + 5 × count + count × max_payload <= max_frame.
//
// PUT (4). The request body carries payload after a table:
//
//	u32  table_length     bytes of table
//	     table            PutRequest
//	     payloads         the payload of every entry, in table order
//
// The table, PutRequest:
//
//	blob namespace
//	u32  count            <= max_batch
//	count × {             variable length: 92 + 4 × n bytes
//	  key  key            the block's key (identity.KeyFor)
//	  key  parent         the previous block's key; zero for the first block
//	  u32  valid_length   the block's valid length in tokens, <= n
//	  u32  length         payload bytes
//	  u64  position       token offset of the block's first token
//	  u32  n              token ids that follow, 1..65536 (MaxBlockTokens)
//	  n × u32 token_id    the block's token ids
//	}
//
// Byte offsets within one entry: key 0..32, parent 32..64, valid_length
// 64..68, length 68..72, position 72..80, n 80..84, token ids from 84. The
// token ids of all entries add up to at most 1 << 20 (MaxRequestTokens);
// more is BATCH_TOO_LARGE. An n of 0 or over 65536, or a valid_length over
// n, is MALFORMED.
//
// The payloads follow one after another, with nothing between them. Their
// lengths must add up to body_length − 4 − table_length, otherwise the PUT is
// MALFORMED. A block whose length exceeds max_payload is answered TOO_LARGE and
// its bytes are skipped; the other blocks are stored as usual.
//
// Response, StatusResponse:
//
//	u32  count            = the request's entry count
//	count × u8 status     STORED, EXISTS, TOO_LARGE, NO_SPACE or KEY_MISMATCH
//
// The server verifies every key: with the request's namespace, each entry
// is a full block identity (identity.CacheIdentity). The identity must be
// valid (n <= layout.block_tokens, valid_length in 1..n, position a
// multiple of layout.block_tokens, parent zero exactly when position is 0)
// and KeyFor(namespace digest, parent, token ids, valid_length) must equal
// key; otherwise the block is answered KEY_MISMATCH, its bytes are skipped
// and nothing is stored: a client cannot store bytes under a key that does
// not derive from the block's identity. A key is stored under the request's
// namespace digest, so a reader with a different namespace misses it. A
// block becomes visible to readers only after its whole payload has been
// received and stored.
//
// DELETE (5). Request, DeleteRequest:
//
//	blob namespace
//	list keys             count <= max_batch; count × key
//
// Response, StatusResponse:
//
//	u32  count            = the request's key count
//	count × u8 status     DELETED, MISS (absent or under another namespace) or
//	                      BUSY (leased or being written; not removed. A block
//	                      pinned by a response still being sent is waited for,
//	                      within the request's 2 s deadline, then deleted)
//
// DELETE removes the block from DRAM and hides it in the cold tier: its
// pointer object is deleted and no write-behind still pending brings it
// back, so a later GET misses, on this node and after a restart. DELETED
// means DRAM or the cold tier's index held it. BUSY is also the answer
// when the DRAM copy went but the cold tier could not confirm the hide
// (the store is unreachable, or its 2 s budget for the request ran out):
// the cold copy may remain and the client should retry the DELETE.
//
// STAT (6). The request body is empty; a non-empty body is MALFORMED. The
// response, StatResponse:
//
//	u32  count            <= MaxStatEntries (256)
//	count × {
//	  str  name           counter name, lower snake_case
//	  u64  value
//	}
//
// Counter names are stable; a client ignores names it does not know. Their
// order is unspecified. An authenticated session without the admin right
// gets only its own tenant's counters (tenant_requests, tenant_blocks_hit,
// ...): server-wide counters would reveal other tenants' traffic.
//
// PING (7). The request body is up to MaxPingLen (1024) arbitrary bytes. A
// longer body is MALFORMED and skipped. The response body is the request body
// unchanged.
//
// ACQUIRE (8). Request, AcquireRequest: blob namespace, list keys (count <=
// max_batch). Response, AcquireResponse:
//
//	u32  count            = the request's key count
//	count × {
//	  u8   outcome        0 HIT, 1 LEAD, 2 JOINED, 3 DENIED
//	  u64  fill           LEAD, JOINED: the fill id; else 0
//	  u64  epoch          LEAD: the epoch the fill started under; else 0
//	  u32  turn           LEAD: the leader turn (1 for the first leader); else 0
//	}
//
// Per key, the server's directory (one per shard) checks the hot tier again
// under its own lock: a cached block is HIT. Otherwise the first session to
// ask leads the fill (LEAD, with a fill token: fill, epoch, turn); later
// sessions of the same tenant join it (JOINED) and WAIT; a session of
// another tenant never joins, it gets a fill of its own. DENIED means no
// coordination is available (the tenant's join credits or the fill table
// are exhausted): compute the block yourself. A leader's turn ends with
// FILL_COMMIT, FILL_ABORT, the fill deadline (the server's fill_deadline,
// default 10s), or its connection closing; the turn then passes to the next
// waiter in order, who learns it from WAIT as PROMOTED with a new token.
// Waiters and leads belong to the connection that acquired them.
//
// A plain PUT of the block, by any session of the same tenant, also ends
// its fill (ADR 0024): when the PUT answers STORED or EXISTS the block is in
// the hot tier, so every waiter is told FINISHED and the leader's later
// FILL_COMMIT or FILL_ABORT answers NOT_LEADER (nothing stored; the block
// is already there). This lets a leader that has no bytes (an engine's
// scheduler, whose worker process computes and writes the block) lead a
// fill that its worker's PUT publishes. The STAT counter fill_published
// counts fills ended this way (they count in fill_finished too).
//
// FILL_COMMIT (9). Body: u32 table length | FillCommitRequest table |
// payloads, exactly as PUT. The table:
//
//	blob namespace
//	u32  count            <= max_batch
//	count × {             variable length: 112 + 4 × n bytes
//	  u64 fill | u64 epoch | u32 turn   the leader's token
//	  key  key | key parent | u32 valid_length | u32 length |
//	  u64  position | u32 n | n × u32 token_id   as in PUT
//	}
//
// The token id limits and the key check are those of PUT. Response,
// StatusResponse: STORED or EXISTS (published; the waiters are told
// FINISHED), FENCED (the epoch moved on; nothing stored; the waiters were told
// FENCED), NOT_LEADER (the token is not the fill's current turn; nothing
// stored), or TOO_LARGE / NO_SPACE / KEY_MISMATCH (not stored; the turn
// passes on). A block
// is stored in the hot tier before its waiters are told, so a FINISHED notice
// always finds it unless it is evicted in between.
//
// FILL_ABORT (10). Request: blob namespace, u32 count, count × token (fill,
// epoch, turn). Response, StatusResponse: ABORTED, FENCED or NOT_LEADER.
//
// WAIT (11). Request, WaitRequest:
//
//	blob namespace
//	u32  timeout_ms       the server caps it at 30 s
//	u32  count            <= max_batch
//	count × u64 fill      fills this connection joined
//
// The server answers when every listed fill has a notice or when the timeout
// passes; other requests on the connection are served meanwhile, so this
// answer may come after answers to later requests. Response, WaitResponse:
//
//	u32  count            = the request's count
//	count × {
//	  u8   notice         0 PENDING (timeout; WAIT again), 1 FINISHED (GET it),
//	                      2 FAILED (compute it yourself), 3 FENCED (ACQUIRE
//	                      again), 4 PROMOTED (you lead now)
//	  u64 fill | u64 epoch | u32 turn   PROMOTED: your token; else zero
//	}
//
// Notices carry no payload. A fill id this connection does not wait on is
// FAILED.
//
// MEMBERS (12). Version 2. The request body is empty; a non-empty body is
// MALFORMED. MEMBERS needs a session but no right (it carries no
// namespace), and it is not mutating, so it needs no stamp. The response,
// MembersResponse, is the node's current view of the cluster:
//
//	u64  epoch            the view's epoch; 0: not a cluster
//	u32  n                <= MaxMembers (4096); 0 when epoch is 0
//	n × {                 ids strictly increasing (byte order)
//	  str  id             member ID; not empty
//	  str  addr           address to dial; not empty
//	  str  domain         fault domain; not empty
//	  u8   proto          highest protocol version the member negotiates; > 0
//	  u64  capacity       capacity in bytes, the placement weight; > 0
//	  u8   flags          bit 0: DRAINING (MemberDraining); others zero
//	}
//
// Each member is 16 + len(id) + len(addr) + len(domain) bytes. A decoder
// rejects n > MaxMembers with BATCH_TOO_LARGE, and with MALFORMED an empty
// id, addr or domain, a zero capacity, a zero proto, an unknown flag bit, an
// id not greater than the one before it, or members under epoch 0.
//
// Epoch 0 with no members means a single node, not a cluster: it owns every
// key. A server without a cluster answers so. A DRAINING member owns no
// key. The reference server sends proto 1 for a member that recorded no
// version, answers with its last known view in every control mode, and
// answers INTERNAL for a view of more than MaxMembers members. A client
// computes owners from id, capacity and flags (see Placement below) and
// dials addr.
//
// PUT_OPAQUE (13). Version 3. An opaque-key block is named by up to 1024
// bytes (a RESP key) instead of a token chain; its identity is the
// request's namespace plus that name (identity.CacheIdentity.Opaque), and
// its key is
//
//	SHA-256("gpucache/opaquekey/v1\x00" | namespace digest |
//	        u32 name length | name)
//
// (identity.OpaqueKey, its own domain, so it never equals a token-chain
// key; api/identity/testdata/golden.json gives vectors). GET, LOOKUP
// and DELETE read and remove opaque-key blocks by key like any other. The
// body is laid out as PUT's:
//
//	u32  table_length     bytes of table
//	     table            PutOpaqueRequest
//	     payloads         the payload of every entry, in table order
//
// The table, PutOpaqueRequest:
//
//	blob namespace
//	u32  count            <= max_batch
//	count × {             variable length: 38 + name_len bytes
//	  key  key            identity.OpaqueKey(namespace digest, name)
//	  u16  name_len       1..1024 (MaxOpaqueName)
//	       name           the block's opaque name
//	  u32  length         payload bytes
//	}
//
// A name_len of 0 or over 1024 is MALFORMED. The payload total, the
// per-block TOO_LARGE, the namespace checks, the right (write), the stamp
// (it is mutating), the ownership check (every entry's key) and the control
// modes are those of PUT. The server bounds the table by
// 4 + 4096 + 4 + 1062 × max_batch bytes; a longer table is
// BATCH_TOO_LARGE. Response, StatusResponse: STORED, EXISTS (the block is
// already cached: chunks are immutable, the payload is discarded and the
// stored bytes stay), TOO_LARGE, NO_SPACE, or KEY_MISMATCH (the key is not
// OpaqueKey(namespace digest, name); nothing stored). A stored block enters
// the cold tier's write-behind like a PUT block.
//
// Rolling upgrade: a client that negotiated version 1 or 2 does not send
// PUT_OPAQUE (the reference client answers ErrUnsupported); a server
// pinned below 3 answers it UNKNOWN_OPCODE and skips the body. Cluster
// forwarding of RESP SETs needs every node at version 3.
//
// # Registered regions (version 5)
//
// A client on the same host as the server may connect over a Unix-domain
// stream socket (the server's unix_listen). The protocol there is the one
// above, with the same HELLO and rights. A server may also map a tenant to
// the connecting process's user id, read from the kernel (SO_PEERCRED),
// never from the client: a HELLO without a credential from a listed uid
// opens a session for that uid's tenant. On such a connection, and only
// there, the region operations move payload bytes through memory both
// processes map instead of through the socket. On TCP they are answered
// REGION.
//
// REGISTER (14). Request, RegisterRequest:
//
//	u32  region           the client's id for it on this connection; > 0
//	u64  length           bytes mapped from offset 0 of the descriptor; > 0
//
// The descriptor travels as SCM_RIGHTS ancillary data on the sendmsg that
// carries the REGISTER frame's first byte, one descriptor per REGISTER.
// The server takes the oldest descriptor it received on the connection and
// has not yet claimed; it closes descriptors that no REGISTER claims, and
// holds at most MaxRegions unclaimed. The descriptor must be a regular file
// on tmpfs (a memfd, or a file under /dev/shm) at least length bytes long,
// and a memfd must carry the F_SEAL_SHRINK seal. Response,
// RegisterResponse:
//
//	u8   mode             0 SEALED (the file cannot shrink: plain copies),
//	                      1 GUARDED (a /dev/shm file that cannot be sealed:
//	                      every copy is fault-guarded)
//
// REGION is the answer when no descriptor came, the descriptor is not such
// memory, the id is already registered on the connection, the connection
// holds MaxRegions (64) regions, or the tenant's registered bytes
// (tenant_region_bytes) or the server's (region_bytes) would pass their
// bound. A region belongs to the connection: no other connection can name
// it, and the server unmaps it when the connection closes. REGISTER needs a
// session and no right; it is not mutating.
//
// UNREGISTER (15). Request, UnregisterRequest: u32 region. The response
// body is empty. The server unmaps the region after the requests before it
// have finished with it. An id not registered is REGION.
//
// GET_INTO (16). Request, GetIntoRequest:
//
//	blob namespace
//	u64  lease_id         as in GET
//	u32  region
//	u32  count            <= max_batch
//	count × {             44 bytes
//	  key  key
//	  u64  offset         where the block's bytes go in the region
//	  u32  capacity       bytes available there
//	}
//
// Before it reads any block the server checks, without overflow, that every
// [offset, offset + capacity) lies in the region and that no two overlap;
// otherwise the request is MALFORMED. An unknown region is REGION. The
// namespace, rights, ownership and control-mode rules are those of GET.
// Response, GetIntoResponse, with no payload after it:
//
//	u32  count            = the request's key count
//	count × {
//	  u8  status          HIT: the block's bytes are at offset;
//	                      MISS; TOO_LARGE: the block is longer than capacity
//	                      (nothing written); FAULT: the region faulted
//	  u32 length          HIT: bytes written; TOO_LARGE: the block's length;
//	                      else 0
//	}
//
// The server copies each hit once, from its slab into the region, before it
// answers. A FAULT means the client truncated a GUARDED file under the
// server: that entry and every later one are FAULT, the server drops the
// region, and later requests naming it are REGION.
//
// PUT_FROM (17). Request, PutFromRequest:
//
//	u32  region
//	u32  count            = the table's entry count
//	count × u64 offset    where entry i's length bytes start in the region
//	     table            a PUT table: namespace and entries, as in PUT
//
// No payload follows. Every [offset, offset + length) must lie in the
// region (entries may overlap: they are only read); otherwise MALFORMED.
// The server copies each block once, from the region into a reserved slab
// slot, and computes any checksum or seal from its own copy, so bytes the
// client changes during the copy can never make a stored checksum lie.
// Statuses, rights, the stamp (it is mutating) and every other rule are
// PUT's, plus FAULT: the region faulted during the copy, nothing of that
// entry or later ones is stored, and the region is dropped.
//
// PUT_OPAQUE_FROM (18). Request, PutOpaqueFromRequest:
//
//	u32  region
//	u32  count            = the table's entry count
//	count × u64 offset    where entry i's length bytes start in the region
//	     table            a PUT_OPAQUE table: namespace and entries, as in PUT_OPAQUE
//
// It is to PUT_OPAQUE what PUT_FROM is to PUT: no payload follows, every
// range is checked as in PUT_FROM, each block is copied once from the
// region and sealed from the server's copy, and the statuses and every
// other rule are PUT_OPAQUE's, plus FAULT as in PUT_FROM. Engines that
// store opaque-key chunks (the vLLM tier, SGLang) write from their
// registered host pools with it.
package wire

//go:generate go run ../../tools/internal/protodoc
