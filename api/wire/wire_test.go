package wire_test

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gpucache/gpucache/api/identity"
	"github.com/gpucache/gpucache/api/wire"
)

// wantCode fails unless err is a *wire.Error with code c.
func wantCode(t testing.TB, err error, c wire.Code) {
	t.Helper()
	var we *wire.Error
	if !errors.As(err, &we) {
		t.Fatalf("err = %v (%T), want *wire.Error with code %s", err, err, c)
	}
	if we.Code != c {
		t.Fatalf("code = %s (%v), want %s", we.Code, err, c)
	}
	if !errors.Is(err, &wire.Error{Code: c}) {
		t.Fatalf("errors.Is(%v, code %s) = false", err, c)
	}
}

// A wire.Key is a block key, and a namespace digest converts to one
// (compile-time).
var (
	_ wire.Key = identity.BlockKey{}
	_ wire.Key = wire.Key(identity.NamespaceDigest{})
)

func TestConstantsMatchIdentity(t *testing.T) {
	if wire.MaxNamespaceLen != identity.MaxCanonicalLen {
		t.Errorf("MaxNamespaceLen %d != identity.MaxCanonicalLen %d", wire.MaxNamespaceLen, identity.MaxCanonicalLen)
	}
	if wire.MaxStringLen != identity.MaxStringLen {
		t.Errorf("MaxStringLen %d != identity.MaxStringLen %d", wire.MaxStringLen, identity.MaxStringLen)
	}
}

func sampleHeader() wire.Header {
	return wire.Header{Version: wire.Version1, Op: wire.OpGet, Flags: wire.FlagResponse | wire.FlagError,
		RequestID: 0x0102030405060708, BodyLen: 0x0a0b0c0d}
}

// magic is wire.Magic as a constant expression: it compiles only while
// Magic is a constant, which no importer can change.
const magic = wire.Magic

func TestHeaderLayout(t *testing.T) {
	if magic != "GPUC" {
		t.Fatalf("Magic = %q", magic)
	}
	h := sampleHeader()
	var b [wire.HeaderSize]byte
	h.Encode(b[:])
	want := []byte{
		'G', 'P', 'U', 'C', // magic
		1,    // version
		3,    // opcode GET
		3, 0, // flags
		8, 7, 6, 5, 4, 3, 2, 1, // request id
		0x0d, 0x0c, 0x0b, 0x0a, // body length
		0, 0, 0, 0, // reserved
	}
	if !bytes.Equal(b[:], want) {
		t.Fatalf("Encode = % x\nwant     % x", b, want)
	}
	if got := h.Append([]byte("x")); !bytes.Equal(got, append([]byte("x"), want...)) {
		t.Fatalf("Append = % x", got)
	}
	got, err := wire.DecodeHeader(b[:])
	if err != nil || got != h {
		t.Fatalf("DecodeHeader = %+v, %v; want %+v", got, err, h)
	}
	// Bytes after the header are not the header's business.
	if got, err := wire.DecodeHeader(append(b[:], 0xff)); err != nil || got != h {
		t.Fatalf("DecodeHeader with trailing bytes = %+v, %v", got, err)
	}
	// Encode overwrites stale reserved bytes.
	stale := bytes.Repeat([]byte{0xee}, wire.HeaderSize)
	h.Encode(stale)
	if !bytes.Equal(stale, want) {
		t.Fatalf("Encode over stale bytes = % x", stale)
	}
}

func TestDecodeHeaderRejects(t *testing.T) {
	good := sampleHeader().Append(nil)
	t.Run("short", func(t *testing.T) {
		for n := range wire.HeaderSize {
			_, err := wire.DecodeHeader(good[:n])
			wantCode(t, err, wire.CodeMalformed)
		}
	})
	t.Run("bad magic", func(t *testing.T) {
		for i := range 4 {
			b := bytes.Clone(good)
			b[i] ^= 0x20
			_, err := wire.DecodeHeader(b)
			wantCode(t, err, wire.CodeBadMagic)
			if !wire.ErrCode(err).Fatal() {
				t.Fatal("BAD_MAGIC is not fatal")
			}
		}
	})
	t.Run("reserved nonzero", func(t *testing.T) {
		for i := 20; i < 24; i++ {
			b := bytes.Clone(good)
			b[i] = 1
			h, err := wire.DecodeHeader(b)
			wantCode(t, err, wire.CodeMalformed)
			// The header is still returned, so the body can be skipped.
			if h.BodyLen != sampleHeader().BodyLen || h.RequestID != sampleHeader().RequestID {
				t.Fatalf("header not returned with the error: %+v", h)
			}
		}
	})
}

