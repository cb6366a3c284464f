package wire

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/gpucache/gpucache/api/identity"
)

// Key is a block key on the wire: the identity package's BlockKey itself,
// so a key computed with identity.KeyFor (or client.Chain) goes into a
// request, and a decoded key into the hot tier, without a conversion.
type Key = identity.BlockKey

// identity.BlockKey must stay KeySize bytes: the codec reads and writes
// keys as KeySize-byte runs.
var _ [KeySize]byte = Key{}

// Status is the per-block outcome in a response.
type Status uint8

// Block statuses.
const (
	StatusHit      Status = 0 // GET: bytes follow
	StatusMiss     Status = 1 // absent, expired, or identity mismatch: no bytes
	StatusStored   Status = 2 // PUT: published
	StatusExists   Status = 3 // PUT: an equal key is already cached; payload discarded
	StatusTooLarge Status = 4 // PUT: payload larger than the largest size class
	StatusNoSpace  Status = 5 // PUT: nothing evictable; payload discarded
	StatusDeleted  Status = 6 // DELETE: removed
	StatusBusy     Status = 7 // DELETE: leased or in flight, not removed
	// FILL_COMMIT and FILL_ABORT:
	StatusFenced    Status = 8  // the token's epoch is stale: the fill was fenced; nothing stored
	StatusNotLeader Status = 9  // the token does not name the fill's current leader; nothing stored
	StatusAborted   Status = 10 // FILL_ABORT: the turn passed to the next waiter (or the fill ended)
	// PUT and FILL_COMMIT: the key does not derive from the block's identity
	// (namespace, parent, position, token ids, valid length), or that
	// identity is invalid; payload discarded, nothing stored.
	StatusKeyMismatch Status = 11
	// StatusReadOnly (version 4), PUT and PUT_OPAQUE: the node is
	// read-only because its control plane is unreachable (read-only or
	// unknown mode); payload discarded, nothing stored. A session of an
	// older version gets StatusNoSpace instead.
	StatusReadOnly Status = 12
	// StatusFault (version 5), GET_INTO and PUT_FROM: the region faulted
	// during the copy (the client truncated its file); nothing stored, or
	// no bytes delivered. The server drops the region.
	StatusFault Status = 13
	statusMax          = StatusFault
)

var statusNames = [...]string{"HIT", "MISS", "STORED", "EXISTS", "TOO_LARGE", "NO_SPACE", "DELETED", "BUSY", "FENCED", "NOT_LEADER", "ABORTED", "KEY_MISMATCH", "READ_ONLY", "FAULT"}

// Since is the protocol version that introduced s: a server never sends s
// to a session of an older version, and a decoder of such a session
// refuses it (StatusResponse.DecodeVersion).
func (s Status) Since() uint8 {
	switch s {
	case StatusReadOnly:
		return Version4
	case StatusFault:
		return Version5
	}
	return Version1
}

func (s Status) String() string {
	if s <= statusMax {
		return statusNames[s]
	}
	return fmt.Sprintf("STATUS(%d)", uint8(s))
}

// AuthKind says how a HELLO authenticates.
type AuthKind uint8

// Authentication kinds.
const (
	// AuthNone presents no credential. Servers without authentication (bound
	// to loopback) accept it; under mTLS the certificate is the credential.
	AuthNone AuthKind = 0
	// AuthBearer presents a tenant's bearer secret.
	AuthBearer AuthKind = 1
	authMax             = AuthBearer
)

// MaxCredentialLen bounds a HELLO credential.
const MaxCredentialLen = 512

// HelloRequest opens a session. It must be the first request.
//
// The auth section (Auth, Credential) is an optional trailing extension
// (ADR 0006): a request without it is a version-1 HELLO of before, and the
// server answers it without the response extension. A client that sends the
// section, even AuthNone, gets the extended response.
type HelloRequest struct {
	MinVersion uint8
	MaxVersion uint8
	// Tenant is the tenant the client expects. With authentication the
	// server derives the tenant from the credential and refuses a HELLO
	// whose non-empty Tenant differs; without, it is the session tenant
	// (empty means "default").
	Tenant string
	Client string // free-form client name, for logs
	// HasAuth reports whether the auth section is present.
	HasAuth    bool
	Auth       AuthKind
	Credential []byte // aliases the decoded body; never logged
}

