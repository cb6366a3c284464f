package wire_test

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/gpucache/gpucache/api/identity"
	"github.com/gpucache/gpucache/api/wire"
)

var updateGolden = flag.Bool("update", false, "rewrite testdata/golden_frames.json from goldenInputs in golden_test.go")

// goldenPath is the file of golden frames; testdata/README.md describes it
// for implementers in other languages.
var goldenPath = filepath.Join("testdata", "golden_frames.json")

const goldenRegenerate = "go test ./api/wire -run TestGoldenFrames -update"

type goldenFile struct {
	Comment   string        `json:"comment"`
	Namespace goldenNSInfo  `json:"namespace"`
	Frames    []goldenFrame `json:"frames"`
}

// goldenNSInfo describes the namespace every frame with a namespace blob
// carries, and the token chain its keys come from.
type goldenNSInfo struct {
	Fields    map[string]any `json:"fields"`
	Canonical hexBytes       `json:"canonical"`
	Digest    hexBytes       `json:"digest"`
	Tokens    []uint32       `json:"tokens"`
	Keys      []hexBytes     `json:"keys"`
}

type goldenFrame struct {
	Name string `json:"name"`
	// Kind is request, response (a success) or error (an error response).
	Kind      string      `json:"kind"`
	Opcode    wire.Opcode `json:"opcode"`
	Op        string      `json:"op"`
	Version   uint8       `json:"version"` // the first protocol version whose sessions carry the frame
	Flags     wire.Flags  `json:"flags"`
	RequestID uint64      `json:"request_id"`
	// Fields are the decoded body; a stamped request's have "stamp" too.
	Fields json.RawMessage `json:"fields"`
	Frame  hexBytes        `json:"frame"`
}

// hexBytes is a byte string that JSON carries as lower-case hex.
type hexBytes []byte

func (h hexBytes) MarshalJSON() ([]byte, error) { return json.Marshal(hex.EncodeToString(h)) }

func (h *hexBytes) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	if s != strings.ToLower(s) {
		return fmt.Errorf("hex %q is not lower case", s)
	}
	v, err := hex.DecodeString(s)
	*h = v
	return err
}

// ---- frames ----

// wantFlags is the flag word a frame of kind carries.
func wantFlags(kind string, stamped bool) wire.Flags {
	switch {
	case kind == "response":
		return wire.FlagResponse
	case kind == "error":
		return wire.FlagResponse | wire.FlagError
	case stamped:
		return wire.FlagStamped
	}
	return 0
}

// encodeFrame builds the whole frame of g from its fields.
func encodeFrame(g *goldenFrame) ([]byte, error) {
	c, err := codecOf(g.Opcode, g.Kind)
	if err != nil {
		return nil, err
	}
	raw := []byte(g.Fields)
	var prefix []byte
	if g.Flags&wire.FlagStamped != 0 {
		var m map[string]json.RawMessage
		if err := json.Unmarshal(raw, &m); err != nil {
			return nil, err
		}
		var st stampFields
		d := json.NewDecoder(bytes.NewReader(m["stamp"]))
		d.DisallowUnknownFields()
		if err := d.Decode(&st); err != nil {
			return nil, fmt.Errorf("stamp: %w", err)
		}
		if st.UnixNanos>>63 != 0 || len(st.Nonce) != 16 {
			return nil, fmt.Errorf("stamp %+v: the time's top bit is set or the nonce is not 16 bytes", st)
		}
		prefix = binary.LittleEndian.AppendUint64(nil, st.UnixNanos)
		prefix = append(prefix, st.Nonce...)
		delete(m, "stamp")
		if raw, err = json.Marshal(m); err != nil {
			return nil, err
		}
	}
	body, err := c.encode(raw)
	if err != nil {
		return nil, err
	}
	body = append(prefix, body...)
	h := wire.Header{Version: wire.FrameVersion, Op: g.Opcode, Flags: g.Flags, RequestID: g.RequestID, BodyLen: uint32(len(body))}
	return append(h.Append(nil), body...), nil
}

