package wire_test

// The decoded fields of every message of golden_frames.json, and the
// conversions between them and bodies, with this package's encoders and
// decoders (golden_test.go runs them over the file).

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/gpucache/gpucache/api/wire"
)

func key(h hexBytes) (wire.Key, error) {
	var k wire.Key
	if len(h) != wire.KeySize {
		return k, fmt.Errorf("key of %d bytes, want %d", len(h), wire.KeySize)
	}
	copy(k[:], h)
	return k, nil
}

func keysOf(hs []hexBytes) ([]wire.Key, error) {
	ks := make([]wire.Key, len(hs))
	for i, h := range hs {
		k, err := key(h)
		if err != nil {
			return nil, err
		}
		ks[i] = k
	}
	return ks, nil
}

func hexKeys(ks []wire.Key) []hexBytes {
	hs := make([]hexBytes, len(ks))
	for i := range ks {
		hs[i] = append(hexBytes(nil), ks[i][:]...)
	}
	return hs
}

// ---- names of enumerations, as the specification spells them ----

func statusOf(name string) (wire.Status, error) {
	for s := 0; s < 256; s++ {
		if wire.Status(s).String() == name && !strings.HasPrefix(name, "STATUS(") {
			return wire.Status(s), nil
		}
	}
	return 0, fmt.Errorf("unknown status %q", name)
}

func statusesOf(names []string) ([]wire.Status, error) {
	out := make([]wire.Status, len(names))
	for i, n := range names {
		s, err := statusOf(n)
		if err != nil {
			return nil, err
		}
		out[i] = s
	}
	return out, nil
}

func statusNames(ss []wire.Status) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = s.String()
	}
	return out
}

func codeOf(name string) (wire.Code, error) {
	for c := wire.Code(0); c <= wire.CodeMax; c++ {
		if c.String() == name {
			return c, nil
		}
	}
	return 0, fmt.Errorf("unknown code %q", name)
}

func outcomeOf(name string) (wire.AcquireOutcome, error) {
	for o := wire.AcquireOutcome(0); o < 16; o++ {
		if o.String() == name {
			return o, nil
		}
	}
	return 0, fmt.Errorf("unknown outcome %q", name)
}

func noticeOf(name string) (wire.NoticeKind, error) {
	for k := wire.NoticeKind(0); k < 16; k++ {
		if k.String() == name {
			return k, nil
		}
	}
	return 0, fmt.Errorf("unknown notice %q", name)
}

var authNames = map[wire.AuthKind]string{wire.AuthNone: "NONE", wire.AuthBearer: "BEARER"}

var regionModeNames = map[wire.RegionMode]string{wire.RegionSealed: "SEALED", wire.RegionGuarded: "GUARDED"}

func nameKey[K comparable](m map[K]string, name string) (K, error) {
	for k, v := range m {
		if v == name {
			return k, nil
		}
	}
	var zero K
	return zero, fmt.Errorf("unknown name %q", name)
}

// ---- the decoded fields of each message ----

type helloRequestFields struct {
	MinVersion uint8       `json:"min_version"`
	MaxVersion uint8       `json:"max_version"`
	Tenant     string      `json:"tenant"`
	Client     string      `json:"client"`
	Auth       *authFields `json:"auth,omitempty"`
}

type authFields struct {
	Kind       string   `json:"kind"`
	Credential hexBytes `json:"credential"`
}

type helloResponseFields struct {
	Version     uint8          `json:"version"`
	Server      string         `json:"server"`
	MaxFrame    uint32         `json:"max_frame"`
	MaxBatch    uint32         `json:"max_batch"`
	MaxInFlight uint32         `json:"max_in_flight"`
	MaxPayload  uint32         `json:"max_payload"`
	Session     *sessionFields `json:"session,omitempty"`
}

type sessionFields struct {
	Tenant string `json:"tenant"`
	Flags  uint8  `json:"flags"`
}

type lookupRequestFields struct {
	Namespace  hexBytes   `json:"namespace"`
	LeaseTTLMs uint32     `json:"lease_ttl_ms"`
	Keys       []hexBytes `json:"keys"`
}

type lookupResponseFields struct {
	Hits       uint32 `json:"hits"`
	LeaseID    uint64 `json:"lease_id"`
	LeaseTTLMs uint32 `json:"lease_ttl_ms"`
}

type getRequestFields struct {
	Namespace hexBytes   `json:"namespace"`
	LeaseID   uint64     `json:"lease_id"`
	Keys      []hexBytes `json:"keys"`
}

type blockMetaFields struct {
	Status string `json:"status"`
	Length uint32 `json:"length"`
}

