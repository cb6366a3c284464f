package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"
)

// Magic is the first four bytes of every frame: "GPUC".
const Magic = "GPUC"

// Protocol constants.
const (
	// Version1 is the single-node protocol: HELLO through WAIT.
	Version1 uint8 = 1
	// Version2 adds cluster mode: the MEMBERS operation and the WRONG_EPOCH
	// code (ADR 0008). A session speaks the version HELLO negotiated; the
	// frame header's version byte stays FrameVersion in both.
	Version2 uint8 = 2
	// Version3 adds PUT_OPAQUE: storing opaque-key blocks (a RESP key
	// under a tenant's profile namespace).
	Version3 uint8 = 3
	// Version4 adds the READ_ONLY block status: a node whose control plane
	// is unreachable (read-only or unknown mode) refuses a PUT or
	// PUT_OPAQUE with READ_ONLY rather than NO_SPACE, so a client can tell
	// "retry elsewhere or later" from "this node is full". Sessions
	// of versions 1..3 keep getting NO_SPACE.
	Version4 uint8 = 4
	// Version5 adds registered regions on Unix-domain connections:
	// REGISTER, UNREGISTER, GET_INTO and PUT_FROM, the FAULT block status
	// and the REGION error code (ADR 0026).
	Version5 uint8 = 5
	// VersionMax is the highest protocol version this package speaks.
	VersionMax = Version5
	// FrameVersion is the header's version byte: the frame layout, which
	// every protocol version (1 to 5) shares.
	FrameVersion uint8 = 1
	// HeaderSize is the fixed size of a frame header in every version.
	HeaderSize = 24
	// KeySize is the size of a block key and of a namespace digest.
	KeySize = 32

	// DefaultMaxFrame bounds a frame body: 64 MiB of payload plus 1 MiB of
	// room for the table.
	DefaultMaxFrame = 64<<20 + 1<<20
	// DefaultMaxBatch bounds the number of keys in one request.
	DefaultMaxBatch = 1024
	// DefaultMaxInFlight bounds requests in flight on one connection.
	DefaultMaxInFlight = 64
	// MaxNamespaceLen bounds the namespace blob (identity.MaxCanonicalLen).
	MaxNamespaceLen = 4096
	// MaxStringLen bounds every short string in a message.
	MaxStringLen = 256
	// MaxPingLen bounds a PING body.
	MaxPingLen = 1024
	// MaxStatEntries bounds a STAT response.
	MaxStatEntries = 256
	// MaxBlockTokens bounds the token ids of one PUT or FILL_COMMIT block
	// (identity.MaxBlockTokens).
	MaxBlockTokens = 1 << 16
	// MaxRequestTokens bounds the token ids of all blocks of one PUT or
	// FILL_COMMIT table; more is BATCH_TOO_LARGE.
	MaxRequestTokens = 1 << 20
)

// Opcode names an operation. Requests and their responses share the opcode.
type Opcode uint8

// Operations of protocol version 1.
const (
	OpHello  Opcode = 1
	OpLookup Opcode = 2
	OpGet    Opcode = 3
	OpPut    Opcode = 4
	OpDelete Opcode = 5
	OpStat   Opcode = 6
	OpPing   Opcode = 7
	// Single-flight fills (see fill.go).
	OpAcquire    Opcode = 8
	OpFillCommit Opcode = 9
	OpFillAbort  Opcode = 10
	OpWait       Opcode = 11
	// OpMembers (version 2) returns the node's view of the cluster: its
	// epoch and members, for client routing.
	OpMembers Opcode = 12
	// OpPutOpaque (version 3) stores opaque-key blocks: the server
	// verifies each key as identity.OpaqueKey(namespace digest, name).
	OpPutOpaque Opcode = 13
	// Registered regions (version 5, region.go): only on a Unix-domain
	// connection.
	OpRegister   Opcode = 14
	OpUnregister Opcode = 15
	OpGetInto    Opcode = 16
	OpPutFrom    Opcode = 17
	// OpPutOpaqueFrom is PUT_FROM for opaque-key blocks (a PUT_OPAQUE table).
	OpPutOpaqueFrom Opcode = 18
	// OpMax is the highest opcode this package defines.
	OpMax = OpPutOpaqueFrom
)