// decodeFrame decodes g.Frame and returns its fields as JSON.
func decodeFrame(g *goldenFrame) ([]byte, error) {
	h, err := wire.DecodeHeader(g.Frame)
	if err != nil {
		return nil, err
	}
	body := g.Frame[wire.HeaderSize:]
	switch {
	case h.Version != wire.FrameVersion:
		return nil, fmt.Errorf("frame version %d", h.Version)
	case h.Op != g.Opcode:
		return nil, fmt.Errorf("opcode %d, the vector says %d", h.Op, g.Opcode)
	case h.Flags != g.Flags:
		return nil, fmt.Errorf("flags %#x, the vector says %#x", h.Flags, g.Flags)
	case h.RequestID != g.RequestID:
		return nil, fmt.Errorf("request id %d, the vector says %d", h.RequestID, g.RequestID)
	case int(h.BodyLen) != len(body):
		return nil, fmt.Errorf("body length %d, the frame has %d bytes after the header", h.BodyLen, len(body))
	}
	if g.Kind == "request" {
		if err := wire.DefaultLimits().CheckRequest(h); err != nil {
			return nil, err
		}
	}
	var st *stampFields
	if h.Flags&wire.FlagStamped != 0 {
		if len(body) < wire.StampSize {
			return nil, fmt.Errorf("stamped body of %d bytes", len(body))
		}
		st = &stampFields{UnixNanos: binary.LittleEndian.Uint64(body), Nonce: bytes.Clone(body[8:wire.StampSize])}
		body = body[wire.StampSize:]
	}
	c, err := codecOf(h.Op, g.Kind)
	if err != nil {
		return nil, err
	}
	f, err := c.decode(body)
	if err != nil {
		return nil, err
	}
	out, err := json.Marshal(f)
	if err != nil || st == nil {
		return out, err
	}
	return withStamp(out, st)
}

// withStamp adds the stamp to a stamped request's fields.
func withStamp(fields []byte, st *stampFields) ([]byte, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(fields, &m); err != nil {
		return nil, err
	}
	b, err := json.Marshal(st)
	if err != nil {
		return nil, err
	}
	m["stamp"] = b
	return json.Marshal(m)
}

// sameJSON compares two JSON texts as values, keeping every integer exact.
func sameJSON(a, b []byte) (bool, error) {
	var va, vb any
	for _, x := range []struct {
		b []byte
		v *any
	}{{a, &va}, {b, &vb}} {
		d := json.NewDecoder(bytes.NewReader(x.b))
		d.UseNumber()
		if err := d.Decode(x.v); err != nil {
			return false, err
		}
	}
	return reflect.DeepEqual(va, vb), nil
}

func loadGolden(t *testing.T) goldenFile {
	t.Helper()
	raw, err := os.ReadFile(goldenPath)
	if err != nil {
		t.Fatalf("%v (generate it: %s)", err, goldenRegenerate)
	}
	var gf goldenFile
	d := json.NewDecoder(bytes.NewReader(raw))
	d.DisallowUnknownFields()
	if err := d.Decode(&gf); err != nil {
		t.Fatalf("%s: %v", goldenPath, err)
	}
	return gf
}