type getResponseFields struct {
	Blocks   []blockMetaFields `json:"blocks"`
	Payloads []hexBytes        `json:"payloads"` // the HIT entries' bytes, in table order
}

type putBlockFields struct {
	Key         hexBytes `json:"key"`
	Parent      hexBytes `json:"parent"`
	ValidLength uint32   `json:"valid_length"`
	Length      uint32   `json:"length"`
	Position    uint64   `json:"position"`
	TokenIDs    []uint32 `json:"token_ids"`
}

type putRequestFields struct {
	Namespace hexBytes         `json:"namespace"`
	Blocks    []putBlockFields `json:"blocks"`
	Payloads  []hexBytes       `json:"payloads"`
}

type statusResponseFields struct {
	Statuses []string `json:"statuses"`
}

type keysRequestFields struct {
	Namespace hexBytes   `json:"namespace"`
	Keys      []hexBytes `json:"keys"`
}

type emptyFields struct{}

type statResponseFields struct {
	Entries []statEntryFields `json:"entries"`
}

type statEntryFields struct {
	Name  string `json:"name"`
	Value uint64 `json:"value"`
}

type pingFields struct {
	Data hexBytes `json:"data"`
}

type tokenFields struct {
	Fill  uint64 `json:"fill"`
	Epoch uint64 `json:"epoch"`
	Turn  uint32 `json:"turn"`
}

type acquireEntryFields struct {
	Outcome string `json:"outcome"`
	tokenFields
}

type acquireResponseFields struct {
	Entries []acquireEntryFields `json:"entries"`
}

type fillBlockFields struct {
	tokenFields
	putBlockFields
}

type fillCommitRequestFields struct {
	Namespace hexBytes          `json:"namespace"`
	Blocks    []fillBlockFields `json:"blocks"`
	Payloads  []hexBytes        `json:"payloads"`
}

type fillAbortRequestFields struct {
	Namespace hexBytes      `json:"namespace"`
	Tokens    []tokenFields `json:"tokens"`
}

type waitRequestFields struct {
	Namespace hexBytes `json:"namespace"`
	TimeoutMs uint32   `json:"timeout_ms"`
	Fills     []uint64 `json:"fills"`
}

type waitEntryFields struct {
	Notice string `json:"notice"`
	tokenFields
}

type waitResponseFields struct {
	Entries []waitEntryFields `json:"entries"`
}

type memberFields struct {
	ID       string `json:"id"`
	Addr     string `json:"addr"`
	Domain   string `json:"domain"`
	Proto    uint8  `json:"proto"`
	Capacity uint64 `json:"capacity"`
	Flags    uint8  `json:"flags"`
}

type membersResponseFields struct {
	Epoch   uint64         `json:"epoch"`
	Members []memberFields `json:"members"`
}

type opaqueBlockFields struct {
	Key    hexBytes `json:"key"`
	Name   hexBytes `json:"name"`
	Length uint32   `json:"length"`
}

type putOpaqueRequestFields struct {
	Namespace hexBytes            `json:"namespace"`
	Blocks    []opaqueBlockFields `json:"blocks"`
	Payloads  []hexBytes          `json:"payloads"`
}

type registerRequestFields struct {
	Region uint32 `json:"region"`
	Length uint64 `json:"length"`
}

type registerResponseFields struct {
	Mode string `json:"mode"`
}

type unregisterRequestFields struct {
	Region uint32 `json:"region"`
}

type getIntoEntryFields struct {
	Key      hexBytes `json:"key"`
	Offset   uint64   `json:"offset"`
	Capacity uint32   `json:"capacity"`
}

type getIntoRequestFields struct {
	Namespace hexBytes             `json:"namespace"`
	LeaseID   uint64               `json:"lease_id"`
	Region    uint32               `json:"region"`
	Entries   []getIntoEntryFields `json:"entries"`
}

type getIntoResponseFields struct {
	Blocks []blockMetaFields `json:"blocks"`
}

type putFromRequestFields struct {
	Region    uint32           `json:"region"`
	Offsets   []uint64         `json:"offsets"`
	Namespace hexBytes         `json:"namespace"`
	Blocks    []putBlockFields `json:"blocks"`
}

type putOpaqueFromRequestFields struct {
	Region    uint32              `json:"region"`
	Offsets   []uint64            `json:"offsets"`
	Namespace hexBytes            `json:"namespace"`
	Blocks    []opaqueBlockFields `json:"blocks"`
}

type errorFields struct {
	Code         string  `json:"code"`
	Message      string  `json:"message"`
	RetryAfterMs *uint32 `json:"retry_after_ms,omitempty"` // optional; only RATE_LIMITED sends it
	Epoch        *uint64 `json:"epoch,omitempty"`          // WRONG_EPOCH only, and there required
}

