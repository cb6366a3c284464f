package stamp

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
	"time"
)

func nonce(i uint64) [16]byte {
	var n [16]byte
	binary.BigEndian.PutUint64(n[:], i)
	binary.BigEndian.PutUint64(n[8:], ^i)
	return n
}

func TestStampRoundTrip(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	s := New(at, nonce(42))
	b := s.Append([]byte("x"))
	if len(b) != 1+Size {
		t.Fatalf("len %d", len(b))
	}
	got, err := Parse(b[1:])
	if err != nil {
		t.Fatal(err)
	}
	if got != s || !time.Unix(0, got.UnixNano).Equal(at) {
		t.Fatalf("got %+v want %+v", got, s)
	}
}

func TestParseStampMalformed(t *testing.T) {
	good := New(time.Unix(1, 0), nonce(1)).Append(nil)
	top := bytes.Clone(good)
	top[7] |= 0x80
	for name, b := range map[string][]byte{
		"empty": nil, "short": good[:23], "long": append(bytes.Clone(good), 0), "top bit": top,
	} {
		if _, err := Parse(b); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v", name, err)
		}
	}
}
