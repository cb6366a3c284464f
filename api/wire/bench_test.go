package wire_test

import (
	"fmt"
	"testing"

	"github.com/gpucache/gpucache/api/wire"
)

func BenchmarkHeader(b *testing.B) {
	h := sampleHeader()
	var buf [wire.HeaderSize]byte
	b.SetBytes(wire.HeaderSize)
	b.ReportAllocs()
	for b.Loop() {
		h.Encode(buf[:])
		got, err := wire.DecodeHeader(buf[:])
		if err != nil || got != h {
			b.Fatal(got, err)
		}
	}
}

func BenchmarkGetRequestDecode(b *testing.B) {
	ns := sampleNamespace(b)
	for _, n := range []int{1, 16, 256} {
		body := (&wire.GetRequest{Namespace: ns, LeaseID: 42, Keys: sampleKeys(n)}).AppendTo(nil)
		b.Run(fmt.Sprintf("batch=%d", n), func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			var m wire.GetRequest
			for b.Loop() {
				if err := m.Decode(body, wire.DefaultMaxBatch); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