type stampFields struct {
	UnixNanos uint64   `json:"unix_nanos"`
	Nonce     hexBytes `json:"nonce"`
}

// ---- conversions between fields and bodies ----

// codec converts one kind of body between its fields and its bytes.
type codec struct {
	encode func(fields []byte) ([]byte, error) // strict JSON fields -> body
	decode func(body []byte) (any, error)      // body -> fields
}

// mk builds a codec from the two directions of one fields type F.
func mk[F any](enc func(*F) ([]byte, error), dec func([]byte) (*F, error)) codec {
	return codec{
		encode: func(raw []byte) ([]byte, error) {
			f := new(F)
			d := json.NewDecoder(bytes.NewReader(raw))
			d.DisallowUnknownFields()
			if err := d.Decode(f); err != nil {
				return nil, err
			}
			return enc(f)
		},
		decode: func(b []byte) (any, error) { return dec(b) },
	}
}

func putBlock(f putBlockFields) (wire.PutBlock, error) {
	k, err := key(f.Key)
	if err != nil {
		return wire.PutBlock{}, err
	}
	p, err := key(f.Parent)
	return wire.PutBlock{Key: k, Parent: p, ValidLength: f.ValidLength, Len: f.Length, Position: f.Position, TokenIDs: f.TokenIDs}, err
}

func putBlockFieldsOf(b wire.PutBlock) putBlockFields {
	return putBlockFields{Key: b.Key[:], Parent: b.Parent[:], ValidLength: b.ValidLength, Length: b.Len, Position: b.Position, TokenIDs: b.TokenIDs}
}

// withPayloads frames a table and its payloads (PUT, FILL_COMMIT,
// PUT_OPAQUE, GET's answer): u32 table length | table | payloads. lens are
// the lengths the table announces, in order.
func withPayloads(table []byte, lens []uint32, payloads []hexBytes) ([]byte, error) {
	if len(lens) != len(payloads) {
		return nil, fmt.Errorf("%d payloads for %d entries that carry one", len(payloads), len(lens))
	}
	b := wire.AppendMeta(nil, table)
	for i, p := range payloads {
		if uint32(len(p)) != lens[i] {
			return nil, fmt.Errorf("payload %d is %d bytes, its entry says %d", i, len(p), lens[i])
		}
		b = append(b, p...)
	}
	return b, nil
}

// splitPayloads parses u32 table length | table | payloads: decodeTable
// decodes the table and returns its payload lengths in order.
func splitPayloads(b []byte, decodeTable func([]byte) ([]uint32, error)) ([]hexBytes, error) {
	if len(b) < 4 {
		return nil, fmt.Errorf("body of %d bytes has no table length", len(b))
	}
	n, err := wire.MetaLen([4]byte(b[:4]), uint32(len(b)))
	if err != nil {
		return nil, err
	}
	lens, err := decodeTable(b[4 : 4+n])
	if err != nil {
		return nil, err
	}
	var total uint64
	for _, l := range lens {
		total += uint64(l)
	}
	if err := wire.CheckPayload(total, uint32(len(b)), n); err != nil {
		return nil, err
	}
	rest := b[4+n:]
	out := []hexBytes{}
	for _, l := range lens {
		out = append(out, append(hexBytes(nil), rest[:l]...))
		rest = rest[l:]
	}
	return out, nil
}

func blockMetas(fs []blockMetaFields) ([]wire.BlockMeta, error) {
	out := make([]wire.BlockMeta, len(fs))
	for i, f := range fs {
		s, err := statusOf(f.Status)
		if err != nil {
			return nil, err
		}
		out[i] = wire.BlockMeta{Status: s, Len: f.Length}
	}
	return out, nil
}

func blockMetaFieldsOf(bs []wire.BlockMeta) []blockMetaFields {
	out := make([]blockMetaFields, len(bs))
	for i, b := range bs {
		out[i] = blockMetaFields{Status: b.Status.String(), Length: b.Len}
	}
	return out
}

var statusCodec = mk(func(f *statusResponseFields) ([]byte, error) {
	ss, err := statusesOf(f.Statuses)
	return (&wire.StatusResponse{Statuses: ss}).AppendTo(nil), err
}, func(b []byte) (*statusResponseFields, error) {
	var m wire.StatusResponse
	err := m.Decode(b, maxBatch)
	return &statusResponseFields{Statuses: statusNames(m.Statuses)}, err
})

var emptyCodec = mk(func(*emptyFields) ([]byte, error) { return nil, nil }, func(b []byte) (*emptyFields, error) {
	if len(b) != 0 {
		return nil, fmt.Errorf("empty body has %d bytes", len(b))
	}
	return &emptyFields{}, nil
})

