package wire_test

import (
	"bytes"
	"errors"
	"slices"
	"testing"

	"github.com/gpucache/gpucache/api/wire"
)

// Every decoder has a fuzz target. Each checks three properties for any
// input:
//
//  1. the decoder does not panic;
//  2. an error is a *wire.Error whose code is one the decoder may return;
//  3. a successful decode is canonical: re-encoding gives the input bytes.
//
// Seed corpora live in testdata/fuzz/<FuzzName>/: valid encodings and
// malformed ones (truncated, trailing bytes, over-long strings and counts,
// unknown statuses). The sample messages of messages_test.go are added too,
// so the seeds track the codec.

// bodyCodes are the codes a body decoder may return.
var bodyCodes = []wire.Code{wire.CodeMalformed, wire.CodeBatchTooLarge}

func checkDecodeErr(t *testing.T, err error, allowed []wire.Code) {
	t.Helper()
	var we *wire.Error
	if !errors.As(err, &we) {
		t.Fatalf("error %v (%T) is not a *wire.Error", err, err)
	}
	if !slices.Contains(allowed, we.Code) {
		t.Fatalf("error code %s not in %v: %v", we.Code, allowed, err)
	}
	if !errors.Is(err, &wire.Error{Code: we.Code}) {
		t.Fatalf("errors.Is does not match its own code: %v", err)
	}
}

// fuzzBody runs the shared properties over decode, which returns the
// re-encoding of what it decoded.
func fuzzBody(f *testing.F, sample string, decode func(t *testing.T, b []byte) ([]byte, error)) {
	for _, c := range sampleMessages(f) {
		if c.name == sample {
			f.Add(c.msg.AppendTo(nil))
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		out, err := decode(t, b)
		if err != nil {
			checkDecodeErr(t, err, bodyCodes)
			return
		}
		if !bytes.Equal(out, b) {
			t.Fatalf("not canonical:\n in  %x\n out %x", b, out)
		}
	})
}

func FuzzDecodeHeader(f *testing.F) {
	f.Add(sampleHeader().Append(nil))
	l := wire.DefaultLimits()
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := wire.DecodeHeader(b)
		if err != nil {
			checkDecodeErr(t, err, []wire.Code{wire.CodeMalformed, wire.CodeBadMagic})
			return
		}
		if out := h.Append(nil); !bytes.Equal(out, b[:wire.HeaderSize]) {
			t.Fatalf("not canonical:\n in  %x\n out %x", b[:wire.HeaderSize], out)
		}
		if err := l.CheckRequest(h); err != nil {
			checkDecodeErr(t, err, []wire.Code{wire.CodeFrameTooLarge, wire.CodeUnsupportedVersion,
				wire.CodeMalformed, wire.CodeUnknownOpcode})
		}
	})
}

func FuzzHelloRequest(f *testing.F) {
	fuzzBody(f, "HelloRequest", func(t *testing.T, b []byte) ([]byte, error) {
		var m wire.HelloRequest
		err := m.Decode(b)
		return m.AppendTo(nil), err
	})
}

func FuzzHelloResponse(f *testing.F) {
	fuzzBody(f, "HelloResponse", func(t *testing.T, b []byte) ([]byte, error) {
		var m wire.HelloResponse
		err := m.Decode(b)
		return m.AppendTo(nil), err
	})
}

// dirtyCap is the capacity of the junk lists below: larger than most fuzz
// inputs' lists (the reuse path), smaller than the largest (the grow path).
const dirtyCap = 64

// dirtyKeys returns a key slice with spare capacity full of junk, standing in
// for a message that is decoded into again and again (its backing array is
// reused).
func dirtyKeys() []wire.Key {
	full := make([]wire.Key, dirtyCap)
	for i := range full {
		for j := range full[i] {
			full[i][j] = 0xaa
		}
	}
	return full[:3]
}

// dirtyTokens returns a token id slice of its own, full of junk, with spare
// capacity on every other block (the reuse path) and none on the others
// (the grow path).
func dirtyTokens(i int) []uint32 {
	n := 7
	if i%2 == 0 {
		n = dirtyCap
	}
	ids := make([]uint32, n)
	for j := range ids {
		ids[j] = 0xaaaaaaaa
	}
	return ids[:3]
}