// HelloResponse carries the negotiated version and the server's limits.
type HelloResponse struct {
	Version uint8
	Server  string
	Limits  Limits
	// The extension, sent only in answer to a HELLO with an auth section.
	HasSession bool
	Tenant     string       // the session tenant, derived by the server
	Session    SessionFlags // what the session requires
}

// SessionFlags tell the client what the session requires.
type SessionFlags uint8

// Session flags.
const (
	// SessionStampRequired: mutating requests must carry FlagStamped.
	SessionStampRequired SessionFlags = 1 << 0
	sessionKnown                      = SessionStampRequired
)

// LookupRequest asks for the leading run of cached keys of a chain.
type LookupRequest struct {
	Namespace      []byte // canonical namespace encoding (identity package)
	LeaseTTLMillis uint32 // 0: no lease; otherwise pin the run for this long (server caps it)
	Keys           []Key
}

// LookupResponse reports the leading run of hits and the lease on them.
type LookupResponse struct {
	Hits           uint32
	LeaseID        uint64 // 0 when no lease was taken
	LeaseTTLMillis uint32 // granted TTL
}

// GetRequest reads a batch of blocks. A non-zero LeaseID is released once the
// response has been written.
type GetRequest struct {
	Namespace []byte
	LeaseID   uint64
	Keys      []Key
}

// BlockMeta describes one block of a GET response. Len is zero unless Status
// is StatusHit.
type BlockMeta struct {
	Status Status
	Len    uint32
}

// GetResponse is the table of a GET response; the payloads of its hits follow
// it in order.
type GetResponse struct {
	Blocks []BlockMeta
}

// PutBlock describes one block of a PUT request: its key and the identity
// tail the server derives the key from (with the request's namespace).
type PutBlock struct {
	Key    Key
	Parent Key // key of the previous block in the chain; zero for the first
	// ValidLength is the number of leading token ids whose KV the payload
	// holds, 1..len(TokenIDs) (identity.CacheIdentity.ValidLength).
	ValidLength uint32
	Len         uint32   // payload bytes
	Position    uint64   // token offset of the block's first token
	TokenIDs    []uint32 // the block's token ids, 1..MaxBlockTokens of them
}

// PutRequest is the table of a PUT request; the payloads follow it in order.
type PutRequest struct {
	Namespace []byte
	Blocks    []PutBlock
}

// StatusResponse answers PUT and DELETE: one status per key.
type StatusResponse struct {
	Statuses []Status
}

// DeleteRequest removes blocks.
type DeleteRequest struct {
	Namespace []byte
	Keys      []Key
}

// StatEntry is one named counter.
type StatEntry struct {
	Name  string
	Value uint64
}

// StatResponse lists the server's counters.
type StatResponse struct {
	Entries []StatEntry
}

// ---- encoding helpers ----

func appendString(b []byte, s string) []byte {
	b = binary.LittleEndian.AppendUint16(b, uint16(len(s)))
	return append(b, s...)
}

func appendBytes32(b []byte, p []byte) []byte {
	b = binary.LittleEndian.AppendUint32(b, uint32(len(p)))
	return append(b, p...)
}

func appendKeys(b []byte, keys []Key) []byte {
	b = binary.LittleEndian.AppendUint32(b, uint32(len(keys)))
	for i := range keys {
		b = append(b, keys[i][:]...)
	}
	return b
}

// reader decodes little-endian fields and remembers the first error.
type reader struct {
	b   []byte
	err *Error
}

func (r *reader) fail(format string, args ...any) {
	if r.err == nil {
		r.err = Errorf(CodeMalformed, format, args...)
	}
	r.b = nil
}

func (r *reader) take(n int) []byte {
	if r.err != nil {
		return nil
	}
	if n < 0 || n > len(r.b) {
		r.fail("truncated: need %d bytes, have %d", n, len(r.b))
		return nil
	}
	v := r.b[:n:n]
	r.b = r.b[n:]
	return v
}

func (r *reader) u8() uint8 {
	if v := r.take(1); v != nil {
		return v[0]
	}
	return 0
}

func (r *reader) u16() uint16 {
	if v := r.take(2); v != nil {
		return binary.LittleEndian.Uint16(v)
	}
	return 0
}

func (r *reader) u32() uint32 {
	if v := r.take(4); v != nil {
		return binary.LittleEndian.Uint32(v)
	}
	return 0
}

func (r *reader) u64() uint64 {
	if v := r.take(8); v != nil {
		return binary.LittleEndian.Uint64(v)
	}
	return 0
}