var keysCodec = func(op wire.Opcode) codec {
	return mk(func(f *keysRequestFields) ([]byte, error) {
		ks, err := keysOf(f.Keys)
		if op == wire.OpAcquire {
			return (&wire.AcquireRequest{Namespace: f.Namespace, Keys: ks}).AppendTo(nil), err
		}
		return (&wire.DeleteRequest{Namespace: f.Namespace, Keys: ks}).AppendTo(nil), err
	}, func(b []byte) (*keysRequestFields, error) {
		if op == wire.OpAcquire {
			var m wire.AcquireRequest
			err := m.Decode(b, maxBatch)
			return &keysRequestFields{Namespace: bytes.Clone(m.Namespace), Keys: hexKeys(m.Keys)}, err
		}
		var m wire.DeleteRequest
		err := m.Decode(b, maxBatch)
		return &keysRequestFields{Namespace: bytes.Clone(m.Namespace), Keys: hexKeys(m.Keys)}, err
	})
}

type codecKey struct {
	op   wire.Opcode
	kind string
}

// codecs holds the request and response codec of every operation.
var codecs = map[codecKey]codec{
	{wire.OpHello, "request"}: mk(func(f *helloRequestFields) ([]byte, error) {
		m := wire.HelloRequest{MinVersion: f.MinVersion, MaxVersion: f.MaxVersion, Tenant: f.Tenant, Client: f.Client}
		if f.Auth != nil {
			kind, err := nameKey(authNames, f.Auth.Kind)
			if err != nil {
				return nil, err
			}
			m.HasAuth, m.Auth, m.Credential = true, kind, f.Auth.Credential
		}
		return m.AppendTo(nil), nil
	}, func(b []byte) (*helloRequestFields, error) {
		var m wire.HelloRequest
		err := m.Decode(b)
		f := &helloRequestFields{MinVersion: m.MinVersion, MaxVersion: m.MaxVersion, Tenant: m.Tenant, Client: m.Client}
		if m.HasAuth {
			f.Auth = &authFields{Kind: authNames[m.Auth], Credential: bytes.Clone(m.Credential)}
		}
		return f, err
	}),
	{wire.OpHello, "response"}: mk(func(f *helloResponseFields) ([]byte, error) {
		m := wire.HelloResponse{Version: f.Version, Server: f.Server, Limits: wire.Limits{MaxFrame: f.MaxFrame, MaxBatch: f.MaxBatch, MaxInFlight: f.MaxInFlight, MaxPayload: f.MaxPayload}}
		if f.Session != nil {
			m.HasSession, m.Tenant, m.Session = true, f.Session.Tenant, wire.SessionFlags(f.Session.Flags)
		}
		return m.AppendTo(nil), nil
	}, func(b []byte) (*helloResponseFields, error) {
		var m wire.HelloResponse
		err := m.Decode(b)
		f := &helloResponseFields{Version: m.Version, Server: m.Server, MaxFrame: m.Limits.MaxFrame, MaxBatch: m.Limits.MaxBatch, MaxInFlight: m.Limits.MaxInFlight, MaxPayload: m.Limits.MaxPayload}
		if m.HasSession {
			f.Session = &sessionFields{Tenant: m.Tenant, Flags: uint8(m.Session)}
		}
		return f, err
	}),
	{wire.OpLookup, "request"}: mk(func(f *lookupRequestFields) ([]byte, error) {
		ks, err := keysOf(f.Keys)
		return (&wire.LookupRequest{Namespace: f.Namespace, LeaseTTLMillis: f.LeaseTTLMs, Keys: ks}).AppendTo(nil), err
	}, func(b []byte) (*lookupRequestFields, error) {
		var m wire.LookupRequest
		err := m.Decode(b, maxBatch)
		return &lookupRequestFields{Namespace: bytes.Clone(m.Namespace), LeaseTTLMs: m.LeaseTTLMillis, Keys: hexKeys(m.Keys)}, err
	}),
	{wire.OpLookup, "response"}: mk(func(f *lookupResponseFields) ([]byte, error) {
		return (&wire.LookupResponse{Hits: f.Hits, LeaseID: f.LeaseID, LeaseTTLMillis: f.LeaseTTLMs}).AppendTo(nil), nil
	}, func(b []byte) (*lookupResponseFields, error) {
		var m wire.LookupResponse
		err := m.Decode(b)
		return &lookupResponseFields{Hits: m.Hits, LeaseID: m.LeaseID, LeaseTTLMs: m.LeaseTTLMillis}, err
	}),
	{wire.OpGet, "request"}: mk(func(f *getRequestFields) ([]byte, error) {
		ks, err := keysOf(f.Keys)
		return (&wire.GetRequest{Namespace: f.Namespace, LeaseID: f.LeaseID, Keys: ks}).AppendTo(nil), err
	}, func(b []byte) (*getRequestFields, error) {
		var m wire.GetRequest
		err := m.Decode(b, maxBatch)
		return &getRequestFields{Namespace: bytes.Clone(m.Namespace), LeaseID: m.LeaseID, Keys: hexKeys(m.Keys)}, err
	}),
	{wire.OpGet, "response"}: mk(func(f *getResponseFields) ([]byte, error) {
		bms, err := blockMetas(f.Blocks)
		if err != nil {
			return nil, err
		}
		var lens []uint32
		for _, bm := range bms {
			if bm.Status == wire.StatusHit {
				lens = append(lens, bm.Len)
			}
		}
		return withPayloads((&wire.GetResponse{Blocks: bms}).AppendTo(nil), lens, f.Payloads)
	}, func(b []byte) (*getResponseFields, error) {
		var m wire.GetResponse
		ps, err := splitPayloads(b, func(t []byte) ([]uint32, error) {
			if _, err := m.Decode(t, maxBatch); err != nil {
				return nil, err
			}
			var lens []uint32
			for _, bm := range m.Blocks {
				if bm.Status == wire.StatusHit {
					lens = append(lens, bm.Len)
				}
			}
			return lens, nil
		})
		return &getResponseFields{Blocks: blockMetaFieldsOf(m.Blocks), Payloads: ps}, err
	}),
	{wire.OpPut, "request"}: mk(func(f *putRequestFields) ([]byte, error) {
		m := wire.PutRequest{Namespace: f.Namespace}
		var lens []uint32
		for _, bf := range f.Blocks {
			pb, err := putBlock(bf)
			if err != nil {
				return nil, err
			}
			m.Blocks = append(m.Blocks, pb)
			lens = append(lens, pb.Len)
		}
		return withPayloads(m.AppendTo(nil), lens, f.Payloads)
	}, func(b []byte) (*putRequestFields, error) {
		var m wire.PutRequest
		ps, err := splitPayloads(b, func(t []byte) ([]uint32, error) {
			if _, err := m.Decode(t, maxBatch); err != nil {
				return nil, err
			}
			var lens []uint32
			for _, pb := range m.Blocks {
				lens = append(lens, pb.Len)
			}
			return lens, nil
		})
		f := &putRequestFields{Namespace: bytes.Clone(m.Namespace), Payloads: ps}
		for _, pb := range m.Blocks {
			f.Blocks = append(f.Blocks, putBlockFieldsOf(pb))
		}
		return f, err
	}),
	{wire.OpPut, "response"}:    statusCodec,
	{wire.OpDelete, "request"}:  keysCodec(wire.OpDelete),
	{wire.OpDelete, "response"}: statusCodec,
	{wire.OpStat, "request"}:    emptyCodec,
	{wire.OpStat, "response"}: mk(func(f *statResponseFields) ([]byte, error) {
		var m wire.StatResponse
		for _, e := range f.Entries {
			m.Entries = append(m.Entries, wire.StatEntry{Name: e.Name, Value: e.Value})
		}
		return m.AppendTo(nil), nil
	}, func(b []byte) (*statResponseFields, error) {
		var m wire.StatResponse
		err := m.Decode(b)
		f := &statResponseFields{}
		for _, e := range m.Entries {
			f.Entries = append(f.Entries, statEntryFields{Name: e.Name, Value: e.Value})
		}
		return f, err
	}),
	{wire.OpPing, "request"}:    pingCodec,
	{wire.OpPing, "response"}:   pingCodec,
	{wire.OpAcquire, "request"}: keysCodec(wire.OpAcquire),
	{wire.OpAcquire, "response"}: mk(func(f *acquireResponseFields) ([]byte, error) {
		var m wire.AcquireResponse
		for _, e := range f.Entries {
			o, err := outcomeOf(e.Outcome)
			if err != nil {
				return nil, err
			}
			m.Entries = append(m.Entries, wire.AcquireEntry{Outcome: o, Token: wire.FillToken{Fill: e.Fill, Epoch: e.Epoch, Turn: e.Turn}})
		}
		return m.AppendTo(nil), nil
	}, func(b []byte) (*acquireResponseFields, error) {
		var m wire.AcquireResponse
		err := m.Decode(b, maxBatch)
		f := &acquireResponseFields{}
		for _, e := range m.Entries {
			f.Entries = append(f.Entries, acquireEntryFields{Outcome: e.Outcome.String(), tokenFields: tokenFields{e.Token.Fill, e.Token.Epoch, e.Token.Turn}})
		}
		return f, err
	}),
	{wire.OpFillCommit, "request"}: mk(func(f *fillCommitRequestFields) ([]byte, error) {
		m := wire.FillCommitRequest{Namespace: f.Namespace}
		var lens []uint32
		for _, bf := range f.Blocks {
			pb, err := putBlock(bf.putBlockFields)
			if err != nil {
				return nil, err
			}
			m.Blocks = append(m.Blocks, wire.FillBlock{Token: wire.FillToken{Fill: bf.Fill, Epoch: bf.Epoch, Turn: bf.Turn},
				Key: pb.Key, Parent: pb.Parent, ValidLength: pb.ValidLength, Len: pb.Len, Position: pb.Position, TokenIDs: pb.TokenIDs})
			lens = append(lens, pb.Len)
		}
		return withPayloads(m.AppendTo(nil), lens, f.Payloads)
	}, func(b []byte) (*fillCommitRequestFields, error) {
		var m wire.FillCommitRequest
		ps, err := splitPayloads(b, func(t []byte) ([]uint32, error) {
			if _, err := m.Decode(t, maxBatch); err != nil {
				return nil, err
			}
			var lens []uint32
			for _, fb := range m.Blocks {
				lens = append(lens, fb.Len)
			}
			return lens, nil
		})
		f := &fillCommitRequestFields{Namespace: bytes.Clone(m.Namespace), Payloads: ps}
		for _, fb := range m.Blocks {
			f.Blocks = append(f.Blocks, fillBlockFields{tokenFields{fb.Token.Fill, fb.Token.Epoch, fb.Token.Turn},
				putBlockFieldsOf(wire.PutBlock{Key: fb.Key, Parent: fb.Parent, ValidLength: fb.ValidLength, Len: fb.Len, Position: fb.Position, TokenIDs: fb.TokenIDs})})
		}
		return f, err
	}),
	{wire.OpFillCommit, "response"}: statusCodec,
	{wire.OpFillAbort, "request"}: mk(func(f *fillAbortRequestFields) ([]byte, error) {
		m := wire.FillAbortRequest{Namespace: f.Namespace}
		for _, t := range f.Tokens {
			m.Tokens = append(m.Tokens, wire.FillToken{Fill: t.Fill, Epoch: t.Epoch, Turn: t.Turn})
		}
		return m.AppendTo(nil), nil
	}, func(b []byte) (*fillAbortRequestFields, error) {
		var m wire.FillAbortRequest
		err := m.Decode(b, maxBatch)
		f := &fillAbortRequestFields{Namespace: bytes.Clone(m.Namespace)}
		for _, t := range m.Tokens {
			f.Tokens = append(f.Tokens, tokenFields{t.Fill, t.Epoch, t.Turn})
		}
		return f, err
	}),
	{wire.OpFillAbort, "response"}: statusCodec,
	{wire.OpWait, "request"}: mk(func(f *waitRequestFields) ([]byte, error) {
		return (&wire.WaitRequest{Namespace: f.Namespace, TimeoutMillis: f.TimeoutMs, Fills: f.Fills}).AppendTo(nil), nil
	}, func(b []byte) (*waitRequestFields, error) {
		var m wire.WaitRequest
		err := m.Decode(b, maxBatch)
		return &waitRequestFields{Namespace: bytes.Clone(m.Namespace), TimeoutMs: m.TimeoutMillis, Fills: m.Fills}, err
	}),
	{wire.OpWait, "response"}: mk(func(f *waitResponseFields) ([]byte, error) {
		var m wire.WaitResponse
		for _, e := range f.Entries {
			k, err := noticeOf(e.Notice)
			if err != nil {
				return nil, err
			}
			m.Entries = append(m.Entries, wire.WaitEntry{Kind: k, Token: wire.FillToken{Fill: e.Fill, Epoch: e.Epoch, Turn: e.Turn}})
		}
		return m.AppendTo(nil), nil
	}, func(b []byte) (*waitResponseFields, error) {
		var m wire.WaitResponse
		err := m.Decode(b, maxBatch)
		f := &waitResponseFields{}
		for _, e := range m.Entries {
			f.Entries = append(f.Entries, waitEntryFields{Notice: e.Kind.String(), tokenFields: tokenFields{e.Token.Fill, e.Token.Epoch, e.Token.Turn}})
		}
		return f, err
	}),
	{wire.OpMembers, "request"}: emptyCodec,
	{wire.OpMembers, "response"}: mk(func(f *membersResponseFields) ([]byte, error) {
		m := wire.MembersResponse{Epoch: f.Epoch}
		for _, x := range f.Members {
			m.Members = append(m.Members, wire.MemberInfo{ID: x.ID, Addr: x.Addr, FaultDomain: x.Domain, ProtoVersion: x.Proto, CapacityBytes: x.Capacity, Flags: wire.MemberFlags(x.Flags)})
		}
		return m.AppendTo(nil), nil
	}, func(b []byte) (*membersResponseFields, error) {
		var m wire.MembersResponse
		err := m.Decode(b)
		f := &membersResponseFields{Epoch: m.Epoch}
		for _, x := range m.Members {
			f.Members = append(f.Members, memberFields{ID: x.ID, Addr: x.Addr, Domain: x.FaultDomain, Proto: x.ProtoVersion, Capacity: x.CapacityBytes, Flags: uint8(x.Flags)})
		}
		return f, err
	}),
	{wire.OpPutOpaque, "request"}: mk(func(f *putOpaqueRequestFields) ([]byte, error) {
		m := wire.PutOpaqueRequest{Namespace: f.Namespace}
		var lens []uint32
		for _, bf := range f.Blocks {
			k, err := key(bf.Key)
			if err != nil {
				return nil, err
			}
			m.Blocks = append(m.Blocks, wire.OpaqueBlock{Key: k, Name: bf.Name, Len: bf.Length})
			lens = append(lens, bf.Length)
		}
		return withPayloads(m.AppendTo(nil), lens, f.Payloads)
	}, func(b []byte) (*putOpaqueRequestFields, error) {
		var m wire.PutOpaqueRequest
		ps, err := splitPayloads(b, func(t []byte) ([]uint32, error) {
			if _, err := m.Decode(t, maxBatch); err != nil {
				return nil, err
			}
			var lens []uint32
			for _, ob := range m.Blocks {
				lens = append(lens, ob.Len)
			}
			return lens, nil
		})
		f := &putOpaqueRequestFields{Namespace: bytes.Clone(m.Namespace), Payloads: ps}
		for _, ob := range m.Blocks {
			f.Blocks = append(f.Blocks, opaqueBlockFields{Key: ob.Key[:], Name: bytes.Clone(ob.Name), Length: ob.Len})
		}
		return f, err
	}),
	{wire.OpPutOpaque, "response"}: statusCodec,
	{wire.OpRegister, "request"}: mk(func(f *registerRequestFields) ([]byte, error) {
		return (&wire.RegisterRequest{Region: f.Region, Length: f.Length}).AppendTo(nil), nil
	}, func(b []byte) (*registerRequestFields, error) {
		var m wire.RegisterRequest
		err := m.Decode(b)
		return &registerRequestFields{Region: m.Region, Length: m.Length}, err
	}),
	{wire.OpRegister, "response"}: mk(func(f *registerResponseFields) ([]byte, error) {
		mode, err := nameKey(regionModeNames, f.Mode)
		return (&wire.RegisterResponse{Mode: mode}).AppendTo(nil), err
	}, func(b []byte) (*registerResponseFields, error) {
		var m wire.RegisterResponse
		err := m.Decode(b)
		return &registerResponseFields{Mode: regionModeNames[m.Mode]}, err
	}),
	{wire.OpUnregister, "request"}: mk(func(f *unregisterRequestFields) ([]byte, error) {
		return (&wire.UnregisterRequest{Region: f.Region}).AppendTo(nil), nil
	}, func(b []byte) (*unregisterRequestFields, error) {
		var m wire.UnregisterRequest
		err := m.Decode(b)
		return &unregisterRequestFields{Region: m.Region}, err
	}),
	{wire.OpUnregister, "response"}: emptyCodec,
	{wire.OpGetInto, "request"}: mk(func(f *getIntoRequestFields) ([]byte, error) {
		m := wire.GetIntoRequest{Namespace: f.Namespace, LeaseID: f.LeaseID, Region: f.Region}
		for _, e := range f.Entries {
			k, err := key(e.Key)
			if err != nil {
				return nil, err
			}
			m.Keys = append(m.Keys, k)
			m.Slots = append(m.Slots, wire.Slot{Offset: e.Offset, Len: e.Capacity})
		}
		return m.AppendTo(nil), nil
	}, func(b []byte) (*getIntoRequestFields, error) {
		var m wire.GetIntoRequest
		err := m.Decode(b, maxBatch)
		f := &getIntoRequestFields{Namespace: bytes.Clone(m.Namespace), LeaseID: m.LeaseID, Region: m.Region}
		for i := range m.Keys {
			f.Entries = append(f.Entries, getIntoEntryFields{Key: m.Keys[i][:], Offset: m.Slots[i].Offset, Capacity: m.Slots[i].Len})
		}
		return f, err
	}),
	{wire.OpGetInto, "response"}: mk(func(f *getIntoResponseFields) ([]byte, error) {
		bms, err := blockMetas(f.Blocks)
		return (&wire.GetIntoResponse{Blocks: bms}).AppendTo(nil), err
	}, func(b []byte) (*getIntoResponseFields, error) {
		var m wire.GetIntoResponse
		err := m.Decode(b, maxBatch)
		return &getIntoResponseFields{Blocks: blockMetaFieldsOf(m.Blocks)}, err
	}),
	{wire.OpPutFrom, "request"}: mk(func(f *putFromRequestFields) ([]byte, error) {
		m := wire.PutFromRequest{Region: f.Region, Offsets: f.Offsets, Put: wire.PutRequest{Namespace: f.Namespace}}
		for _, bf := range f.Blocks {
			pb, err := putBlock(bf)
			if err != nil {
				return nil, err
			}
			m.Put.Blocks = append(m.Put.Blocks, pb)
		}
		return m.AppendTo(nil), nil
	}, func(b []byte) (*putFromRequestFields, error) {
		var m wire.PutFromRequest
		err := m.Decode(b, maxBatch)
		f := &putFromRequestFields{Region: m.Region, Offsets: m.Offsets, Namespace: bytes.Clone(m.Put.Namespace)}
		for _, pb := range m.Put.Blocks {
			f.Blocks = append(f.Blocks, putBlockFieldsOf(pb))
		}
		return f, err
	}),
	{wire.OpPutFrom, "response"}: statusCodec,
	{wire.OpPutOpaqueFrom, "request"}: mk(func(f *putOpaqueFromRequestFields) ([]byte, error) {
		m := wire.PutOpaqueFromRequest{Region: f.Region, Offsets: f.Offsets, Put: wire.PutOpaqueRequest{Namespace: f.Namespace}}
		for _, bf := range f.Blocks {
			k, err := key(bf.Key)
			if err != nil {
				return nil, err
			}
			m.Put.Blocks = append(m.Put.Blocks, wire.OpaqueBlock{Key: k, Name: bf.Name, Len: bf.Length})
		}
		return m.AppendTo(nil), nil
	}, func(b []byte) (*putOpaqueFromRequestFields, error) {
		var m wire.PutOpaqueFromRequest
		err := m.Decode(b, maxBatch)
		f := &putOpaqueFromRequestFields{Region: m.Region, Offsets: m.Offsets, Namespace: bytes.Clone(m.Put.Namespace)}
		for _, ob := range m.Put.Blocks {
			f.Blocks = append(f.Blocks, opaqueBlockFields{Key: ob.Key[:], Name: bytes.Clone(ob.Name), Length: ob.Len})
		}
		return f, err
	}),
	{wire.OpPutOpaqueFrom, "response"}: statusCodec,
}

