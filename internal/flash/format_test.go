package flash

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"log/slog"
	"strings"
	"testing"
)

func slogNew(h slog.Handler) *slog.Logger { return slog.New(h) }

// refreshSegCRC recomputes a segment header's checksum after a test
// edited it.
func refreshSegCRC(b []byte) {
	binary.LittleEndian.PutUint32(b[shCRC:], crc32.Checksum(b[:shCRC], castagnoli))
}

// refreshRecCRC recomputes a record header's checksum.
func refreshRecCRC(b []byte) {
	binary.LittleEndian.PutUint32(b[rhCRC:], crc32.Checksum(b[:rhCRC], castagnoli))
}

func sampleHeader() recHeader {
	h := recHeader{kind: kindBlock, tokens: 16, length: 12345, tenant: "acme"}
	for i := range h.digest {
		h.digest[i], h.key[i], h.parent[i] = byte(i), byte(i*3), byte(i*7)
	}
	h.sum = payloadSum(&h, bytes.Repeat([]byte{7}, int(h.length)))
	return h
}

func TestRecordHeaderRoundTrip(t *testing.T) {
	tomb := recHeader{kind: kindTombstone, target: 9, tenant: strings.Repeat("t", MaxTenantLen)}
	tomb.digest[0], tomb.key[31] = 1, 2
	for _, h := range []recHeader{sampleHeader(), tomb} {
		b := make([]byte, recHeaderSize)
		h.encode(b)
		got, err := decodeRecHeader(b)
		if err != nil || got != h {
			t.Fatalf("round trip: %+v, %v; want %+v", got, err, h)
		}
		if !allZero(b[recHeaderUsed:]) {
			t.Fatal("encode wrote past the used part")
		}
	}
}

// TestRecordHeaderDetectsEveryFlip: a flipped bit anywhere in the part a
// header's checksum covers (or in the checksum) fails the decode.
func TestRecordHeaderDetectsEveryFlip(t *testing.T) {
	h := sampleHeader()
	b := make([]byte, recHeaderUsed)
	h.encode(b)
	for i := range recHeaderUsed {
		for bit := range 8 {
			c := bytes.Clone(b)
			c[i] ^= 1 << bit
			if _, err := decodeRecHeader(c); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("byte %d bit %d flipped: %v", i, bit, err)
			}
		}
	}
}

func TestRecordHeaderVersionAndFields(t *testing.T) {
	h := sampleHeader()
	b := make([]byte, recHeaderUsed)
	h.encode(b)
	v2 := bytes.Clone(b)
	binary.LittleEndian.PutUint16(v2[rhVersion:], 2)
	refreshRecCRC(v2)
	if _, err := decodeRecHeader(v2); !errors.Is(err, ErrVersion) {
		t.Fatalf("version 2: %v", err)
	}
	for name, edit := range map[string]func([]byte){
		"kind 3":            func(c []byte) { c[rhKind] = 3 },
		"reserved":          func(c []byte) { c[rhReserved1] = 1 },
		"tenant past len":   func(c []byte) { c[rhTenant+10] = 'x' },
		"block target":      func(c []byte) { c[rhTarget] = 1 },
		"block no tenant":   func(c []byte) { c[rhTenantLen] = 0; clear(c[rhTenant : rhTenant+4]) },
		"tombstone payload": func(c []byte) { c[rhKind] = byte(kindTombstone) },
		"huge length":       func(c []byte) { binary.LittleEndian.PutUint64(c[rhLength:], 1<<50) },
	} {
		c := bytes.Clone(b)
		edit(c)
		refreshRecCRC(c)
		if _, err := decodeRecHeader(c); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// TestPayloadSumBindsIdentity: the same payload under any other identity
// field has another checksum.
func TestPayloadSumBindsIdentity(t *testing.T) {
	h := sampleHeader()
	p := bytes.Repeat([]byte{7}, int(h.length))
	want := payloadSum(&h, p)
	for name, edit := range map[string]func(*recHeader){
		"digest": func(o *recHeader) { o.digest[5]++ },
		"key":    func(o *recHeader) { o.key[0]++ },
		"parent": func(o *recHeader) { o.parent[31]++ },
		"tokens": func(o *recHeader) { o.tokens++ },
		"tenant": func(o *recHeader) { o.tenant = "acmf" },
		"length": func(o *recHeader) { o.length-- },
	} {
		o := h
		edit(&o)
		pp := p
		if o.length != h.length {
			pp = p[:o.length]
		}
		if payloadSum(&o, pp) == want {
			t.Errorf("%s changed, checksum did not", name)
		}
	}
	if payloadSum(&h, p) != want {
		t.Fatal("checksum not deterministic")
	}
}

func TestSegmentHeader(t *testing.T) {
	b := make([]byte, segHeaderSize)
	encodeSegHeader(b, 42, mib)
	if seq, err := decodeSegHeader(b); seq != 42 || err != nil {
		t.Fatalf("%d, %v", seq, err)
	}
	for i := range shCRC + 4 {
		c := bytes.Clone(b)
		c[i] ^= 0x10
		if _, err := decodeSegHeader(c); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("byte %d flipped: %v", i, err)
		}
	}
	c := bytes.Clone(b)
	binary.LittleEndian.PutUint32(c[shVersion:], 9)
	refreshSegCRC(c)
	if _, err := decodeSegHeader(c); !errors.Is(err, ErrVersion) {
		t.Fatalf("version 9: %v", err)
	}
}

func TestSegName(t *testing.T) {
	for _, seq := range []uint64{1, 0xabc, 1<<64 - 1} {
		got, ok := parseSegName(segName(seq))
		if !ok || got != seq {
			t.Fatalf("%d: %d %v", seq, got, ok)
		}
	}
	for _, bad := range []string{"seg-0000000000000000.flash", "seg-000000000000000A.flash", "seg-1.flash", "x-0000000000000001.flash", "seg-0000000000000001.flash.tmp"} {
		if _, ok := parseSegName(bad); ok {
			t.Errorf("%s parsed", bad)
		}
	}
}
