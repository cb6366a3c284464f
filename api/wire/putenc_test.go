package wire_test

import (
	"bytes"
	"reflect"
	"testing"

	"github.com/gpucache/gpucache/api/wire"
)

// A PUT table encoded entry by entry (AppendPutHead, then AppendPutBlock per
// block, as the client does) is byte for byte PutRequest.AppendTo, and
// decodes back to the same request.
func TestAppendPutHeadAndBlocksEqualPutRequest(t *testing.T) {
	keys := sampleKeys(3)
	req := &wire.PutRequest{Namespace: sampleNamespace(t), Blocks: []wire.PutBlock{
		{Key: keys[0], ValidLength: 16, Len: 65536, TokenIDs: sampleTokens(16, 1)},
		{Key: keys[1], Parent: keys[0], ValidLength: 16, Len: 5, Position: 16, TokenIDs: sampleTokens(16, 2)},
		{Key: keys[2], Parent: keys[1], ValidLength: 1, Len: 0, Position: 32, TokenIDs: sampleTokens(3, 3)},
	}}
	head := []byte("prefix")
	got := wire.AppendPutHead(append([]byte(nil), head...), req.Namespace, len(req.Blocks))
	for i := range req.Blocks {
		before := len(got)
		got = wire.AppendPutBlock(got, &req.Blocks[i])
		if n := len(got) - before; n != wire.PutBlockSize(len(req.Blocks[i].TokenIDs)) {
			t.Fatalf("block %d: %d bytes, PutBlockSize says %d", i, n, wire.PutBlockSize(len(req.Blocks[i].TokenIDs)))
		}
	}
	want := req.AppendTo(append([]byte(nil), head...))
	if !bytes.Equal(got, want) {
		t.Fatalf("entry-by-entry table\n%x\nwant\n%x", got, want)
	}
	var dec wire.PutRequest
	total, err := dec.Decode(got[len(head):], maxBatch)
	if err != nil || total != 65541 {
		t.Fatalf("decode: total %d, %v", total, err)
	}
	if !reflect.DeepEqual(&dec, req) {
		t.Fatalf("decoded %+v", dec)
	}
}