// sameDecode fails unless decoding into a dirty message gave the same
// outcome as decoding into a fresh one.
func sameDecode(t *testing.T, fresh, dirty []byte, errFresh, errDirty error) {
	t.Helper()
	if wire.ErrCode(errFresh) != wire.ErrCode(errDirty) || (errFresh == nil) != (errDirty == nil) {
		t.Fatalf("fresh decode: %v; dirty decode: %v", errFresh, errDirty)
	}
	if errFresh == nil && !bytes.Equal(fresh, dirty) {
		t.Fatalf("decoding into a used message differs:\n fresh %x\n dirty %x", fresh, dirty)
	}
}

func FuzzLookupRequest(f *testing.F) {
	fuzzBody(f, "LookupRequest", func(t *testing.T, b []byte) ([]byte, error) {
		var m wire.LookupRequest
		err := m.Decode(b, maxBatch)
		d := wire.LookupRequest{Namespace: []byte("junk"), LeaseTTLMillis: 9, Keys: dirtyKeys()}
		derr := d.Decode(b, maxBatch)
		sameDecode(t, m.AppendTo(nil), d.AppendTo(nil), err, derr)
		return m.AppendTo(nil), err
	})
}

func FuzzLookupResponse(f *testing.F) {
	fuzzBody(f, "LookupResponse", func(t *testing.T, b []byte) ([]byte, error) {
		var m wire.LookupResponse
		err := m.Decode(b)
		return m.AppendTo(nil), err
	})
}

func FuzzGetRequest(f *testing.F) {
	fuzzBody(f, "GetRequest", func(t *testing.T, b []byte) ([]byte, error) {
		var m wire.GetRequest
		err := m.Decode(b, maxBatch)
		d := wire.GetRequest{Namespace: []byte("junk"), LeaseID: 9, Keys: dirtyKeys()}
		derr := d.Decode(b, maxBatch)
		sameDecode(t, m.AppendTo(nil), d.AppendTo(nil), err, derr)
		return m.AppendTo(nil), err
	})
}

// sumLens is the payload total a table announces.
func sumLens[T any](items []T, n func(T) uint32) uint64 {
	var s uint64
	for _, it := range items {
		s += uint64(n(it))
	}
	return s
}

func FuzzGetResponse(f *testing.F) {
	fuzzBody(f, "GetResponse", func(t *testing.T, b []byte) ([]byte, error) {
		var m wire.GetResponse
		total, err := m.Decode(b, maxBatch)
		if err == nil {
			if want := sumLens(m.Blocks, func(bm wire.BlockMeta) uint32 { return bm.Len }); total != want {
				t.Fatalf("payload total %d, lengths sum to %d", total, want)
			}
			for _, bm := range m.Blocks {
				if bm.Status != wire.StatusHit && bm.Len != 0 {
					t.Fatalf("accepted %s with %d bytes", bm.Status, bm.Len)
				}
			}
		}
		return m.AppendTo(nil), err
	})
}

func FuzzPutRequest(f *testing.F) {
	fuzzBody(f, "PutRequest", func(t *testing.T, b []byte) ([]byte, error) {
		var m wire.PutRequest
		total, err := m.Decode(b, maxBatch)
		d := wire.PutRequest{Namespace: []byte("junk"), Blocks: make([]wire.PutBlock, dirtyCap)[:2]}
		for i := range d.Blocks[:dirtyCap] {
			d.Blocks[:dirtyCap][i] = wire.PutBlock{Key: wire.Key{0xaa}, Parent: wire.Key{0xbb}, ValidLength: 7, Len: 9,
				Position: 5, TokenIDs: dirtyTokens(i)}
		}
		dtotal, derr := d.Decode(b, maxBatch)
		sameDecode(t, m.AppendTo(nil), d.AppendTo(nil), err, derr)
		if err == nil && dtotal != total {
			t.Fatalf("payload total %d fresh, %d dirty", total, dtotal)
		}
		if err == nil {
			if want := sumLens(m.Blocks, func(pb wire.PutBlock) uint32 { return pb.Len }); total != want {
				t.Fatalf("payload total %d, lengths sum to %d", total, want)
			}
		}
		return m.AppendTo(nil), err
	})
}