func (r *reader) str(limit int) string {
	n := int(r.u16())
	if n > limit {
		r.fail("string of %d bytes exceeds %d", n, limit)
		return ""
	}
	return string(r.take(n))
}

func (r *reader) blob(limit int) []byte {
	n := r.u32()
	if uint64(n) > uint64(limit) {
		r.fail("blob of %d bytes exceeds %d", n, limit)
		return nil
	}
	return r.take(int(n))
}

// count reads a u32 element count, checks it against limit and against the
// bytes left (each element is at least elemSize bytes) before anything is
// allocated.
func (r *reader) count(limit uint32, elemSize int) int {
	n := r.u32()
	if r.err != nil {
		return 0
	}
	if n > limit {
		if r.err == nil {
			r.err = Errorf(CodeBatchTooLarge, "%d entries exceed limit %d", n, limit)
		}
		r.b = nil
		return 0
	}
	if uint64(n)*uint64(elemSize) > uint64(len(r.b)) {
		r.fail("%d entries of %d bytes do not fit in %d bytes", n, elemSize, len(r.b))
		return 0
	}
	return int(n)
}

// keys reads a key list into dst's backing array when it is large enough,
// so a caller that decodes into the same message repeatedly does not
// allocate.
func (r *reader) keys(dst []Key, limit uint32) []Key {
	n := r.count(limit, KeySize)
	if n == 0 {
		return nil
	}
	keys := dst[:0]
	if cap(keys) < n {
		keys = make([]Key, n)
	}
	keys = keys[:n]
	for i := range keys {
		copy(keys[i][:], r.take(KeySize))
	}
	return keys
}

func (r *reader) done() error {
	if r.err != nil {
		return r.err
	}
	if len(r.b) != 0 {
		return Errorf(CodeMalformed, "%d trailing bytes", len(r.b))
	}
	return nil
}

// ---- messages ----

// AppendTo encodes m.
func (m *HelloRequest) AppendTo(b []byte) []byte {
	b = append(b, m.MinVersion, m.MaxVersion)
	b = appendString(b, m.Tenant)
	b = appendString(b, m.Client)
	if m.HasAuth {
		b = append(b, byte(m.Auth))
		b = binary.LittleEndian.AppendUint16(b, uint16(len(m.Credential)))
		b = append(b, m.Credential...)
	}
	return b
}

// Decode parses m from b. m.Credential aliases b.
func (m *HelloRequest) Decode(b []byte) error {
	r := reader{b: b}
	m.MinVersion, m.MaxVersion = r.u8(), r.u8()
	m.Tenant = r.str(MaxStringLen)
	m.Client = r.str(MaxStringLen)
	m.HasAuth, m.Auth, m.Credential = false, AuthNone, nil
	if r.err == nil && len(r.b) > 0 {
		m.HasAuth = true
		m.Auth = AuthKind(r.u8())
		n := int(r.u16())
		if r.err == nil && n > MaxCredentialLen {
			r.fail("credential of %d bytes exceeds %d", n, MaxCredentialLen)
		}
		m.Credential = r.take(n)
		switch {
		case r.err != nil:
		case m.Auth > authMax:
			r.fail("unknown auth kind %d", m.Auth)
		case m.Auth == AuthNone && n != 0:
			r.fail("auth kind NONE with a %d-byte credential", n)
		case m.Auth == AuthBearer && n == 0:
			r.fail("auth kind BEARER with an empty credential")
		}
	}
	if r.err == nil && m.MinVersion > m.MaxVersion {
		r.fail("min version %d > max version %d", m.MinVersion, m.MaxVersion)
	}
	return r.done()
}

// AppendTo encodes m.
func (m *HelloResponse) AppendTo(b []byte) []byte {
	b = append(b, m.Version)
	b = appendString(b, m.Server)
	b = binary.LittleEndian.AppendUint32(b, m.Limits.MaxFrame)
	b = binary.LittleEndian.AppendUint32(b, m.Limits.MaxBatch)
	b = binary.LittleEndian.AppendUint32(b, m.Limits.MaxInFlight)
	b = binary.LittleEndian.AppendUint32(b, m.Limits.MaxPayload)
	if m.HasSession {
		b = appendString(b, m.Tenant)
		b = append(b, byte(m.Session))
	}
	return b
}