var pingCodec = mk(func(f *pingFields) ([]byte, error) { return f.Data, nil }, func(b []byte) (*pingFields, error) {
	if len(b) > wire.MaxPingLen {
		return nil, fmt.Errorf("PING body of %d bytes", len(b))
	}
	return &pingFields{Data: bytes.Clone(b)}, nil
})

var errorCodec = mk(func(f *errorFields) ([]byte, error) {
	c, err := codeOf(f.Code)
	if err != nil {
		return nil, err
	}
	e := wire.Error{Code: c, Message: f.Message}
	if (f.Epoch != nil) != (c == wire.CodeWrongEpoch) {
		return nil, fmt.Errorf("epoch is carried by WRONG_EPOCH, and only there")
	}
	if f.Epoch != nil {
		e.Epoch = *f.Epoch
	}
	if f.RetryAfterMs != nil {
		if c == wire.CodeWrongEpoch || *f.RetryAfterMs == 0 {
			return nil, fmt.Errorf("retry_after_ms %d with %s", *f.RetryAfterMs, c)
		}
		e.RetryAfter = time.Duration(*f.RetryAfterMs) * time.Millisecond
	}
	return e.AppendTo(nil), nil
}, func(b []byte) (*errorFields, error) {
	e, err := wire.DecodeError(b)
	if err != nil {
		return nil, err
	}
	f := &errorFields{Code: e.Code.String(), Message: e.Message}
	if e.Code == wire.CodeWrongEpoch {
		f.Epoch = &e.Epoch
	}
	if e.RetryAfter > 0 {
		ms := uint32(e.RetryAfter / time.Millisecond)
		f.RetryAfterMs = &ms
	}
	return f, nil
})

func codecOf(op wire.Opcode, kind string) (codec, error) {
	if kind == "error" {
		return errorCodec, nil
	}
	c, ok := codecs[codecKey{op, kind}]
	if !ok {
		return codec{}, fmt.Errorf("no %s codec for %s", kind, op)
	}
	return c, nil
}