func (o Opcode) String() string {
	switch o {
	case OpHello:
		return "HELLO"
	case OpLookup:
		return "LOOKUP"
	case OpGet:
		return "GET"
	case OpPut:
		return "PUT"
	case OpDelete:
		return "DELETE"
	case OpStat:
		return "STAT"
	case OpPing:
		return "PING"
	case OpAcquire:
		return "ACQUIRE"
	case OpFillCommit:
		return "FILL_COMMIT"
	case OpFillAbort:
		return "FILL_ABORT"
	case OpWait:
		return "WAIT"
	case OpMembers:
		return "MEMBERS"
	case OpPutOpaque:
		return "PUT_OPAQUE"
	case OpRegister:
		return "REGISTER"
	case OpUnregister:
		return "UNREGISTER"
	case OpGetInto:
		return "GET_INTO"
	case OpPutFrom:
		return "PUT_FROM"
	case OpPutOpaqueFrom:
		return "PUT_OPAQUE_FROM"
	}
	return fmt.Sprintf("OP(%d)", uint8(o))
}

// Known reports whether o is an operation this package defines.
func (o Opcode) Known() bool { return o >= OpHello && o <= OpMax }

// Since is the protocol version that introduced o.
func (o Opcode) Since() uint8 {
	switch o {
	case OpMembers:
		return Version2
	case OpPutOpaque:
		return Version3
	case OpRegister, OpUnregister, OpGetInto, OpPutFrom, OpPutOpaqueFrom:
		return Version5
	}
	return Version1
}

// Mutating reports whether o changes server state: PUT, DELETE, ACQUIRE,
// FILL_COMMIT, FILL_ABORT, PUT_OPAQUE, PUT_FROM and PUT_OPAQUE_FROM. A server with authentication requires these
// to carry a replay stamp (FlagStamped).
func (o Opcode) Mutating() bool {
	switch o {
	case OpPut, OpDelete, OpAcquire, OpFillCommit, OpFillAbort, OpPutOpaque, OpPutFrom, OpPutOpaqueFrom:
		return true
	}
	return false
}

// Flags is the frame's flag word.
type Flags uint16

// Frame flags.
const (
	// FlagResponse marks a frame sent by the server.
	FlagResponse Flags = 1 << 0
	// FlagError marks a response whose body is an ErrorBody.
	FlagError Flags = 1 << 1
	// FlagStamped marks a request whose body starts with a replay stamp
	// (StampSize bytes: u64 little-endian unix nanoseconds with the top bit
	// clear, 16-byte nonce; see doc.go) before the
	// operation's own body. Servers with authentication require it on
	// mutating requests (Opcode.Mutating); see ADR 0006.
	FlagStamped Flags = 1 << 2
	// knownFlags is every flag version 1 defines.
	knownFlags = FlagResponse | FlagError | FlagStamped
	// requestFlags are the flags a request may carry.
	requestFlags = FlagStamped
)

// StampSize is the size of the replay stamp a FlagStamped request body
// starts with.
const StampSize = 24

// Header is the fixed 24-byte frame header:
//
//	offset size field
//	0      4    magic "GPUC"
//	4      1    version
//	5      1    opcode
//	6      2    flags (u16 LE)
//	8      8    request id (u64 LE)
//	16     4    body length (u32 LE)
//	20     4    reserved, zero
type Header struct {
	Version   uint8
	Op        Opcode
	Flags     Flags
	RequestID uint64
	BodyLen   uint32
}

// Encode writes h into b[:HeaderSize].
func (h Header) Encode(b []byte) {
	_ = b[HeaderSize-1]
	copy(b[0:4], Magic)
	b[4] = h.Version
	b[5] = byte(h.Op)
	binary.LittleEndian.PutUint16(b[6:8], uint16(h.Flags))
	binary.LittleEndian.PutUint64(b[8:16], h.RequestID)
	binary.LittleEndian.PutUint32(b[16:20], h.BodyLen)
	binary.LittleEndian.PutUint32(b[20:24], 0)
}

// Append appends the encoded header to b.
func (h Header) Append(b []byte) []byte {
	var buf [HeaderSize]byte
	h.Encode(buf[:])
	return append(b, buf[:]...)
}

// DecodeHeader parses a header. It checks only what every version shares
// (magic and reserved bytes); the caller checks version, opcode, flags and
// length against its Limits with Check, because some of those errors leave
// the stream in sync and some do not.
func DecodeHeader(b []byte) (Header, error) {
	if len(b) < HeaderSize {
		return Header{}, Errorf(CodeMalformed, "header is %d bytes, want %d", len(b), HeaderSize)
	}
	if string(b[0:4]) != Magic {
		return Header{}, Errorf(CodeBadMagic, "bad magic %q", b[0:4])
	}
	h := Header{
		Version:   b[4],
		Op:        Opcode(b[5]),
		Flags:     Flags(binary.LittleEndian.Uint16(b[6:8])),
		RequestID: binary.LittleEndian.Uint64(b[8:16]),
		BodyLen:   binary.LittleEndian.Uint32(b[16:20]),
	}
	if binary.LittleEndian.Uint32(b[20:24]) != 0 {
		return h, Errorf(CodeMalformed, "reserved header bytes are not zero")
	}
	return h, nil
}

