package wire_test

import (
	"bytes"
	"encoding/binary"
	"math"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/gpucache/gpucache/api/identity"
	"github.com/gpucache/gpucache/api/wire"
)

const maxBatch = wire.DefaultMaxBatch

// sampleNamespace returns a real canonical namespace encoding.
func sampleNamespace(t testing.TB) []byte {
	t.Helper()
	ns := identity.Namespace{
		Tenant: "acme", TrustDomain: "prod", ModelID: "meta-llama/Llama-3.1-8B-Instruct",
		ConfigRevision: "0e9e39f", TokenizerRevision: "5f0b02c", RoPE: "llama3", DType: "bf16",
		Quantization: "none",
		Layout: identity.Layout{Format: "vllm-nhd", TPSize: 1, PPSize: 1, LayerCount: 32,
			KVHeads: 8, HeadDim: 128, BlockTokens: 16},
	}
	b, err := ns.Canonical()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func sampleKeys(n int) []wire.Key {
	keys := make([]wire.Key, n)
	for i := range keys {
		for j := range keys[i] {
			keys[i][j] = byte(i*31 + j)
		}
	}
	return keys
}

// message is any message type: it encodes itself, and decode parses a fresh
// value from b, returning it for comparison.
type message interface {
	AppendTo([]byte) []byte
}

// roundTripCase is one message with its decoder.
type roundTripCase struct {
	name   string
	msg    message
	decode func(b []byte) (message, error)
}

// sampleTokens returns n deterministic token ids.
func sampleTokens(n int, seed uint32) []uint32 {
	ids := make([]uint32, n)
	for i := range ids {
		ids[i] = seed*1000 + uint32(i)*7
	}
	return ids
}

func sampleMessages(t testing.TB) []roundTripCase {
	ns := sampleNamespace(t)
	keys := sampleKeys(3)
	decHelloReq := func(b []byte) (message, error) { m := new(wire.HelloRequest); return m, m.Decode(b) }
	decHelloResp := func(b []byte) (message, error) { m := new(wire.HelloResponse); return m, m.Decode(b) }
	decLookupReq := func(b []byte) (message, error) { m := new(wire.LookupRequest); return m, m.Decode(b, maxBatch) }
	decLookupResp := func(b []byte) (message, error) { m := new(wire.LookupResponse); return m, m.Decode(b) }
	decGetReq := func(b []byte) (message, error) { m := new(wire.GetRequest); return m, m.Decode(b, maxBatch) }
	decGetResp := func(b []byte) (message, error) {
		m := new(wire.GetResponse)
		_, err := m.Decode(b, maxBatch)
		return m, err
	}
	decPutReq := func(b []byte) (message, error) {
		m := new(wire.PutRequest)
		_, err := m.Decode(b, maxBatch)
		return m, err
	}
	decStatus := func(b []byte) (message, error) { m := new(wire.StatusResponse); return m, m.Decode(b, maxBatch) }
	decDelete := func(b []byte) (message, error) { m := new(wire.DeleteRequest); return m, m.Decode(b, maxBatch) }
	decStat := func(b []byte) (message, error) { m := new(wire.StatResponse); return m, m.Decode(b) }
	decError := func(b []byte) (message, error) { return wire.DecodeError(b) }
	decAcqReq := func(b []byte) (message, error) { m := new(wire.AcquireRequest); return m, m.Decode(b, maxBatch) }
	decAcqResp := func(b []byte) (message, error) { m := new(wire.AcquireResponse); return m, m.Decode(b, maxBatch) }
	decCommit := func(b []byte) (message, error) {
		m := new(wire.FillCommitRequest)
		_, err := m.Decode(b, maxBatch)
		return m, err
	}
	decAbort := func(b []byte) (message, error) { m := new(wire.FillAbortRequest); return m, m.Decode(b, maxBatch) }
	decWaitReq := func(b []byte) (message, error) { m := new(wire.WaitRequest); return m, m.Decode(b, maxBatch) }
	decWaitResp := func(b []byte) (message, error) { m := new(wire.WaitResponse); return m, m.Decode(b, maxBatch) }
	decMembers := func(b []byte) (message, error) { m := new(wire.MembersResponse); return m, m.Decode(b) }
	decRegister := func(b []byte) (message, error) { m := new(wire.RegisterRequest); return m, m.Decode(b) }
	decRegisterResp := func(b []byte) (message, error) { m := new(wire.RegisterResponse); return m, m.Decode(b) }
	decUnregister := func(b []byte) (message, error) { m := new(wire.UnregisterRequest); return m, m.Decode(b) }
	decGetInto := func(b []byte) (message, error) { m := new(wire.GetIntoRequest); return m, m.Decode(b, maxBatch) }
	decGetIntoResp := func(b []byte) (message, error) { m := new(wire.GetIntoResponse); return m, m.Decode(b, maxBatch) }
	decPutFrom := func(b []byte) (message, error) { m := new(wire.PutFromRequest); return m, m.Decode(b, maxBatch) }
	decPutOpaqueFrom := func(b []byte) (message, error) { m := new(wire.PutOpaqueFromRequest); return m, m.Decode(b, maxBatch) }
	tok := wire.FillToken{Fill: 77, Epoch: 3, Turn: 2}
	return []roundTripCase{
		{"AcquireRequest", &wire.AcquireRequest{Namespace: ns, Keys: keys}, decAcqReq},
		{"AcquireResponse", &wire.AcquireResponse{Entries: []wire.AcquireEntry{{Outcome: wire.AcquireHit}, {Outcome: wire.AcquireLead, Token: tok},
			{Outcome: wire.AcquireJoined, Token: wire.FillToken{Fill: 78}}, {Outcome: wire.AcquireDenied}}}, decAcqResp},
		{"FillCommitRequest", &wire.FillCommitRequest{Namespace: ns, Blocks: []wire.FillBlock{
			{Token: tok, Key: keys[0], ValidLength: 16, Len: 300, TokenIDs: sampleTokens(16, 1)},
			{Token: tok, Key: keys[1], Parent: keys[0], ValidLength: 7, Len: 12, Position: 16, TokenIDs: sampleTokens(7, 2)}}}, decCommit},
		{"FillAbortRequest", &wire.FillAbortRequest{Namespace: ns, Tokens: []wire.FillToken{tok, {Fill: 1, Epoch: 1, Turn: 1}}}, decAbort},
		{"WaitRequest", &wire.WaitRequest{Namespace: ns, TimeoutMillis: 2500, Fills: []uint64{78, 79}}, decWaitReq},
		{"WaitResponse", &wire.WaitResponse{Entries: []wire.WaitEntry{{Kind: wire.NoticeFinished}, {Kind: wire.NoticePromoted, Token: tok},
			{Kind: wire.NoticeFailed}, {Kind: wire.NoticeFenced}, {Kind: wire.NoticePending}}}, decWaitResp},
		{"HelloRequest", &wire.HelloRequest{MinVersion: 1, MaxVersion: 1, Tenant: "acme", Client: "vllm-connector/0.1"}, decHelloReq},
		{"HelloRequest/range", &wire.HelloRequest{MinVersion: 1, MaxVersion: 3, Tenant: "t", Client: strings.Repeat("c", wire.MaxStringLen)}, decHelloReq},
		{"HelloRequest", &wire.HelloRequest{MinVersion: 1, MaxVersion: 1, Client: "c", HasAuth: true, Auth: wire.AuthBearer,
			Credential: []byte("gpc_0123456789abcdef0123456789abcdef")}, decHelloReq},
		{"HelloRequest", &wire.HelloRequest{MinVersion: 1, MaxVersion: 1, Tenant: "acme", HasAuth: true, Auth: wire.AuthNone, Credential: []byte{}}, decHelloReq},
		{"HelloResponse", &wire.HelloResponse{Version: 1, Server: "gpucached", Limits: wire.DefaultLimits()}, decHelloResp},
		{"HelloResponse", &wire.HelloResponse{Version: 1, Server: "gpucached", Limits: wire.DefaultLimits(),
			HasSession: true, Tenant: "acme", Session: wire.SessionStampRequired}, decHelloResp},
		{"LookupRequest", &wire.LookupRequest{Namespace: ns, LeaseTTLMillis: 5000, Keys: keys}, decLookupReq},
		{"LookupResponse", &wire.LookupResponse{Hits: 2, LeaseID: 0xdeadbeef01, LeaseTTLMillis: 5000}, decLookupResp},
		{"GetRequest", &wire.GetRequest{Namespace: ns, LeaseID: 0xdeadbeef01, Keys: keys}, decGetReq},
		{"GetResponse", &wire.GetResponse{Blocks: []wire.BlockMeta{{Status: wire.StatusHit, Len: 100}, {Status: wire.StatusHit, Len: 0}, {Status: wire.StatusMiss}}}, decGetResp},
		{"PutRequest", &wire.PutRequest{Namespace: ns, Blocks: []wire.PutBlock{
			{Key: keys[0], ValidLength: 16, Len: 300, TokenIDs: sampleTokens(16, 1)},
			{Key: keys[1], Parent: keys[0], ValidLength: 7, Len: 120, Position: 16, TokenIDs: sampleTokens(9, 2)},
		}}, decPutReq},
		{"StatusResponse", &wire.StatusResponse{Statuses: []wire.Status{wire.StatusStored, wire.StatusExists,
			wire.StatusTooLarge, wire.StatusNoSpace, wire.StatusDeleted, wire.StatusBusy, wire.StatusMiss, wire.StatusHit,
			wire.StatusFenced, wire.StatusNotLeader, wire.StatusAborted, wire.StatusKeyMismatch, wire.StatusReadOnly, wire.StatusFault}}, decStatus},
		{"DeleteRequest", &wire.DeleteRequest{Namespace: ns, Keys: keys}, decDelete},
		{"StatResponse", &wire.StatResponse{Entries: []wire.StatEntry{{Name: "hits", Value: 1}, {Name: "bytes_cached", Value: math.MaxUint64}}}, decStat},
		{"Error", &wire.Error{Code: wire.CodeTenantMismatch, Message: "tenant mismatch"}, decError},
		{"Error", &wire.Error{Code: wire.CodeRateLimited, Message: "over quota", RetryAfter: 250 * time.Millisecond}, decError},
		{"Error", &wire.Error{Code: wire.CodeWrongEpoch, Message: "not the owner", Epoch: 42}, decError},
		{"MembersResponse", &wire.MembersResponse{Epoch: 7, Members: []wire.MemberInfo{
			{ID: "node-a", Addr: "10.0.0.1:7070", FaultDomain: "rack1", ProtoVersion: 2, CapacityBytes: 64 << 30},
			{ID: "node-b", Addr: "10.0.0.2:7070", FaultDomain: "rack2", ProtoVersion: 1, CapacityBytes: 32 << 30, Flags: wire.MemberDraining}}}, decMembers},
		{"RegisterRequest", &wire.RegisterRequest{Region: 1, Length: 64 << 20}, decRegister},
		{"RegisterResponse", &wire.RegisterResponse{Mode: wire.RegionGuarded}, decRegisterResp},
		{"UnregisterRequest", &wire.UnregisterRequest{Region: 1}, decUnregister},
		{"GetIntoRequest", &wire.GetIntoRequest{Namespace: ns, LeaseID: 0xdeadbeef01, Region: 1, Keys: keys,
			Slots: []wire.Slot{{Offset: 0, Len: 4096}, {Offset: 4096, Len: 4096}, {Offset: 1 << 40, Len: 1}}}, decGetInto},
		{"GetIntoResponse", &wire.GetIntoResponse{Blocks: []wire.BlockMeta{{Status: wire.StatusHit, Len: 4096},
			{Status: wire.StatusMiss}, {Status: wire.StatusTooLarge, Len: 8192}, {Status: wire.StatusFault}}}, decGetIntoResp},
		{"PutFromRequest", &wire.PutFromRequest{Region: 2, Offsets: []uint64{0, 300}, Put: wire.PutRequest{Namespace: ns, Blocks: []wire.PutBlock{
			{Key: keys[0], ValidLength: 16, Len: 300, TokenIDs: sampleTokens(16, 1)},
			{Key: keys[1], Parent: keys[0], ValidLength: 7, Len: 120, Position: 16, TokenIDs: sampleTokens(9, 2)},
		}}}, decPutFrom},
		{"PutOpaqueFromRequest", &wire.PutOpaqueFromRequest{Region: 3, Offsets: []uint64{0, 1 << 30}, Put: wire.PutOpaqueRequest{Namespace: ns, Blocks: []wire.OpaqueBlock{
			{Key: keys[0], Name: []byte("chunk-1"), Len: 4096}, {Key: keys[1], Name: []byte("chunk-2"), Len: 1}}}}, decPutOpaqueFrom},
	}
}

func TestRoundTrip(t *testing.T) {
	for _, tc := range sampleMessages(t) {
		t.Run(tc.name, func(t *testing.T) {
			b := tc.msg.AppendTo(nil)
			got, err := tc.decode(b)
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			if !reflect.DeepEqual(got, tc.msg) {
				t.Fatalf("decode(encode(m)) = %+v\nwant %+v", got, tc.msg)
			}
			if again := got.AppendTo(nil); !bytes.Equal(again, b) {
				t.Fatalf("encode(decode(b)) != b")
			}
			// AppendTo appends.
			if pre := tc.msg.AppendTo([]byte("ab")); !bytes.Equal(pre, append([]byte("ab"), b...)) {
				t.Fatalf("AppendTo does not append")
			}
			// Every strict prefix and one trailing byte are rejected, except
			// that a message with an optional trailing extension (HELLO,
			// error bodies; ADR 0006) decodes without it: such a prefix must
			// then be the canonical encoding of the shorter message.
			for n := range len(b) {
				if m, err := tc.decode(b[:n]); err == nil && optionalTail[tc.name] && bytes.Equal(m.AppendTo(nil), b[:n]) {
					continue
				} else if err == nil {
					t.Fatalf("prefix of %d/%d bytes decoded", n, len(b))
				} else {
					wantCode(t, err, wire.CodeMalformed)
				}
			}
			_, err = tc.decode(append(bytes.Clone(b), 0))
			wantCode(t, err, wire.CodeMalformed)
		})
	}
}

// optionalTail names the messages with an optional trailing extension.
var optionalTail = map[string]bool{"HelloRequest": true, "HelloResponse": true, "Error": true}

// TestEmptyMessages round-trips messages with empty lists and strings; they
// decode to nil or empty slices, so compare re-encoded bytes.
func TestEmptyMessages(t *testing.T) {
	empty := []message{
		&wire.HelloRequest{}, &wire.HelloResponse{}, &wire.LookupRequest{}, &wire.LookupResponse{},
		&wire.GetRequest{}, &wire.GetResponse{}, &wire.PutRequest{}, &wire.StatusResponse{},
		&wire.DeleteRequest{}, &wire.StatResponse{}, &wire.Error{}, &wire.MembersResponse{},
	}
	cases := sampleMessages(t)
	decoders := map[string]func([]byte) (message, error){}
	for _, c := range cases {
		decoders[reflect.TypeOf(c.msg).Elem().Name()] = c.decode
	}
	for _, m := range empty {
		name := reflect.TypeOf(m).Elem().Name()
		b := m.AppendTo(nil)
		got, err := decoders[name](b)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !bytes.Equal(got.AppendTo(nil), b) {
			t.Fatalf("%s: not canonical", name)
		}
	}
}

func TestBodyLayouts(t *testing.T) {
	u32 := func(v uint32) []byte { return binary.LittleEndian.AppendUint32(nil, v) }
	u64 := func(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	k := sampleKeys(2)
	ns := []byte("NS")
	cases := []struct {
		name string
		msg  message
		want []byte
	}{
		{"HelloRequest", &wire.HelloRequest{MinVersion: 1, MaxVersion: 2, Tenant: "ab", Client: "c"},
			[]byte{1, 2, 2, 0, 'a', 'b', 1, 0, 'c'}},
		{"HelloResponse", &wire.HelloResponse{Version: 1, Server: "s", Limits: wire.Limits{MaxFrame: 1, MaxBatch: 2, MaxInFlight: 3, MaxPayload: 4}},
			cat([]byte{1, 1, 0, 's'}, u32(1), u32(2), u32(3), u32(4))},
		{"LookupRequest", &wire.LookupRequest{Namespace: ns, LeaseTTLMillis: 7, Keys: k},
			cat(u32(2), ns, u32(7), u32(2), k[0][:], k[1][:])},
		{"LookupResponse", &wire.LookupResponse{Hits: 1, LeaseID: 2, LeaseTTLMillis: 3}, cat(u32(1), u64(2), u32(3))},
		{"GetRequest", &wire.GetRequest{Namespace: ns, LeaseID: 5, Keys: k[:1]}, cat(u32(2), ns, u64(5), u32(1), k[0][:])},
		{"GetResponse", &wire.GetResponse{Blocks: []wire.BlockMeta{{wire.StatusHit, 9}, {wire.StatusMiss, 0}}},
			cat(u32(2), []byte{0}, u32(9), []byte{1}, u32(0))},
		{"PutRequest", &wire.PutRequest{Namespace: ns, Blocks: []wire.PutBlock{{Key: k[1], Parent: k[0], ValidLength: 2, Len: 8, Position: 16, TokenIDs: []uint32{5, 6, 7}}}},
			cat(u32(2), ns, u32(1), k[1][:], k[0][:], u32(2), u32(8), u64(16), u32(3), u32(5), u32(6), u32(7))},
		{"FillCommitRequest", &wire.FillCommitRequest{Namespace: ns, Blocks: []wire.FillBlock{{Token: wire.FillToken{Fill: 1, Epoch: 2, Turn: 3},
			Key: k[1], Parent: k[0], ValidLength: 1, Len: 8, Position: 32, TokenIDs: []uint32{9}}}},
			cat(u32(2), ns, u32(1), u64(1), u64(2), u32(3), k[1][:], k[0][:], u32(1), u32(8), u64(32), u32(1), u32(9))},
		{"StatusResponse", &wire.StatusResponse{Statuses: []wire.Status{wire.StatusStored, wire.StatusBusy}}, cat(u32(2), []byte{2, 7})},
		{"DeleteRequest", &wire.DeleteRequest{Namespace: ns, Keys: k[:1]}, cat(u32(2), ns, u32(1), k[0][:])},
		{"StatResponse", &wire.StatResponse{Entries: []wire.StatEntry{{"x", 3}}}, cat(u32(1), []byte{1, 0, 'x'}, u64(3))},
		{"Error", &wire.Error{Code: wire.CodeTimeout, Message: "t"}, []byte{14, 0, 1, 0, 't'}},
		{"Error", &wire.Error{Code: wire.CodeWrongEpoch, Message: "t", Epoch: 9}, cat([]byte{19, 0, 1, 0, 't'}, u64(9))},
		{"MembersResponse", &wire.MembersResponse{Epoch: 3, Members: []wire.MemberInfo{{ID: "a", Addr: "b", FaultDomain: "c", ProtoVersion: 2, CapacityBytes: 5, Flags: wire.MemberDraining}}},
			cat(u64(3), u32(1), []byte{1, 0, 'a', 1, 0, 'b', 1, 0, 'c', 2}, u64(5), []byte{1})},
	}
	for _, tc := range cases {
		if got := tc.msg.AppendTo(nil); !bytes.Equal(got, tc.want) {
			t.Errorf("%s:\n got % x\nwant % x", tc.name, got, tc.want)
		}
	}
}

// countedBody builds a body whose element count sits after prefix.
func countedBody(prefix []byte, count uint32, rest int) []byte {
	b := binary.LittleEndian.AppendUint32(bytes.Clone(prefix), count)
	return append(b, make([]byte, rest)...)
}

// countedDecoders are the decoders that read an element count, with the
// bytes that precede the count and the limit that applies.
func countedDecoders() []struct {
	name   string
	prefix []byte
	limit  uint32
	decode func(b []byte, limit uint32) error
} {
	nsPrefix := binary.LittleEndian.AppendUint32(nil, 0) // empty namespace blob
	return []struct {
		name   string
		prefix []byte
		limit  uint32
		decode func(b []byte, limit uint32) error
	}{
		{"LookupRequest", append(bytes.Clone(nsPrefix), 0, 0, 0, 0), maxBatch,
			func(b []byte, l uint32) error { return new(wire.LookupRequest).Decode(b, l) }},
		{"GetRequest", append(bytes.Clone(nsPrefix), make([]byte, 8)...), maxBatch,
			func(b []byte, l uint32) error { return new(wire.GetRequest).Decode(b, l) }},
		{"GetResponse", nil, maxBatch,
			func(b []byte, l uint32) error { _, err := new(wire.GetResponse).Decode(b, l); return err }},
		{"PutRequest", nsPrefix, maxBatch,
			func(b []byte, l uint32) error { _, err := new(wire.PutRequest).Decode(b, l); return err }},
		{"StatusResponse", nil, maxBatch,
			func(b []byte, l uint32) error { return new(wire.StatusResponse).Decode(b, l) }},
		{"DeleteRequest", nsPrefix, maxBatch,
			func(b []byte, l uint32) error { return new(wire.DeleteRequest).Decode(b, l) }},
		{"StatResponse", nil, wire.MaxStatEntries,
			func(b []byte, _ uint32) error { return new(wire.StatResponse).Decode(b) }},
	}
}

func TestBatchTooLarge(t *testing.T) {
	for _, d := range countedDecoders() {
		t.Run(d.name, func(t *testing.T) {
			// One over the limit, with enough bytes for every element: the
			// limit, not the buffer, is what rejects it.
			b := countedBody(d.prefix, d.limit+1, int(d.limit+1)*80)
			wantCode(t, d.decode(b, d.limit), wire.CodeBatchTooLarge)
			wantCode(t, d.decode(countedBody(d.prefix, math.MaxUint32, 4), d.limit), wire.CodeBatchTooLarge)
		})
	}
	t.Run("custom limit", func(t *testing.T) {
		m := &wire.GetRequest{Keys: sampleKeys(5)}
		b := m.AppendTo(nil)
		wantCode(t, new(wire.GetRequest).Decode(b, 4), wire.CodeBatchTooLarge)
		if err := new(wire.GetRequest).Decode(b, 5); err != nil {
			t.Fatal(err)
		}
	})
}

// TestCountsCheckedBeforeAllocation feeds tiny bodies that claim huge counts,
// with a limit that does not stop them, and checks that the decoder rejects
// them without allocating for the claimed elements.
func TestCountsCheckedBeforeAllocation(t *testing.T) {
	for _, d := range countedDecoders() {
		t.Run(d.name, func(t *testing.T) {
			// A 10-byte remainder: the count plus 6 bytes.
			b := countedBody(d.prefix, 1<<31, 6)
			limit := uint32(math.MaxUint32)
			if d.name == "StatResponse" {
				// The STAT limit is fixed; a count under it still must fit.
				b = countedBody(d.prefix, wire.MaxStatEntries, 6)
			}
			wantCode(t, d.decode(b, limit), wire.CodeMalformed)
			const runs = 50
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			for range runs {
				_ = d.decode(b, limit)
			}
			runtime.ReadMemStats(&after)
			if perRun := (after.TotalAlloc - before.TotalAlloc) / runs; perRun > 1024 {
				t.Fatalf("decoder allocated %d bytes per rejected 10-byte body", perRun)
			}
		})
	}
}

func TestGetResponseStatuses(t *testing.T) {
	for s := wire.Status(0); s < 14; s++ {
		for _, n := range []uint32{0, 1} {
			m := &wire.GetResponse{Blocks: []wire.BlockMeta{{Status: s, Len: n}}}
			_, err := new(wire.GetResponse).Decode(m.AppendTo(nil), maxBatch)
			ok := s == wire.StatusHit || (s == wire.StatusMiss && n == 0) // a GET answer has only HIT and MISS
			if ok && err != nil {
				t.Errorf("%s len %d: %v", s, n, err)
			}
			if !ok {
				if err == nil {
					t.Errorf("%s len %d: accepted", s, n)
					continue
				}
				wantCode(t, err, wire.CodeMalformed)
			}
		}
	}
	m := &wire.GetResponse{Blocks: []wire.BlockMeta{{wire.StatusHit, 10}, {wire.StatusMiss, 0}, {wire.StatusHit, math.MaxUint32}}}
	total, err := new(wire.GetResponse).Decode(m.AppendTo(nil), maxBatch)
	if err != nil || total != 10+math.MaxUint32 {
		t.Fatalf("payload total = %d, %v", total, err)
	}
}

func TestStatusResponseRejectsUnknownStatus(t *testing.T) {
	b := (&wire.StatusResponse{Statuses: []wire.Status{wire.StatusStored, wire.StatusFault + 1}}).AppendTo(nil)
	wantCode(t, new(wire.StatusResponse).Decode(b, maxBatch), wire.CodeMalformed)
}

// TestStatusResponseReadOnlyByVersion: READ_ONLY (version 4) decodes in a
// version-4 session and is malformed in older ones, whose servers never
// send it; the other statuses decode in every version.
func TestStatusResponseReadOnlyByVersion(t *testing.T) {
	if wire.StatusReadOnly.Since() != wire.Version4 || wire.StatusNoSpace.Since() != wire.Version1 || wire.StatusFault.Since() != wire.Version5 {
		t.Fatalf("Since: READ_ONLY %d, NO_SPACE %d; VersionMax %d", wire.StatusReadOnly.Since(), wire.StatusNoSpace.Since(), wire.VersionMax)
	}
	ro := (&wire.StatusResponse{Statuses: []wire.Status{wire.StatusStored, wire.StatusReadOnly}}).AppendTo(nil)
	ns := (&wire.StatusResponse{Statuses: []wire.Status{wire.StatusStored, wire.StatusNoSpace}}).AppendTo(nil)
	for v := wire.Version1; v <= wire.VersionMax; v++ {
		var m wire.StatusResponse
		err := m.DecodeVersion(ro, maxBatch, v)
		if v >= wire.Version4 {
			if err != nil || m.Statuses[1] != wire.StatusReadOnly {
				t.Fatalf("version %d: %v %v, want READ_ONLY", v, m.Statuses, err)
			}
		} else {
			wantCode(t, err, wire.CodeMalformed)
		}
		if err := m.DecodeVersion(ns, maxBatch, v); err != nil || m.Statuses[1] != wire.StatusNoSpace {
			t.Fatalf("version %d: %v %v, want NO_SPACE", v, m.Statuses, err)
		}
	}
	if err := new(wire.StatusResponse).Decode(ro, maxBatch); err != nil {
		t.Fatalf("Decode (VersionMax) refused READ_ONLY: %v", err)
	}
}

func TestHelloRequestVersionRange(t *testing.T) {
	b := (&wire.HelloRequest{MinVersion: 2, MaxVersion: 1, Tenant: "t"}).AppendTo(nil)
	wantCode(t, new(wire.HelloRequest).Decode(b), wire.CodeMalformed)
}

func TestLongStringsAndBlobs(t *testing.T) {
	long := strings.Repeat("s", wire.MaxStringLen+1)
	b := (&wire.HelloRequest{MinVersion: 1, MaxVersion: 1, Tenant: long}).AppendTo(nil)
	wantCode(t, new(wire.HelloRequest).Decode(b), wire.CodeMalformed)
	b = (&wire.StatResponse{Entries: []wire.StatEntry{{Name: long}}}).AppendTo(nil)
	wantCode(t, new(wire.StatResponse).Decode(b), wire.CodeMalformed)

	ns := make([]byte, wire.MaxNamespaceLen)
	if err := new(wire.GetRequest).Decode((&wire.GetRequest{Namespace: ns}).AppendTo(nil), maxBatch); err != nil {
		t.Fatalf("namespace at limit: %v", err)
	}
	ns = append(ns, 0)
	wantCode(t, new(wire.GetRequest).Decode((&wire.GetRequest{Namespace: ns}).AppendTo(nil), maxBatch), wire.CodeMalformed)
	// A blob length past the end of the body.
	wantCode(t, new(wire.DeleteRequest).Decode(countedBody(nil, 100, 10), maxBatch), wire.CodeMalformed)
}

// TestPutBody assembles a whole PUT body (u32 table length | table |
// payloads) and parses it the way a server does.
func TestPutBody(t *testing.T) {
	ns := sampleNamespace(t)
	keys := sampleKeys(3)
	req := &wire.PutRequest{Namespace: ns, Blocks: []wire.PutBlock{
		{Key: keys[0], ValidLength: 16, Len: 5, TokenIDs: sampleTokens(16, 1)},
		{Key: keys[1], Parent: keys[0], ValidLength: 16, Len: 0, Position: 16, TokenIDs: sampleTokens(16, 2)},
		{Key: keys[2], Parent: keys[1], ValidLength: 3, Len: 7, Position: 32, TokenIDs: sampleTokens(3, 3)},
	}}
	payloads := []byte("aaaaabbbbbbb")
	body := append(wire.AppendMeta(nil, req.AppendTo(nil)), payloads...)
	bodyLen := uint32(len(body))

	metaLen, err := wire.MetaLen([4]byte(body[:4]), bodyLen)
	if err != nil {
		t.Fatal(err)
	}
	var got wire.PutRequest
	total, err := got.Decode(body[4:4+metaLen], maxBatch)
	if err != nil {
		t.Fatal(err)
	}
	if total != 12 {
		t.Fatalf("payload total = %d, want 12", total)
	}
	if err := wire.CheckPayload(total, bodyLen, metaLen); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(&got, req) {
		t.Fatalf("decoded %+v", got)
	}
	// One payload byte short or long.
	wantCode(t, wire.CheckPayload(total, bodyLen-1, metaLen), wire.CodeMalformed)
	wantCode(t, wire.CheckPayload(total, bodyLen+1, metaLen), wire.CodeMalformed)
	// GET response bodies use the same framing.
	resp := &wire.GetResponse{Blocks: []wire.BlockMeta{{wire.StatusHit, 3}, {wire.StatusMiss, 0}}}
	gbody := append(wire.AppendMeta(nil, resp.AppendTo(nil)), "xyz"...)
	ml, err := wire.MetaLen([4]byte(gbody[:4]), uint32(len(gbody)))
	if err != nil {
		t.Fatal(err)
	}
	gt, err := new(wire.GetResponse).Decode(gbody[4:4+ml], maxBatch)
	if err != nil || wire.CheckPayload(gt, uint32(len(gbody)), ml) != nil {
		t.Fatalf("GET body: total %d, %v", gt, err)
	}
}

func TestMetaLen(t *testing.T) {
	le := func(v uint32) [4]byte { return [4]byte(binary.LittleEndian.AppendUint32(nil, v)) }
	cases := []struct {
		table, body uint32
		ok          bool
	}{
		{0, 4, true},
		{10, 14, true},  // table only, no payload
		{10, 100, true}, // payload follows
		{11, 14, false}, // table past the end
		{0, 3, false},   // no room for the length itself
		{0, 0, false},   // empty body
		{math.MaxUint32, math.MaxUint32, false},
		{math.MaxUint32 - 4, math.MaxUint32, true},
	}
	for _, c := range cases {
		n, err := wire.MetaLen(le(c.table), c.body)
		if c.ok && (err != nil || n != c.table) {
			t.Errorf("MetaLen(%d, %d) = %d, %v", c.table, c.body, n, err)
		}
		if !c.ok {
			wantCode(t, err, wire.CodeMalformed)
		}
	}
}

func TestCheckPayload(t *testing.T) {
	cases := []struct {
		total         uint64
		body, metaLen uint32
		ok            bool
	}{
		{0, 4, 0, true},
		{10, 24, 10, true},
		{9, 24, 10, false},
		{11, 24, 10, false},
		{0, 3, 0, false},   // table length does not fit
		{0, 10, 20, false}, // metaLen past the body: no underflow
		{math.MaxUint64, 10, 20, false},
		{math.MaxUint32 - 4, math.MaxUint32, 0, true},
		{math.MaxUint32 + 1, math.MaxUint32, 0, false},
	}
	for _, c := range cases {
		err := wire.CheckPayload(c.total, c.body, c.metaLen)
		if c.ok && err != nil {
			t.Errorf("CheckPayload(%d, %d, %d) = %v", c.total, c.body, c.metaLen, err)
		}
		if !c.ok {
			wantCode(t, err, wire.CodeMalformed)
		}
	}
}

func TestDecodeAliasesNamespace(t *testing.T) {
	// Documented ownership: Namespace aliases the input; keys are copied.
	b := (&wire.GetRequest{Namespace: []byte("ns"), Keys: sampleKeys(1)}).AppendTo(nil)
	var m wire.GetRequest
	if err := m.Decode(b, maxBatch); err != nil {
		t.Fatal(err)
	}
	b[4] = 'X'
	b[len(b)-1] ^= 0xff
	if string(m.Namespace) != "Xs" {
		t.Errorf("Namespace = %q; documented to alias the input", m.Namespace)
	}
	if m.Keys[0] != sampleKeys(1)[0] {
		t.Errorf("keys alias the input")
	}
}

// TestDecodeReusesSlices pins the reuse contract of the request decoders:
// Keys and Blocks reuse the message's backing array when it is large enough,
// and the result is the same as decoding into a fresh message.
func TestDecodeReusesSlices(t *testing.T) {
	keys := sampleKeys(3)
	b := (&wire.GetRequest{Namespace: []byte("ns"), Keys: keys}).AppendTo(nil)
	m := wire.GetRequest{Keys: make([]wire.Key, 8)}
	backing := &m.Keys[:1][0]
	if err := m.Decode(b, maxBatch); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(m.Keys, keys) || &m.Keys[0] != backing {
		t.Fatalf("keys %v; reused backing array: %v", m.Keys, &m.Keys[0] == backing)
	}
	// An empty list decodes to nil, whatever the message held.
	if err := m.Decode((&wire.GetRequest{}).AppendTo(nil), maxBatch); err != nil || m.Keys != nil {
		t.Fatalf("empty list: %v, %v", m.Keys, err)
	}

	put := &wire.PutRequest{Namespace: []byte("ns"), Blocks: []wire.PutBlock{{Key: keys[0], ValidLength: 1, Len: 2, TokenIDs: []uint32{4, 5}}}}
	p := wire.PutRequest{Blocks: []wire.PutBlock{{Key: keys[2], Parent: keys[1], ValidLength: 9, Len: 9, Position: 3, TokenIDs: make([]uint32, 9, 16)}, {}}}
	ids := &p.Blocks[0].TokenIDs[0]
	if _, err := p.Decode(put.AppendTo(nil), maxBatch); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(&p, put) {
		t.Fatalf("decoding into a used PutRequest: %+v", p.Blocks)
	}
	if &p.Blocks[0].TokenIDs[0] != ids {
		t.Fatalf("TokenIDs did not reuse the block's backing array")
	}
}

// TestTokenIDLimits checks the identity tail of PUT and FILL_COMMIT entries:
// 1..MaxBlockTokens token ids per block, a valid length within them, and at
// most MaxRequestTokens token ids per request (BATCH_TOO_LARGE).
func TestTokenIDLimits(t *testing.T) {
	k := sampleKeys(2)
	put := func(blocks ...wire.PutBlock) error {
		_, err := new(wire.PutRequest).Decode((&wire.PutRequest{Blocks: blocks}).AppendTo(nil), maxBatch)
		return err
	}
	commit := func(blocks ...wire.FillBlock) error {
		_, err := new(wire.FillCommitRequest).Decode((&wire.FillCommitRequest{Blocks: blocks}).AppendTo(nil), maxBatch)
		return err
	}
	if err := put(wire.PutBlock{Key: k[0], ValidLength: wire.MaxBlockTokens, TokenIDs: make([]uint32, wire.MaxBlockTokens)}); err != nil {
		t.Fatalf("block of MaxBlockTokens: %v", err)
	}
	wantCode(t, put(wire.PutBlock{Key: k[0]}), wire.CodeMalformed)                                                                      // no token ids
	wantCode(t, put(wire.PutBlock{Key: k[0], ValidLength: 1, TokenIDs: make([]uint32, wire.MaxBlockTokens+1)}), wire.CodeMalformed)     // too many
	wantCode(t, put(wire.PutBlock{Key: k[0], ValidLength: 3, TokenIDs: []uint32{1, 2}}), wire.CodeMalformed)                            // valid > n
	wantCode(t, commit(wire.FillBlock{Key: k[0], ValidLength: 3, TokenIDs: []uint32{1, 2}}), wire.CodeMalformed)                        // valid > n
	wantCode(t, commit(wire.FillBlock{Key: k[0], ValidLength: 1, TokenIDs: make([]uint32, wire.MaxBlockTokens+1)}), wire.CodeMalformed) // too many
	if err := commit(wire.FillBlock{Key: k[0], ValidLength: 2, TokenIDs: []uint32{1, 2}}); err != nil {
		t.Fatal(err)
	}

	// Over the request total: BATCH_TOO_LARGE, for PUT and FILL_COMMIT.
	n := wire.MaxRequestTokens/wire.MaxBlockTokens + 1
	pbs := make([]wire.PutBlock, n)
	fbs := make([]wire.FillBlock, n)
	ids := make([]uint32, wire.MaxBlockTokens)
	for i := range pbs {
		pbs[i] = wire.PutBlock{Key: k[0], ValidLength: 1, TokenIDs: ids}
		fbs[i] = wire.FillBlock{Key: k[0], ValidLength: 1, TokenIDs: ids}
	}
	wantCode(t, put(pbs...), wire.CodeBatchTooLarge)
	wantCode(t, commit(fbs...), wire.CodeBatchTooLarge)
	if err := put(pbs[:n-1]...); err != nil {
		t.Fatalf("exactly MaxRequestTokens: %v", err)
	}

	// A huge token count in a tiny body is rejected before allocating.
	b := (&wire.PutRequest{Blocks: []wire.PutBlock{{Key: k[0], ValidLength: 1, TokenIDs: []uint32{1}}}}).AppendTo(nil)
	binary.LittleEndian.PutUint32(b[len(b)-8:], wire.MaxBlockTokens) // n, then one token id
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range 50 {
		if _, err := new(wire.PutRequest).Decode(b, maxBatch); wire.ErrCode(err) != wire.CodeMalformed {
			t.Fatalf("claimed count: %v", err)
		}
	}
	runtime.ReadMemStats(&after)
	if perRun := (after.TotalAlloc - before.TotalAlloc) / 50; perRun > 1024 {
		t.Fatalf("decoder allocated %d bytes per rejected body", perRun)
	}
}

// AppendTable frames a table in place, byte for byte as AppendMeta frames
// the encoded table, after whatever the buffer already holds.
func TestAppendTableEqualsAppendMeta(t *testing.T) {
	tables := []wire.Table{
		&wire.PutRequest{Namespace: sampleNamespace(t), Blocks: []wire.PutBlock{
			{Key: wire.Key{1}, Parent: wire.Key{2}, ValidLength: 2, Len: 7, Position: 16, TokenIDs: []uint32{5, 6, 7}}}},
		&wire.PutOpaqueRequest{Namespace: sampleNamespace(t), Blocks: []wire.OpaqueBlock{{Key: wire.Key{3}, Name: []byte("k"), Len: 3}}},
		&wire.FillCommitRequest{Namespace: sampleNamespace(t), Blocks: []wire.FillBlock{
			{Token: wire.FillToken{Fill: 1, Epoch: 2, Turn: 3}, Key: wire.Key{4}, ValidLength: 1, Len: 1, TokenIDs: []uint32{9}}}},
	}
	for _, tb := range tables {
		head := []byte("header")
		got := wire.AppendTable(append([]byte(nil), head...), tb)
		want := wire.AppendMeta(append([]byte(nil), head...), tb.AppendTo(nil))
		if !bytes.Equal(got, want) {
			t.Errorf("%T: AppendTable\n%x\nwant\n%x", tb, got, want)
		}
	}
}