// Decode parses m from b.
func (m *HelloResponse) Decode(b []byte) error {
	r := reader{b: b}
	m.Version = r.u8()
	m.Server = r.str(MaxStringLen)
	m.Limits = Limits{MaxFrame: r.u32(), MaxBatch: r.u32(), MaxInFlight: r.u32(), MaxPayload: r.u32()}
	m.HasSession, m.Tenant, m.Session = false, "", 0
	if r.err == nil && len(r.b) > 0 {
		m.HasSession = true
		m.Tenant = r.str(MaxStringLen)
		m.Session = SessionFlags(r.u8())
		if r.err == nil && m.Tenant == "" {
			r.fail("session extension without a tenant")
		}
		if r.err == nil && m.Session&^sessionKnown != 0 {
			r.fail("unknown session flags %#x", uint8(m.Session&^sessionKnown))
		}
	}
	return r.done()
}

// AppendTo encodes m.
func (m *LookupRequest) AppendTo(b []byte) []byte {
	b = appendBytes32(b, m.Namespace)
	b = binary.LittleEndian.AppendUint32(b, m.LeaseTTLMillis)
	return appendKeys(b, m.Keys)
}

// Decode parses m from b, allowing at most maxBatch keys. m.Namespace
// aliases b; copy it to keep it after b is reused.
func (m *LookupRequest) Decode(b []byte, maxBatch uint32) error {
	r := reader{b: b}
	m.Namespace = r.blob(MaxNamespaceLen)
	m.LeaseTTLMillis = r.u32()
	m.Keys = r.keys(m.Keys, maxBatch)
	return r.done()
}

// AppendTo encodes m.
func (m *LookupResponse) AppendTo(b []byte) []byte {
	b = binary.LittleEndian.AppendUint32(b, m.Hits)
	b = binary.LittleEndian.AppendUint64(b, m.LeaseID)
	return binary.LittleEndian.AppendUint32(b, m.LeaseTTLMillis)
}

// Decode parses m from b.
func (m *LookupResponse) Decode(b []byte) error {
	r := reader{b: b}
	m.Hits, m.LeaseID, m.LeaseTTLMillis = r.u32(), r.u64(), r.u32()
	return r.done()
}

// AppendTo encodes m.
func (m *GetRequest) AppendTo(b []byte) []byte {
	b = appendBytes32(b, m.Namespace)
	b = binary.LittleEndian.AppendUint64(b, m.LeaseID)
	return appendKeys(b, m.Keys)
}

// Decode parses m from b, allowing at most maxBatch keys. m.Namespace
// aliases b; copy it to keep it after b is reused.
func (m *GetRequest) Decode(b []byte, maxBatch uint32) error {
	r := reader{b: b}
	m.Namespace = r.blob(MaxNamespaceLen)
	m.LeaseID = r.u64()
	m.Keys = r.keys(m.Keys, maxBatch)
	return r.done()
}

// AppendTo encodes the table of a GET response.
func (m *GetResponse) AppendTo(b []byte) []byte {
	b = binary.LittleEndian.AppendUint32(b, uint32(len(m.Blocks)))
	for _, bm := range m.Blocks {
		b = append(b, byte(bm.Status))
		b = binary.LittleEndian.AppendUint32(b, bm.Len)
	}
	return b
}

// Decode parses the table of a GET response. It checks that only hits carry
// bytes and returns the payload total.
func (m *GetResponse) Decode(b []byte, maxBatch uint32) (payload uint64, err error) {
	r := reader{b: b}
	n := r.count(maxBatch, 5)
	m.Blocks = make([]BlockMeta, n)
	for i := range m.Blocks {
		m.Blocks[i] = BlockMeta{Status: Status(r.u8()), Len: r.u32()}
		bm := m.Blocks[i]
		if bm.Status != StatusHit && bm.Status != StatusMiss {
			r.fail("block %d: status %s in a GET answer", i, bm.Status)
		} else if bm.Status != StatusHit && bm.Len != 0 {
			r.fail("block %d: status %s carries %d bytes", i, bm.Status, bm.Len)
		}
		payload += uint64(bm.Len)
	}
	return payload, r.done()
}

// AppendTo encodes the table of a PUT request.
func (m *PutRequest) AppendTo(b []byte) []byte {
	b = AppendPutHead(b, m.Namespace, len(m.Blocks))
	for i := range m.Blocks {
		b = AppendPutBlock(b, &m.Blocks[i])
	}
	return b
}

// AppendPutHead encodes the start of a PUT table: the namespace blob and a
// count of n entries, which n AppendPutBlock calls must follow. With them
// a caller encodes a table from its own block list without building a
// PutRequest (the client does, per request).
func AppendPutHead(b, namespace []byte, n int) []byte {
	b = appendBytes32(b, namespace)
	return binary.LittleEndian.AppendUint32(b, uint32(n))
}

