package wire_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/gpucache/gpucache/api/wire"
)

func sampleOpaque(t testing.TB) *wire.PutOpaqueRequest {
	keys := sampleKeys(2)
	return &wire.PutOpaqueRequest{Namespace: sampleNamespace(t), Blocks: []wire.OpaqueBlock{
		{Key: keys[0], Name: []byte("llama@00000000@0@ab12"), Len: 5},
		{Key: keys[1], Name: bytes.Repeat([]byte{'k'}, wire.MaxOpaqueName), Len: 0},
	}}
}

// TestPutOpaqueRoundTrip: the table encodes as the spec lays it out and
// decodes to the same message and payload total.
func TestPutOpaqueRoundTrip(t *testing.T) {
	m := sampleOpaque(t)
	b := m.AppendTo(nil)
	want := 4 + len(m.Namespace) + 4 + wire.OpaqueBlockSize(len(m.Blocks[0].Name)) + wire.OpaqueBlockSize(wire.MaxOpaqueName)
	if len(b) != want {
		t.Fatalf("encoded %d bytes, want %d", len(b), want)
	}
	var got wire.PutOpaqueRequest
	total, err := got.Decode(b, maxBatch)
	if err != nil {
		t.Fatal(err)
	}
	if total != 5 || !bytes.Equal(got.AppendTo(nil), b) || string(got.Blocks[0].Name) != "llama@00000000@0@ab12" {
		t.Fatalf("decoded %+v (total %d)", got, total)
	}
	if wire.OpPutOpaque.Since() != wire.Version3 || !wire.OpPutOpaque.Mutating() || wire.OpPutOpaque.String() != "PUT_OPAQUE" {
		t.Fatal("PUT_OPAQUE misdeclared")
	}
}

// TestPutOpaqueMalformed: every defect of the table has its typed answer.
func TestPutOpaqueMalformed(t *testing.T) {
	good := sampleOpaque(t).AppendTo(nil)
	nsEnd := 4 + len(sampleNamespace(t))
	name0 := nsEnd + 4 + wire.KeySize // offset of the first name length
	mut := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(good)) }
	cases := map[string]struct {
		b    []byte
		code wire.Code
	}{
		"empty":          {nil, wire.CodeMalformed},
		"truncated":      {good[:len(good)-1], wire.CodeMalformed},
		"trailing":       {append(bytes.Clone(good), 0), wire.CodeMalformed},
		"empty name":     {mut(func(b []byte) []byte { binary.LittleEndian.PutUint16(b[name0:], 0); return b }), wire.CodeMalformed},
		"name too long":  {mut(func(b []byte) []byte { binary.LittleEndian.PutUint16(b[name0:], wire.MaxOpaqueName+1); return b }), wire.CodeMalformed},
		"name past end":  {mut(func(b []byte) []byte { binary.LittleEndian.PutUint16(b[name0:], 0xffff); return b }), wire.CodeMalformed},
		"count over max": {mut(func(b []byte) []byte { binary.LittleEndian.PutUint32(b[nsEnd:], maxBatch+1); return b }), wire.CodeBatchTooLarge},
		"count past end": {mut(func(b []byte) []byte { binary.LittleEndian.PutUint32(b[nsEnd:], 100); return b }), wire.CodeMalformed},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var m wire.PutOpaqueRequest
			_, err := m.Decode(tc.b, maxBatch)
			if !errors.Is(err, &wire.Error{Code: tc.code}) {
				t.Fatalf("err %v, want %s", err, tc.code)
			}
		})
	}
}

func FuzzPutOpaqueRequest(f *testing.F) {
	f.Add(sampleOpaque(f).AppendTo(nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		var m wire.PutOpaqueRequest
		total, err := m.Decode(b, maxBatch)
		// Decoding into a dirty message gives the same answer.
		d := wire.PutOpaqueRequest{Namespace: []byte("junk"), Blocks: make([]wire.OpaqueBlock, dirtyCap)[:3]}
		for i := range d.Blocks[:dirtyCap] {
			d.Blocks[:dirtyCap][i] = wire.OpaqueBlock{Key: wire.Key{0xaa}, Name: []byte("stale"), Len: 9}
		}
		dtotal, derr := d.Decode(b, maxBatch)
		if (err == nil) != (derr == nil) {
			t.Fatalf("fresh err %v, dirty err %v", err, derr)
		}
		if err != nil {
			checkDecodeErr(t, err, bodyCodes)
			return
		}
		var sum uint64
		for _, ob := range m.Blocks {
			if len(ob.Name) == 0 || len(ob.Name) > wire.MaxOpaqueName {
				t.Fatalf("name of %d bytes accepted", len(ob.Name))
			}
			sum += uint64(ob.Len)
		}
		if total != sum || dtotal != total {
			t.Fatalf("payload total %d (dirty %d), lengths sum to %d", total, dtotal, sum)
		}
		if out := m.AppendTo(nil); !bytes.Equal(out, b) || !bytes.Equal(d.AppendTo(nil), b) {
			t.Fatalf("not canonical:\n in  %x\n out %x", b, out)
		}
	})
}