// TestGoldenFrames checks every frame of testdata/golden_frames.json both
// ways: the frame decodes (header and body, with this package's decoders)
// to the vector's fields, and the fields encode (with its encoders) to the
// frame, byte for byte. The file itself is what goldenInputs generates.
func TestGoldenFrames(t *testing.T) {
	want, err := generateGolden()
	if err != nil {
		t.Fatal(err)
	}
	if *updateGolden {
		if err := os.WriteFile(goldenPath, want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	gf := loadGolden(t)
	names := map[string]bool{}
	for i := range gf.Frames {
		g := &gf.Frames[i]
		t.Run(g.Name, func(t *testing.T) {
			if names[g.Name] {
				t.Fatalf("name %q is used twice", g.Name)
			}
			names[g.Name] = true
			if g.Op != g.Opcode.String() {
				t.Errorf("op %q, opcode %d is %s", g.Op, g.Opcode, g.Opcode)
			}
			if g.Version < g.Opcode.Since() || g.Version > wire.VersionMax {
				t.Errorf("version %d: %s needs %d, this package speaks up to %d", g.Version, g.Opcode, g.Opcode.Since(), wire.VersionMax)
			}
			if w := wantFlags(g.Kind, g.Flags&wire.FlagStamped != 0); g.Flags != w {
				t.Errorf("flags %#x for a %s frame, want %#x", g.Flags, g.Kind, w)
			}
			got, err := decodeFrame(g)
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			if same, err := sameJSON(got, g.Fields); err != nil || !same {
				t.Errorf("decoded fields differ (%v)\n got %s\nwant %s", err, got, g.Fields)
			}
			frame, err := encodeFrame(g)
			if err != nil {
				t.Fatalf("encode: %v", err)
			}
			if !bytes.Equal(frame, g.Frame) {
				t.Errorf("encoded frame differs\n got %x\nwant %x", frame, []byte(g.Frame))
			}
		})
	}
	raw, err := os.ReadFile(goldenPath)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(raw, want) {
		t.Errorf("%s is not what goldenInputs generates; after an intended change, run: %s", goldenPath, goldenRegenerate)
	}
}

// Every operation has a request and a response frame in the file, every
// response answers a request frame (same opcode and request id), the
// error body appears with a retry-after and with a WRONG_EPOCH epoch, and
// a stamped request too.
func TestGoldenFramesCoverEveryMessage(t *testing.T) {
	gf := loadGolden(t)
	have := map[codecKey]bool{}
	var retry, epoch, stamped bool
	for _, g := range gf.Frames {
		have[codecKey{g.Opcode, g.Kind}] = true
		stamped = stamped || g.Flags&wire.FlagStamped != 0
		if g.Kind == "error" {
			var f errorFields
			if err := json.Unmarshal(g.Fields, &f); err != nil {
				t.Fatal(err)
			}
			retry = retry || f.RetryAfterMs != nil
			epoch = epoch || f.Epoch != nil
		}
	}
	requests := map[[2]uint64]bool{}
	for _, g := range gf.Frames {
		if g.Kind == "request" {
			requests[[2]uint64{uint64(g.Opcode), g.RequestID}] = true
		}
	}
	for _, g := range gf.Frames {
		if g.Kind == "response" && !requests[[2]uint64{uint64(g.Opcode), g.RequestID}] {
			t.Errorf("response %s (request id %d) answers no request frame of its opcode and id", g.Name, g.RequestID)
		}
	}
	for op := wire.Opcode(1); op <= wire.OpMax; op++ {
		for _, kind := range []string{"request", "response"} {
			if !have[codecKey{op, kind}] {
				t.Errorf("no %s %s frame", op, kind)
			}
		}
	}
	if !retry || !epoch || !stamped {
		t.Errorf("error with retry-after %v, error with an epoch %v, stamped request %v: want all", retry, epoch, stamped)
	}
}

// ---- the inputs ----

// goldenNamespace is the namespace of every frame with a namespace blob:
// small, and valid, so the keys are real keys of a real chain.
var goldenNamespace = identity.Namespace{
	Tenant: "acme", TrustDomain: "prod", ModelID: "tiny", ConfigRevision: "1", TokenizerRevision: "1",
	RoPE: "none", DType: "bf16", Quantization: "none",
	Layout: identity.Layout{Format: "kv", TPSize: 1, PPSize: 1, LayerCount: 2, KVHeads: 1, HeadDim: 64, BlockTokens: 4},
}

var goldenTokens = []uint32{1, 2, 3, 4, 5, 6, 7, 8}

type goldenInput struct {
	name    string
	kind    string
	op      wire.Opcode
	version uint8
	rid     uint64
	stamp   *stampFields
	fields  any
}

func ptr[T any](v T) *T { return &v }

func goldenInputs() (goldenNSInfo, []goldenInput, error) {
	ns := goldenNamespace
	canon, err := ns.Canonical()
	if err != nil {
		return goldenNSInfo{}, nil, err
	}
	digest, err := ns.Digest()
	if err != nil {
		return goldenNSInfo{}, nil, err
	}
	keys, err := identity.Chain(ns, goldenTokens)
	if err != nil {
		return goldenNSInfo{}, nil, err
	}
	nsb := hexBytes(canon)
	k0, k1 := hexBytes(keys[0][:]), hexBytes(keys[1][:])
	zero := hexBytes(make([]byte, wire.KeySize))
	b0 := putBlockFields{Key: k0, Parent: zero, ValidLength: 4, Length: 4, Position: 0, TokenIDs: goldenTokens[:4]}
	b1 := putBlockFields{Key: k1, Parent: k0, ValidLength: 4, Length: 4, Position: 4, TokenIDs: goldenTokens[4:]}
	p0, p1 := hexBytes("kv-0"), hexBytes("kv-1")
	opaqueName := []byte("chunk-0")
	ok := identity.OpaqueKey(digest, opaqueName)
	info := goldenNSInfo{
		Fields: map[string]any{
			"tenant": ns.Tenant, "trust_domain": ns.TrustDomain, "model_id": ns.ModelID,
			"config_revision": ns.ConfigRevision, "tokenizer_revision": ns.TokenizerRevision, "adapter": ns.Adapter,
			"rope": ns.RoPE, "dtype": ns.DType, "quantization": ns.Quantization,
			"layout": map[string]any{"format": ns.Layout.Format, "tp_rank": ns.Layout.TPRank, "tp_size": ns.Layout.TPSize,
				"pp_rank": ns.Layout.PPRank, "pp_size": ns.Layout.PPSize, "layer_start": ns.Layout.LayerStart,
				"layer_count": ns.Layout.LayerCount, "kv_heads": ns.Layout.KVHeads, "head_dim": ns.Layout.HeadDim,
				"block_tokens": ns.Layout.BlockTokens},
		},
		Canonical: canon, Digest: digest[:], Tokens: goldenTokens, Keys: []hexBytes{k0, k1},
	}
	const v1, v2, v3, v5 = wire.Version1, wire.Version2, wire.Version3, wire.Version5
	in := []goldenInput{
		{"hello_request", "request", wire.OpHello, v1, 1, nil, helloRequestFields{MinVersion: 1, MaxVersion: 5, Tenant: "acme", Client: "golden/1"}},
		{"hello_response", "response", wire.OpHello, v1, 1, nil, helloResponseFields{Version: 5, Server: "gpucached", MaxFrame: wire.DefaultMaxFrame, MaxBatch: wire.DefaultMaxBatch, MaxInFlight: wire.DefaultMaxInFlight, MaxPayload: 4 << 20}},
		{"hello_request_bearer", "request", wire.OpHello, v1, 2, nil, helloRequestFields{MinVersion: 1, MaxVersion: 5, Tenant: "acme", Client: "golden/1", Auth: &authFields{Kind: "BEARER", Credential: hexBytes("s3cret")}}},
		{"hello_response_session", "response", wire.OpHello, v1, 2, nil, helloResponseFields{Version: 5, Server: "gpucached", MaxFrame: wire.DefaultMaxFrame, MaxBatch: wire.DefaultMaxBatch, MaxInFlight: wire.DefaultMaxInFlight, MaxPayload: 4 << 20, Session: &sessionFields{Tenant: "acme", Flags: uint8(wire.SessionStampRequired)}}},
		{"lookup_request", "request", wire.OpLookup, v1, 3, nil, lookupRequestFields{Namespace: nsb, LeaseTTLMs: 5000, Keys: []hexBytes{k0, k1}}},
		{"lookup_response", "response", wire.OpLookup, v1, 3, nil, lookupResponseFields{Hits: 1, LeaseID: 9, LeaseTTLMs: 5000}},
		{"get_request", "request", wire.OpGet, v1, 4, nil, getRequestFields{Namespace: nsb, LeaseID: 9, Keys: []hexBytes{k0, k1}}},
		{"get_response", "response", wire.OpGet, v1, 4, nil, getResponseFields{Blocks: []blockMetaFields{{"HIT", 4}, {"MISS", 0}}, Payloads: []hexBytes{p0}}},
		{"put_request", "request", wire.OpPut, v1, 5, nil, putRequestFields{Namespace: nsb, Blocks: []putBlockFields{b0, b1}, Payloads: []hexBytes{p0, p1}}},
		{"put_response", "response", wire.OpPut, v1, 5, nil, statusResponseFields{Statuses: []string{"EXISTS", "STORED"}}},
		{"delete_request", "request", wire.OpDelete, v1, 6, nil, keysRequestFields{Namespace: nsb, Keys: []hexBytes{k0, k1}}},
		{"delete_response", "response", wire.OpDelete, v1, 6, nil, statusResponseFields{Statuses: []string{"DELETED", "BUSY"}}},
		{"stat_request", "request", wire.OpStat, v1, 7, nil, emptyFields{}},
		{"stat_response", "response", wire.OpStat, v1, 7, nil, statResponseFields{Entries: []statEntryFields{{"conns_accepted", 3}, {"blocks_hit", 42}}}},
		{"ping_request", "request", wire.OpPing, v1, 8, nil, pingFields{Data: hexBytes("ping")}},
		{"ping_response", "response", wire.OpPing, v1, 8, nil, pingFields{Data: hexBytes("ping")}},
		{"acquire_request", "request", wire.OpAcquire, v1, 9, nil, keysRequestFields{Namespace: nsb, Keys: []hexBytes{k0, k1}}},
		{"acquire_response", "response", wire.OpAcquire, v1, 9, nil, acquireResponseFields{Entries: []acquireEntryFields{{"LEAD", tokenFields{17, 3, 1}}, {"JOINED", tokenFields{18, 0, 0}}}}},
		{"fill_commit_request", "request", wire.OpFillCommit, v1, 10, nil, fillCommitRequestFields{Namespace: nsb, Blocks: []fillBlockFields{{tokenFields{17, 3, 1}, b0}}, Payloads: []hexBytes{p0}}},
		{"fill_commit_response", "response", wire.OpFillCommit, v1, 10, nil, statusResponseFields{Statuses: []string{"STORED"}}},
		{"fill_abort_request", "request", wire.OpFillAbort, v1, 11, nil, fillAbortRequestFields{Namespace: nsb, Tokens: []tokenFields{{17, 3, 1}}}},
		{"fill_abort_response", "response", wire.OpFillAbort, v1, 11, nil, statusResponseFields{Statuses: []string{"ABORTED"}}},
		{"wait_request", "request", wire.OpWait, v1, 12, nil, waitRequestFields{Namespace: nsb, TimeoutMs: 1000, Fills: []uint64{18}}},
		{"wait_response", "response", wire.OpWait, v1, 12, nil, waitResponseFields{Entries: []waitEntryFields{{"PROMOTED", tokenFields{18, 3, 2}}}}},
		{"members_request", "request", wire.OpMembers, v2, 13, nil, emptyFields{}},
		{"members_response", "response", wire.OpMembers, v2, 13, nil, membersResponseFields{Epoch: 7, Members: []memberFields{
			{ID: "node-a", Addr: "10.0.0.1:7070", Domain: "rack-1", Proto: 5, Capacity: 16 << 30, Flags: 0},
			{ID: "node-b", Addr: "10.0.0.2:7070", Domain: "rack-2", Proto: 4, Capacity: 8 << 30, Flags: uint8(wire.MemberDraining)},
		}}},
		{"put_opaque_request", "request", wire.OpPutOpaque, v3, 14, nil, putOpaqueRequestFields{Namespace: nsb, Blocks: []opaqueBlockFields{{Key: ok[:], Name: opaqueName, Length: 4}}, Payloads: []hexBytes{p0}}},
		{"put_opaque_response", "response", wire.OpPutOpaque, v3, 14, nil, statusResponseFields{Statuses: []string{"STORED"}}},
		{"delete_request_stamped", "request", wire.OpDelete, v1, 15, &stampFields{UnixNanos: 1767323045000000006, Nonce: mustHex("f0e1d2c3b4a5968778695a4b3c2d1e0f")}, keysRequestFields{Namespace: nsb, Keys: []hexBytes{k1}}},
		{"error_rate_limited", "error", wire.OpPut, v1, 16, nil, errorFields{Code: "RATE_LIMITED", Message: "tenant acme is over its rate limit", RetryAfterMs: ptr(uint32(250))}},
		{"error_wrong_epoch", "error", wire.OpGet, v2, 17, nil, errorFields{Code: "WRONG_EPOCH", Message: "a key is not this node's under epoch 7", Epoch: ptr(uint64(7))}},
		{"error_malformed", "error", wire.OpLookup, v1, 18, nil, errorFields{Code: "MALFORMED", Message: "2 trailing bytes"}},
		{"register_request", "request", wire.OpRegister, v5, 19, nil, registerRequestFields{Region: 1, Length: 1 << 20}},
		{"register_response", "response", wire.OpRegister, v5, 19, nil, registerResponseFields{Mode: "SEALED"}},
		{"get_into_request", "request", wire.OpGetInto, v5, 20, nil, getIntoRequestFields{Namespace: nsb, LeaseID: 0, Region: 1, Entries: []getIntoEntryFields{{k0, 0, 4096}, {k1, 4096, 4096}}}},
		{"get_into_response", "response", wire.OpGetInto, v5, 20, nil, getIntoResponseFields{Blocks: []blockMetaFields{{"HIT", 4}, {"MISS", 0}}}},
		{"get_into_response_fault", "response", wire.OpGetInto, v5, 20, nil, getIntoResponseFields{Blocks: []blockMetaFields{{"TOO_LARGE", 8192}, {"FAULT", 0}}}},
		{"put_from_request", "request", wire.OpPutFrom, v5, 21, nil, putFromRequestFields{Region: 1, Offsets: []uint64{0, 4096}, Namespace: nsb, Blocks: []putBlockFields{b0, b1}}},
		{"put_from_response", "response", wire.OpPutFrom, v5, 21, nil, statusResponseFields{Statuses: []string{"STORED", "FAULT"}}},
		{"put_opaque_from_request", "request", wire.OpPutOpaqueFrom, v5, 22, nil, putOpaqueFromRequestFields{Region: 1, Offsets: []uint64{8192}, Namespace: nsb, Blocks: []opaqueBlockFields{{Key: ok[:], Name: opaqueName, Length: 4}}}},
		{"put_opaque_from_response", "response", wire.OpPutOpaqueFrom, v5, 22, nil, statusResponseFields{Statuses: []string{"STORED"}}},
		{"unregister_request", "request", wire.OpUnregister, v5, 22, nil, unregisterRequestFields{Region: 1}},
		{"unregister_response", "response", wire.OpUnregister, v5, 22, nil, emptyFields{}},
		{"error_region", "error", wire.OpGetInto, v5, 23, nil, errorFields{Code: "REGION", Message: "region 1 is not registered on this connection"}},
	}
	return info, in, nil
}

func mustHex(s string) hexBytes {
	b, err := hex.DecodeString(s)
	if err != nil {
		panic(err)
	}
	return b
}

// generateGolden renders goldenInputs as the file's bytes.
func generateGolden() ([]byte, error) {
	info, in, err := goldenInputs()
	if err != nil {
		return nil, err
	}
	gf := goldenFile{
		Comment:   "Whole frames (header and body) of every message of the gpucache wire protocol, with their decoded fields. Generated by `" + goldenRegenerate + "`; format in README.md.",
		Namespace: info,
	}
	for _, x := range in {
		fields, err := json.Marshal(x.fields)
		if err != nil {
			return nil, err
		}
		if x.stamp != nil {
			if fields, err = withStamp(fields, x.stamp); err != nil {
				return nil, err
			}
		}
		g := goldenFrame{Name: x.name, Kind: x.kind, Opcode: x.op, Op: x.op.String(), Version: x.version,
			Flags: wantFlags(x.kind, x.stamp != nil), RequestID: x.rid, Fields: fields}
		if g.Frame, err = encodeFrame(&g); err != nil {
			return nil, fmt.Errorf("%s: %w", x.name, err)
		}
		gf.Frames = append(gf.Frames, g)
	}
	out, err := json.MarshalIndent(gf, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(out, '\n'), nil
}