// AppendPutBlock encodes one entry of a PUT table (PutBlockSize bytes).
func AppendPutBlock(b []byte, pb *PutBlock) []byte {
	b = append(b, pb.Key[:]...)
	b = append(b, pb.Parent[:]...)
	return appendTail(b, pb.ValidLength, pb.Len, pb.Position, pb.TokenIDs)
}

// PutBlockSize is the encoded size of one PutBlock with n token ids.
func PutBlockSize(n int) int { return 2*KeySize + tailSize(n) }

// appendTail encodes the part of a PUT or FILL_COMMIT entry after the keys:
// u32 valid length | u32 payload length | u64 position | u32 n | n × u32.
func appendTail(b []byte, valid, payload uint32, pos uint64, ids []uint32) []byte {
	b = binary.LittleEndian.AppendUint32(b, valid)
	b = binary.LittleEndian.AppendUint32(b, payload)
	b = binary.LittleEndian.AppendUint64(b, pos)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(ids)))
	for _, t := range ids {
		b = binary.LittleEndian.AppendUint32(b, t)
	}
	return b
}

// tailSize is the encoded size of an entry tail with n token ids.
func tailSize(n int) int { return 20 + 4*n }

// minTail is the smallest valid tail: one token id.
const minTail = 24

// tail decodes an entry tail. The token ids go into dst's backing array
// when it is large enough (a message decoded into again and again does not
// allocate); otherwise into a new one. *total counts the token ids of the
// request; past MaxRequestTokens the table is BATCH_TOO_LARGE.
func (r *reader) tail(dst []uint32, total *int) (valid, payload uint32, pos uint64, ids []uint32) {
	valid, payload, pos = r.u32(), r.u32(), r.u64()
	n := r.u32()
	if r.err != nil {
		return 0, 0, 0, nil
	}
	switch {
	case n == 0 || n > MaxBlockTokens:
		r.fail("%d token ids not in 1..%d", n, MaxBlockTokens)
		return 0, 0, 0, nil
	case *total+int(n) > MaxRequestTokens:
		r.err = Errorf(CodeBatchTooLarge, "more than %d token ids in one request", MaxRequestTokens)
		r.b = nil
		return 0, 0, 0, nil
	case uint64(n)*4 > uint64(len(r.b)):
		r.fail("%d token ids do not fit in %d bytes", n, len(r.b))
		return 0, 0, 0, nil
	case valid > n:
		r.fail("valid length %d exceeds %d token ids", valid, n)
		return 0, 0, 0, nil
	}
	*total += int(n)
	ids = dst[:0]
	if cap(ids) < int(n) {
		ids = make([]uint32, n)
	}
	ids = ids[:n]
	raw := r.take(4 * int(n))
	for i := range ids {
		ids[i] = binary.LittleEndian.Uint32(raw[4*i:])
	}
	return valid, payload, pos, ids
}

// Decode parses the table of a PUT request and returns the payload total,
// which must equal the bytes that follow the table (see CheckPayload).
//
// Aliasing: m.Namespace aliases b; copy it to keep it after b is reused.
// Blocks and each block's TokenIDs reuse m's backing arrays when they are
// large enough, so the next Decode into m overwrites them: copy what you
// keep. (Blocks whose TokenIDs share one backing array must not be decoded
// into.)
func (m *PutRequest) Decode(b []byte, maxBatch uint32) (payload uint64, err error) {
	r := reader{b: b}
	m.Namespace = r.blob(MaxNamespaceLen)
	n := r.count(maxBatch, 2*KeySize+minTail)
	if cap(m.Blocks) < n {
		nb := make([]PutBlock, n)
		copy(nb, m.Blocks[:cap(m.Blocks)]) // keep their TokenIDs arrays for reuse
		m.Blocks = nb
	}
	m.Blocks = m.Blocks[:n] // reuses the caller's backing array
	total := 0
	for i := range m.Blocks {
		pb := &m.Blocks[i]
		copy(pb.Key[:], r.take(KeySize))
		copy(pb.Parent[:], r.take(KeySize))
		pb.ValidLength, pb.Len, pb.Position, pb.TokenIDs = r.tail(pb.TokenIDs, &total)
		payload += uint64(pb.Len)
	}
	return payload, r.done()
}