func FuzzStatusResponse(f *testing.F) {
	fuzzBody(f, "StatusResponse", func(t *testing.T, b []byte) ([]byte, error) {
		var m wire.StatusResponse
		err := m.Decode(b, maxBatch)
		// A session of version 3 accepts exactly the answers of version 5
		// without READ_ONLY and FAULT, and decodes them the same.
		var old wire.StatusResponse
		oerr := old.DecodeVersion(b, maxBatch, wire.Version3)
		readOnly := err == nil && (slices.Contains(m.Statuses, wire.StatusReadOnly) || slices.Contains(m.Statuses, wire.StatusFault))
		switch {
		case oerr == nil && (err != nil || !slices.Equal(old.Statuses, m.Statuses)):
			t.Fatalf("version 3 decoded %v (%v), version 4 %v (%v)", old.Statuses, oerr, m.Statuses, err)
		case oerr != nil && err == nil && !readOnly:
			t.Fatalf("version 3 refused %v without READ_ONLY: %v", m.Statuses, oerr)
		case oerr != nil:
			checkDecodeErr(t, oerr, bodyCodes)
		}
		return m.AppendTo(nil), err
	})
}

func FuzzDeleteRequest(f *testing.F) {
	fuzzBody(f, "DeleteRequest", func(t *testing.T, b []byte) ([]byte, error) {
		var m wire.DeleteRequest
		err := m.Decode(b, maxBatch)
		d := wire.DeleteRequest{Namespace: []byte("junk"), Keys: dirtyKeys()}
		derr := d.Decode(b, maxBatch)
		sameDecode(t, m.AppendTo(nil), d.AppendTo(nil), err, derr)
		return m.AppendTo(nil), err
	})
}

func FuzzStatResponse(f *testing.F) {
	fuzzBody(f, "StatResponse", func(t *testing.T, b []byte) ([]byte, error) {
		var m wire.StatResponse
		err := m.Decode(b)
		return m.AppendTo(nil), err
	})
}

func FuzzDecodeError(f *testing.F) {
	fuzzBody(f, "Error", func(t *testing.T, b []byte) ([]byte, error) {
		e, err := wire.DecodeError(b)
		if err != nil {
			return nil, err
		}
		return e.AppendTo(nil), nil
	})
}

func FuzzMembersResponse(f *testing.F) {
	fuzzBody(f, "MembersResponse", func(t *testing.T, b []byte) ([]byte, error) {
		var m wire.MembersResponse
		err := m.Decode(b)
		return m.AppendTo(nil), err
	})
}

func FuzzAcquireRequest(f *testing.F) {
	fuzzBody(f, "AcquireRequest", func(t *testing.T, b []byte) ([]byte, error) {
		var m wire.AcquireRequest
		err := m.Decode(b, maxBatch)
		d := wire.AcquireRequest{Namespace: []byte("junk"), Keys: dirtyKeys()}
		derr := d.Decode(b, maxBatch)
		sameDecode(t, m.AppendTo(nil), d.AppendTo(nil), err, derr)
		return m.AppendTo(nil), err
	})
}

func FuzzAcquireResponse(f *testing.F) {
	fuzzBody(f, "AcquireResponse", func(t *testing.T, b []byte) ([]byte, error) {
		var m wire.AcquireResponse
		err := m.Decode(b, maxBatch)
		return m.AppendTo(nil), err
	})
}

func FuzzFillCommitRequest(f *testing.F) {
	fuzzBody(f, "FillCommitRequest", func(t *testing.T, b []byte) ([]byte, error) {
		var m wire.FillCommitRequest
		total, err := m.Decode(b, maxBatch)
		d := wire.FillCommitRequest{Namespace: []byte("junk"), Blocks: make([]wire.FillBlock, dirtyCap)[:2]}
		for i := range d.Blocks[:dirtyCap] {
			d.Blocks[:dirtyCap][i] = wire.FillBlock{Token: wire.FillToken{Fill: 1}, Key: wire.Key{0xaa}, ValidLength: 7, Len: 9,
				Position: 5, TokenIDs: dirtyTokens(i)}
		}
		dtotal, derr := d.Decode(b, maxBatch)
		sameDecode(t, m.AppendTo(nil), d.AppendTo(nil), err, derr)
		if err == nil && dtotal != total {
			t.Fatalf("payload total %d fresh, %d dirty", total, dtotal)
		}
		if err == nil {
			if want := sumLens(m.Blocks, func(fb wire.FillBlock) uint32 { return fb.Len }); total != want {
				t.Fatalf("payload total %d, lengths sum to %d", total, want)
			}
		}
		return m.AppendTo(nil), err
	})
}