func TestCheckRequest(t *testing.T) {
	l := wire.DefaultLimits()
	ok := wire.Header{Version: wire.Version1, Op: wire.OpPing, RequestID: 9, BodyLen: 10}
	with := func(f func(*wire.Header)) wire.Header { h := ok; f(&h); return h }
	cases := []struct {
		name  string
		h     wire.Header
		code  wire.Code // CodeOK: no error
		fatal bool
	}{
		{"ok", ok, wire.CodeOK, false},
		{"every opcode", with(func(h *wire.Header) { h.Op = wire.OpHello }), wire.CodeOK, false},
		{"body at max frame", with(func(h *wire.Header) { h.BodyLen = l.MaxFrame }), wire.CodeOK, false},
		{"frame too large", with(func(h *wire.Header) { h.BodyLen = l.MaxFrame + 1 }), wire.CodeFrameTooLarge, true},
		{"frame too large wins over version", with(func(h *wire.Header) { h.BodyLen = 1 << 31; h.Version = 9 }), wire.CodeFrameTooLarge, true},
		{"version 0", with(func(h *wire.Header) { h.Version = 0 }), wire.CodeUnsupportedVersion, false},
		{"version 2", with(func(h *wire.Header) { h.Version = 2 }), wire.CodeUnsupportedVersion, false},
		{"version wins over opcode", with(func(h *wire.Header) { h.Version = 2; h.Op = 200 }), wire.CodeUnsupportedVersion, false},
		{"opcode 0", with(func(h *wire.Header) { h.Op = 0 }), wire.CodeUnknownOpcode, false},
		{"opcode 12", with(func(h *wire.Header) { h.Op = wire.OpMax + 1 }), wire.CodeUnknownOpcode, false},
		{"opcode 255", with(func(h *wire.Header) { h.Op = 255 }), wire.CodeUnknownOpcode, false},
		{"response flag", with(func(h *wire.Header) { h.Flags = wire.FlagResponse }), wire.CodeMalformed, false},
		{"error flag", with(func(h *wire.Header) { h.Flags = wire.FlagError }), wire.CodeMalformed, false},
		{"unknown flag", with(func(h *wire.Header) { h.Flags = 1 << 3 }), wire.CodeMalformed, false},
		{"stamped short body", with(func(h *wire.Header) { h.Flags = wire.FlagStamped; h.BodyLen = wire.StampSize - 1 }), wire.CodeMalformed, false},
		{"high flag", with(func(h *wire.Header) { h.Flags = 1 << 15 }), wire.CodeMalformed, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := l.CheckRequest(tc.h)
			if tc.code == wire.CodeOK {
				if err != nil {
					t.Fatalf("err = %v, want nil", err)
				}
				return
			}
			wantCode(t, err, tc.code)
			if got := wire.ErrCode(err).Fatal(); got != tc.fatal {
				t.Fatalf("Fatal() = %v, want %v", got, tc.fatal)
			}
		})
	}
	for op := wire.OpHello; op <= wire.OpPing; op++ {
		if err := l.CheckRequest(with(func(h *wire.Header) { h.Op = op })); err != nil {
			t.Errorf("%s: %v", op, err)
		}
	}
}

func TestErrorIs(t *testing.T) {
	e := wire.Errorf(wire.CodeMalformed, "bad %s", "thing")
	if !errors.Is(e, &wire.Error{Code: wire.CodeMalformed}) {
		t.Error("same code, empty target message: want match")
	}
	if errors.Is(e, &wire.Error{Code: wire.CodeBatchTooLarge}) {
		t.Error("other code: want no match")
	}
	if errors.Is(e, &wire.Error{Code: wire.CodeMalformed, Message: "bad thing"}) {
		t.Error("target with a message matches only itself")
	}
	if !errors.Is(e, e) {
		t.Error("an error is itself")
	}
	wrapped := fmt.Errorf("reading body: %w", e)
	if !errors.Is(wrapped, &wire.Error{Code: wire.CodeMalformed}) {
		t.Error("wrapped error: want match")
	}
	if errors.Is(e, (*wire.Error)(nil)) {
		t.Error("nil *Error target: want no match")
	}
	if errors.Is(e, errors.New("gpucache/wire: MALFORMED: bad thing")) {
		t.Error("a plain error with the same text must not match")
	}
	if errors.Is(e, fmt.Errorf("x: %w", &wire.Error{Code: wire.CodeMalformed})) {
		t.Error("a target that merely wraps an *Error must not match")
	}

	if got := wire.ErrCode(wrapped); got != wire.CodeMalformed {
		t.Errorf("ErrCode(wrapped) = %s", got)
	}
	if got := wire.ErrCode(errors.New("plain")); got != wire.CodeInternal {
		t.Errorf("ErrCode(plain) = %s, want INTERNAL", got)
	}
	if got := e.Error(); got != "gpucache/wire: MALFORMED: bad thing" {
		t.Errorf("Error() = %q", got)
	}
}