// Limits bound what a peer accepts.
type Limits struct {
	MaxFrame    uint32 // largest body; default DefaultMaxFrame
	MaxBatch    uint32 // most keys per request; default DefaultMaxBatch
	MaxInFlight uint32 // most requests in flight per connection; default DefaultMaxInFlight
	MaxPayload  uint32 // largest single block payload; set by the server
}

// DefaultLimits returns the defaults of version 1.
func DefaultLimits() Limits {
	return Limits{MaxFrame: DefaultMaxFrame, MaxBatch: DefaultMaxBatch, MaxInFlight: DefaultMaxInFlight, MaxPayload: 4 << 20}
}

// CheckRequest validates a request header against l, in this order: body
// length, version, flags, opcode. The returned error is an *Error; its
// Code.Fatal reports whether the connection must close (the body cannot be
// skipped) or may carry on after skipping the body.
//
// Version 1 defines one request flag, FlagStamped, whose body must hold at
// least the stamp. FlagResponse and FlagError are set only by the server, and
// any other bit is unknown, so a request with another flag set is MALFORMED.
func (l Limits) CheckRequest(h Header) error {
	switch {
	case h.BodyLen > l.MaxFrame:
		return Errorf(CodeFrameTooLarge, "body %d bytes exceeds limit %d", h.BodyLen, l.MaxFrame)
	case h.Version != FrameVersion:
		return Errorf(CodeUnsupportedVersion, "frame version %d unsupported, this server speaks %d", h.Version, FrameVersion)
	case h.Flags&^knownFlags != 0:
		return Errorf(CodeMalformed, "unknown flags %#x", uint16(h.Flags&^knownFlags))
	case h.Flags&^requestFlags != 0:
		return Errorf(CodeMalformed, "request flags %#x are reserved for responses", uint16(h.Flags&^requestFlags))
	case h.Flags&FlagStamped != 0 && h.BodyLen < StampSize:
		return Errorf(CodeMalformed, "stamped request body of %d bytes cannot hold the %d-byte stamp", h.BodyLen, StampSize)
	case !h.Op.Known():
		return Errorf(CodeUnknownOpcode, "unknown opcode %d", uint8(h.Op))
	}
	return nil
}

// Code is a typed error code carried in an error response.
type Code uint16

// Error codes.
const (
	CodeOK                 Code = 0
	CodeBadMagic           Code = 1  // stream out of sync; connection closes
	CodeUnsupportedVersion Code = 2  // body skipped; connection stays
	CodeUnknownOpcode      Code = 3  // body skipped; connection stays
	CodeFrameTooLarge      Code = 4  // connection closes: the body is not read
	CodeMalformed          Code = 5  // body did not decode
	CodeBatchTooLarge      Code = 6  // more keys than MaxBatch
	CodeTooManyInFlight    Code = 7  // reserved: the server applies backpressure instead
	CodeInvalidIdentity    Code = 8  // namespace blob did not decode or validate
	CodeTenantMismatch     Code = 9  // namespace tenant is not the session's tenant
	CodeHelloRequired      Code = 10 // first request on a connection must be HELLO
	CodePayloadTooLarge    Code = 11 // reserved: v1 answers a PUT block over MaxPayload with StatusTooLarge
	CodeShuttingDown       Code = 12 // server is draining
	CodeInternal           Code = 13 // server bug; connection stays
	CodeTimeout            Code = 14 // a deadline passed
	CodeUnauthenticated    Code = 15 // HELLO credential missing, unknown, expired or revoked
	CodeDenied             Code = 16 // the session tenant lacks the right this operation needs
	CodeRateLimited        Code = 17 // tenant over its quota; retry after Error.RetryAfter
	CodeReplay             Code = 18 // stamp missing, outside the window, or nonce reused
	// CodeWrongEpoch (version 2): a key of the request is not owned by this
	// node under its current epoch, carried in Error.Epoch. Refresh the
	// view (MEMBERS) and retry once on the owner.
	CodeWrongEpoch Code = 19
	// CodeRegion (version 5): a region request failed as a whole: no
	// descriptor came with REGISTER, the descriptor is not shareable memory
	// (or a memfd without F_SEAL_SHRINK), the region bounds are reached, or
	// the region is not registered on this connection (never, unregistered,
	// or dropped after a fault). Register again or use GET and PUT.
	CodeRegion Code = 20
	codeMax         = CodeRegion
)