func FuzzFillAbortRequest(f *testing.F) {
	fuzzBody(f, "FillAbortRequest", func(t *testing.T, b []byte) ([]byte, error) {
		var m wire.FillAbortRequest
		err := m.Decode(b, maxBatch)
		return m.AppendTo(nil), err
	})
}

func FuzzWaitRequest(f *testing.F) {
	fuzzBody(f, "WaitRequest", func(t *testing.T, b []byte) ([]byte, error) {
		var m wire.WaitRequest
		err := m.Decode(b, maxBatch)
		return m.AppendTo(nil), err
	})
}

func FuzzWaitResponse(f *testing.F) {
	fuzzBody(f, "WaitResponse", func(t *testing.T, b []byte) ([]byte, error) {
		var m wire.WaitResponse
		err := m.Decode(b, maxBatch)
		return m.AppendTo(nil), err
	})
}

// FuzzRegionControl fuzzes the three fixed-size decoders of version 5:
// REGISTER's request and answer, and UNREGISTER's request.
func FuzzRegionControl(f *testing.F) {
	f.Add((&wire.RegisterRequest{Region: 1, Length: 1 << 20}).AppendTo(nil))
	f.Add((&wire.RegisterResponse{Mode: wire.RegionSealed}).AppendTo(nil))
	f.Add((&wire.UnregisterRequest{Region: 7}).AppendTo(nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		var reg wire.RegisterRequest
		var resp wire.RegisterResponse
		var unreg wire.UnregisterRequest
		for _, c := range []struct {
			err error
			out func() []byte
		}{
			{reg.Decode(b), func() []byte { return reg.AppendTo(nil) }},
			{resp.Decode(b), func() []byte { return resp.AppendTo(nil) }},
			{unreg.Decode(b), func() []byte { return unreg.AppendTo(nil) }},
		} {
			if c.err != nil {
				checkDecodeErr(t, c.err, bodyCodes)
				continue
			}
			if out := c.out(); !bytes.Equal(out, b) {
				t.Fatalf("not canonical:\n in  %x\n out %x", b, out)
			}
		}
	})
}

func FuzzGetIntoRequest(f *testing.F) {
	fuzzBody(f, "GetIntoRequest", func(t *testing.T, b []byte) ([]byte, error) {
		m := wire.GetIntoRequest{Keys: dirtyKeys()}
		err := m.Decode(b, maxBatch)
		if err == nil && len(m.Keys) != len(m.Slots) {
			t.Fatalf("%d keys, %d slots", len(m.Keys), len(m.Slots))
		}
		return m.AppendTo(nil), err
	})
}

func FuzzGetIntoResponse(f *testing.F) {
	fuzzBody(f, "GetIntoResponse", func(t *testing.T, b []byte) ([]byte, error) {
		var m wire.GetIntoResponse
		err := m.Decode(b, maxBatch)
		return m.AppendTo(nil), err
	})
}

func FuzzPutFromRequest(f *testing.F) {
	fuzzBody(f, "PutFromRequest", func(t *testing.T, b []byte) ([]byte, error) {
		var m wire.PutFromRequest
		err := m.Decode(b, maxBatch)
		if err == nil && len(m.Offsets) != len(m.Put.Blocks) {
			t.Fatalf("%d offsets, %d entries", len(m.Offsets), len(m.Put.Blocks))
		}
		return m.AppendTo(nil), err
	})
}

func FuzzPutOpaqueFromRequest(f *testing.F) {
	fuzzBody(f, "PutOpaqueFromRequest", func(t *testing.T, b []byte) ([]byte, error) {
		var m wire.PutOpaqueFromRequest
		err := m.Decode(b, maxBatch)
		if err == nil && len(m.Offsets) != len(m.Put.Blocks) {
			t.Fatalf("%d offsets, %d entries", len(m.Offsets), len(m.Put.Blocks))
		}
		return m.AppendTo(nil), err
	})
}