// AppendTo encodes m.
func (m *StatusResponse) AppendTo(b []byte) []byte {
	b = binary.LittleEndian.AppendUint32(b, uint32(len(m.Statuses)))
	for _, s := range m.Statuses {
		b = append(b, byte(s))
	}
	return b
}

// Decode parses m from b, accepting every status this package defines
// (the statuses of VersionMax).
func (m *StatusResponse) Decode(b []byte, maxBatch uint32) error {
	return m.DecodeVersion(b, maxBatch, VersionMax)
}

// DecodeVersion parses m from b as the answer of a session of protocol
// version v: a status introduced after v (Status.Since) is malformed, as
// is one this package does not define.
func (m *StatusResponse) DecodeVersion(b []byte, maxBatch uint32, v uint8) error {
	r := reader{b: b}
	n := r.count(maxBatch, 1)
	m.Statuses = make([]Status, n)
	for i := range m.Statuses {
		m.Statuses[i] = Status(r.u8())
		switch s := m.Statuses[i]; {
		case s > statusMax:
			r.fail("entry %d: unknown status %d", i, s)
		case s.Since() > v:
			r.fail("entry %d: status %s needs protocol version %d, session speaks %d", i, s, s.Since(), v)
		}
	}
	return r.done()
}

// AppendTo encodes m.
func (m *DeleteRequest) AppendTo(b []byte) []byte {
	b = appendBytes32(b, m.Namespace)
	return appendKeys(b, m.Keys)
}

// Decode parses m from b, allowing at most maxBatch keys. m.Namespace
// aliases b; copy it to keep it after b is reused.
func (m *DeleteRequest) Decode(b []byte, maxBatch uint32) error {
	r := reader{b: b}
	m.Namespace = r.blob(MaxNamespaceLen)
	m.Keys = r.keys(m.Keys, maxBatch)
	return r.done()
}

// AppendTo encodes m.
func (m *StatResponse) AppendTo(b []byte) []byte {
	b = binary.LittleEndian.AppendUint32(b, uint32(len(m.Entries)))
	for _, e := range m.Entries {
		b = appendString(b, e.Name)
		b = binary.LittleEndian.AppendUint64(b, e.Value)
	}
	return b
}

// Decode parses m from b.
func (m *StatResponse) Decode(b []byte) error {
	r := reader{b: b}
	n := r.count(MaxStatEntries, 10)
	m.Entries = make([]StatEntry, n)
	for i := range m.Entries {
		m.Entries[i] = StatEntry{Name: r.str(MaxStringLen), Value: r.u64()}
	}
	return r.done()
}

// ---- bodies with trailing payload ----

// AppendMeta frames a table for a body that carries payload after it:
// u32 table length, then the table. The payloads follow the returned bytes.
func AppendMeta(b []byte, table []byte) []byte {
	b = binary.LittleEndian.AppendUint32(b, uint32(len(table)))
	return append(b, table...)
}

// Table is the table of a request that carries payload after it
// (PutRequest, PutOpaqueRequest, FillCommitRequest).
type Table interface{ AppendTo(b []byte) []byte }

// AppendTable frames t as AppendMeta does (u32 table length, then the
// table), encoding the table in place rather than copying it.
func AppendTable(b []byte, t Table) []byte {
	at := len(b)
	b = append(b, 0, 0, 0, 0)
	b = t.AppendTo(b)
	binary.LittleEndian.PutUint32(b[at:], uint32(len(b)-at-4))
	return b
}

// MetaLen parses the u32 table length at the start of a body of bodyLen
// bytes and checks that the table fits.
func MetaLen(prefix [4]byte, bodyLen uint32) (uint32, error) {
	n := binary.LittleEndian.Uint32(prefix[:])
	if bodyLen < 4 || n > bodyLen-4 {
		return 0, Errorf(CodeMalformed, "table length %d does not fit in body of %d bytes", n, bodyLen)
	}
	return n, nil
}

// CheckPayload checks that the payload total announced by a table equals the
// bytes left in the body after it.
func CheckPayload(total uint64, bodyLen, metaLen uint32) error {
	if uint64(metaLen)+4 > uint64(bodyLen) {
		return Errorf(CodeMalformed, "table length %d does not fit in body of %d bytes", metaLen, bodyLen)
	}
	rest := uint64(bodyLen) - 4 - uint64(metaLen)
	if total != rest || total > math.MaxUint32 {
		return Errorf(CodeMalformed, "table announces %d payload bytes, body has %d", total, rest)
	}
	return nil
}