var codeNames = map[Code]string{
	CodeOK: "OK", CodeBadMagic: "BAD_MAGIC", CodeUnsupportedVersion: "UNSUPPORTED_VERSION",
	CodeUnknownOpcode: "UNKNOWN_OPCODE", CodeFrameTooLarge: "FRAME_TOO_LARGE", CodeMalformed: "MALFORMED",
	CodeBatchTooLarge: "BATCH_TOO_LARGE", CodeTooManyInFlight: "TOO_MANY_IN_FLIGHT",
	CodeInvalidIdentity: "INVALID_IDENTITY", CodeTenantMismatch: "TENANT_MISMATCH",
	CodeHelloRequired: "HELLO_REQUIRED", CodePayloadTooLarge: "PAYLOAD_TOO_LARGE",
	CodeShuttingDown: "SHUTTING_DOWN", CodeInternal: "INTERNAL", CodeTimeout: "TIMEOUT",
	CodeUnauthenticated: "UNAUTHENTICATED", CodeDenied: "DENIED", CodeRateLimited: "RATE_LIMITED",
	CodeReplay: "REPLAY", CodeWrongEpoch: "WRONG_EPOCH", CodeRegion: "REGION",
}

// CodeMax is the highest code this version defines.
const CodeMax = codeMax

func (c Code) String() string {
	if s, ok := codeNames[c]; ok {
		return s
	}
	return fmt.Sprintf("CODE(%d)", uint16(c))
}

// Fatal reports whether the connection closes after an error with this code,
// because the stream cannot be resynchronised.
func (c Code) Fatal() bool { return c == CodeBadMagic || c == CodeFrameTooLarge }

// Error is a protocol error with a typed code. It is the body of an error
// response and the error type every decoder returns.
type Error struct {
	Code    Code
	Message string
	// RetryAfter is how long to wait before retrying; set on RATE_LIMITED.
	// It travels as an optional trailing u32 of milliseconds (rounded up).
	RetryAfter time.Duration
	// Epoch is the refusing node's current epoch; set on WRONG_EPOCH, where
	// it travels as a trailing u64 (and RetryAfter is not sent).
	Epoch uint64
}

func (e *Error) Error() string { return "gpucache/wire: " + e.Code.String() + ": " + e.Message }

// Is lets errors.Is match any *Error with the same code: a target *Error with
// an empty Message matches every error of its code, e.g.
//
//	errors.Is(err, &wire.Error{Code: wire.CodeMalformed})
//
// A target with a Message matches only itself (errors.Is compares pointers
// first). A nil *Error target matches nothing.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t != nil && t.Code == e.Code && t.Message == ""
}

// Errorf returns an *Error with a formatted message.
func Errorf(c Code, format string, args ...any) *Error {
	return &Error{Code: c, Message: fmt.Sprintf(format, args...)}
}

// ErrCode returns the *Error code of err, or CodeInternal if err carries none.
func ErrCode(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return CodeInternal
}

// AppendTo encodes the error body: u16 code, string message.
func (e *Error) AppendTo(b []byte) []byte {
	b = binary.LittleEndian.AppendUint16(b, uint16(e.Code))
	msg := e.Message
	if len(msg) > MaxStringLen {
		msg = msg[:MaxStringLen]
	}
	b = appendString(b, msg)
	if e.Code == CodeWrongEpoch {
		return binary.LittleEndian.AppendUint64(b, e.Epoch)
	}
	if e.RetryAfter > 0 {
		ms := (e.RetryAfter + time.Millisecond - 1) / time.Millisecond
		b = binary.LittleEndian.AppendUint32(b, uint32(min(ms, math.MaxUint32)))
	}
	return b
}

// DecodeError parses an error body: u16 code, str message, and an optional
// trailing u32 retry-after in milliseconds (for WRONG_EPOCH, a required
// trailing u64 epoch instead). It accepts any code, including
// codes this version does not define (a newer peer may send them); callers
// treat an unknown code as non-fatal.
func DecodeError(b []byte) (*Error, error) {
	r := reader{b: b}
	e := &Error{Code: Code(r.u16())}
	e.Message = r.str(MaxStringLen)
	if e.Code == CodeWrongEpoch {
		e.Epoch = r.u64()
		return e, r.done()
	}
	if r.err == nil && len(r.b) == 4 {
		ms := r.u32()
		if ms == 0 {
			r.fail("a zero retry-after must be omitted")
		}
		e.RetryAfter = time.Duration(ms) * time.Millisecond
	}
	return e, r.done()
}