func TestCodes(t *testing.T) {
	names := map[wire.Code]string{
		wire.CodeOK: "OK", wire.CodeBadMagic: "BAD_MAGIC", wire.CodeUnsupportedVersion: "UNSUPPORTED_VERSION",
		wire.CodeUnknownOpcode: "UNKNOWN_OPCODE", wire.CodeFrameTooLarge: "FRAME_TOO_LARGE",
		wire.CodeMalformed: "MALFORMED", wire.CodeBatchTooLarge: "BATCH_TOO_LARGE",
		wire.CodeTooManyInFlight: "TOO_MANY_IN_FLIGHT", wire.CodeInvalidIdentity: "INVALID_IDENTITY",
		wire.CodeTenantMismatch: "TENANT_MISMATCH", wire.CodeHelloRequired: "HELLO_REQUIRED",
		wire.CodePayloadTooLarge: "PAYLOAD_TOO_LARGE", wire.CodeShuttingDown: "SHUTTING_DOWN",
		wire.CodeInternal: "INTERNAL", wire.CodeTimeout: "TIMEOUT",
		wire.CodeUnauthenticated: "UNAUTHENTICATED", wire.CodeDenied: "DENIED",
		wire.CodeRateLimited: "RATE_LIMITED", wire.CodeReplay: "REPLAY", wire.CodeWrongEpoch: "WRONG_EPOCH",
		wire.CodeRegion: "REGION",
	}
	for c := wire.Code(0); c <= 21; c++ {
		want, known := names[c]
		if !known {
			want = fmt.Sprintf("CODE(%d)", c)
		}
		if c.String() != want {
			t.Errorf("Code(%d).String() = %q, want %q", c, c, want)
		}
		if fatal := c == wire.CodeBadMagic || c == wire.CodeFrameTooLarge; c.Fatal() != fatal {
			t.Errorf("%s.Fatal() = %v", c, c.Fatal())
		}
	}
	if len(names) != int(wire.CodeMax)+1 {
		t.Errorf("table covers %d codes", len(names))
	}
	for op := wire.Opcode(0); op < 20; op++ {
		if known := op >= 1 && op <= 18; op.Known() != known {
			t.Errorf("%s.Known() = %v", op, op.Known())
		}
	}
	if wire.OpPing.String() != "PING" || wire.Opcode(99).String() != "OP(99)" {
		t.Errorf("Opcode strings: %s %s", wire.OpPing, wire.Opcode(99))
	}
	if wire.StatusBusy.String() != "BUSY" || wire.StatusAborted.String() != "ABORTED" ||
		wire.StatusKeyMismatch.String() != "KEY_MISMATCH" || wire.StatusReadOnly.String() != "READ_ONLY" || wire.StatusFault.String() != "FAULT" || wire.Status(14).String() != "STATUS(14)" {
		t.Errorf("Status strings: %s %s %s %s %s", wire.StatusBusy, wire.StatusKeyMismatch, wire.StatusReadOnly, wire.StatusFault, wire.Status(14))
	}
}

