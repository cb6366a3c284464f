package flash

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
)

// FuzzRecordHeader decodes arbitrary bytes as a record header. With fix
// set the header checksum is recomputed first, so the fuzzer reaches the
// field checks behind it. A header that decodes is canonical (encoding
// it gives back the same bytes) and within the format's bounds; every
// other one is ErrCorrupt or ErrVersion.
func FuzzRecordHeader(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte, fix bool) {
		if fix && len(b) >= recHeaderUsed {
			b = bytes.Clone(b)
			refreshRecCRC(b)
		}
		h, err := decodeRecHeader(b)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrVersion) {
				t.Fatalf("an error of neither kind: %v", err)
			}
			return
		}
		out := make([]byte, recHeaderUsed)
		h.encode(out)
		if !bytes.Equal(out, b[:recHeaderUsed]) {
			t.Fatalf("decoded header %+v does not encode back to its bytes", h)
		}
		if len(h.tenant) > MaxTenantLen || h.length < 0 || h.length > maxRecordLength ||
			(h.kind != kindBlock && h.kind != kindTombstone) || h.extent()%align != 0 {
			t.Fatalf("decoded header out of bounds: %+v", h)
		}
	})
}

// fixSegment recomputes the checksums of a segment image: its header's,
// and each record header's found where the scanner will look, so the
// fuzzer mutates fields rather than checksums.
func fixSegment(b []byte) {
	if len(b) < segHeaderUsed {
		return
	}
	refreshSegCRC(b)
	for off := int64(segHeaderSize); off+recHeaderUsed <= int64(len(b)); {
		r := b[off : off+recHeaderUsed]
		if [4]byte(r[:4]) != recMagic {
			return
		}
		refreshRecCRC(r)
		h, err := decodeRecHeader(r)
		if err != nil || h.extent() <= 0 {
			return
		}
		off += h.extent()
	}
}

// expandSegment turns a compact fuzz input into a segment image: each
// 512 bytes of b are the start of a 4096-byte block (the part of a
// header the format defines; the scanner reads nothing else), the rest
// of the block zero; a shorter last piece ends the file, and tail%4096
// zero bytes follow. The fuzzer thus mutates headers, not padding.
func expandSegment(b []byte, tail uint16) []byte {
	out := make([]byte, 0, (len(b)/recHeaderUsed+1)*align+align)
	for len(b) >= recHeaderUsed {
		out = append(out, b[:recHeaderUsed]...)
		out = append(out, make([]byte, align-recHeaderUsed)...)
		b = b[recHeaderUsed:]
	}
	out = append(out, b...)
	return append(out, make([]byte, int(tail)%align)...)
}

// FuzzScanSegment scans a segment image (expandSegment; with fix set,
// its checksums recomputed first). The scan never panics, visits only
// records that lie inside the file at aligned, increasing offsets and
// decode from the bytes there, and stops at the end of the file or says
// why it stopped.
func FuzzScanSegment(f *testing.F) {
	f.Fuzz(func(t *testing.T, compact []byte, tail uint16, fix bool) {
		b := expandSegment(compact, tail)
		if fix {
			fixSegment(b)
		}
		size := int64(len(b))
		next := int64(segHeaderSize)
		res, err := scanSegment(bytes.NewReader(b), size, 0, func(h *recHeader, off int64) {
			if off != next || off%align != 0 {
				t.Fatalf("record at %d, want %d", off, next)
			}
			if off+h.extent() > size {
				t.Fatalf("record at %d of %d bytes passes the end (%d)", off, h.extent(), size)
			}
			again, err := decodeRecHeader(b[off:])
			if err != nil || again != *h {
				t.Fatalf("record at %d does not decode from its bytes: %v", off, err)
			}
			next = off + h.extent()
		})
		if err != nil {
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrVersion) {
				t.Fatalf("an error of neither kind: %v", err)
			}
			return
		}
		if res.seq != binary.LittleEndian.Uint64(b[shSeq:]) {
			t.Fatalf("seq %d", res.seq)
		}
		if res.end != next || res.end > size || (res.torn == nil && res.end != size) {
			t.Fatalf("end %d (last record ended at %d, size %d), torn %v", res.end, next, size, res.torn)
		}
	})
}