func TestErrorBody(t *testing.T) {
	e := &wire.Error{Code: wire.CodeTenantMismatch, Message: "namespace tenant \"b\" is not the session tenant \"a\""}
	b := e.AppendTo(nil)
	if b[0] != 9 || b[1] != 0 || int(b[2])|int(b[3])<<8 != len(e.Message) {
		t.Fatalf("layout: % x", b[:4])
	}
	got, err := wire.DecodeError(b)
	if err != nil || *got != *e {
		t.Fatalf("DecodeError = %+v, %v", got, err)
	}
	// The encoder truncates a long message to MaxStringLen.
	long := &wire.Error{Code: wire.CodeInternal, Message: strings.Repeat("m", wire.MaxStringLen+50)}
	got, err = wire.DecodeError(long.AppendTo(nil))
	if err != nil || got.Message != long.Message[:wire.MaxStringLen] {
		t.Fatalf("long message: %d bytes, %v", len(got.Message), err)
	}
	// Unknown codes decode (a newer peer may send them).
	got, err = wire.DecodeError((&wire.Error{Code: 999}).AppendTo(nil))
	if err != nil || got.Code != 999 || got.Code.Fatal() {
		t.Fatalf("unknown code: %+v, %v", got, err)
	}
	for _, bad := range [][]byte{nil, {5}, {5, 0, 1}, {5, 0, 1, 0}, append(e.AppendTo(nil), 0),
		{5, 0, 0x01, 0x01}} { // 257-byte message
		_, err := wire.DecodeError(bad)
		wantCode(t, err, wire.CodeMalformed)
	}
}

func TestHelloAuthSection(t *testing.T) {
	base := (&wire.HelloRequest{MinVersion: 1, MaxVersion: 1, Tenant: "a"}).AppendTo(nil)
	withAuth := func(kind byte, cred []byte) []byte {
		b := append(bytes.Clone(base), kind, byte(len(cred)), byte(len(cred)>>8))
		return append(b, cred...)
	}
	for _, tc := range []struct {
		name string
		b    []byte
		ok   bool
	}{
		{"none", withAuth(0, nil), true},
		{"bearer", withAuth(1, []byte("secret")), true},
		{"bearer at max", withAuth(1, bytes.Repeat([]byte{'s'}, wire.MaxCredentialLen)), true},
		{"bearer over max", withAuth(1, bytes.Repeat([]byte{'s'}, wire.MaxCredentialLen+1)), false},
		{"bearer empty", withAuth(1, nil), false},
		{"none with credential", withAuth(0, []byte("x")), false},
		{"unknown kind", withAuth(2, []byte("x")), false},
		{"kind without length", append(bytes.Clone(base), 1), false},
		{"short credential", withAuth(1, []byte("secret"))[:len(base)+5], false},
	} {
		var m wire.HelloRequest
		err := m.Decode(tc.b)
		if (err == nil) != tc.ok {
			t.Errorf("%s: err = %v, want ok=%v", tc.name, err, tc.ok)
			continue
		}
		if err != nil {
			wantCode(t, err, wire.CodeMalformed)
			if strings.Contains(err.Error(), "secret") {
				t.Errorf("%s: error echoes the credential: %v", tc.name, err)
			}
		} else if !m.HasAuth {
			t.Errorf("%s: HasAuth false", tc.name)
		}
	}
	var m wire.HelloRequest
	if err := m.Decode(base); err != nil || m.HasAuth {
		t.Fatalf("legacy HELLO: HasAuth=%v err=%v", m.HasAuth, err)
	}
}

func TestMutatingOps(t *testing.T) {
	want := map[wire.Opcode]bool{wire.OpPut: true, wire.OpDelete: true, wire.OpAcquire: true, wire.OpFillCommit: true, wire.OpFillAbort: true, wire.OpPutOpaque: true, wire.OpPutFrom: true, wire.OpPutOpaqueFrom: true}
	for op := wire.Opcode(0); op <= wire.OpMax+1; op++ {
		if op.Mutating() != want[op] {
			t.Errorf("%s.Mutating() = %v", op, op.Mutating())
		}
	}
}

func TestErrorRetryAfter(t *testing.T) {
	e := &wire.Error{Code: wire.CodeRateLimited, Message: "m", RetryAfter: 1500 * time.Microsecond}
	got, err := wire.DecodeError(e.AppendTo(nil))
	if err != nil || got.RetryAfter != 2*time.Millisecond {
		t.Fatalf("retry-after rounds up to whole ms: got %v err %v", got, err)
	}
	zero := append((&wire.Error{Code: wire.CodeRateLimited, Message: "m"}).AppendTo(nil), 0, 0, 0, 0)
	if _, err := wire.DecodeError(zero); err == nil {
		t.Fatal("zero trailing retry-after accepted")
	}
}
