package antireplay

import (
	"bytes"
	"errors"
	"testing"
	"time"
)

func TestStampRoundTrip(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	s := NewStamp(at, nonce(42))
	b := s.Append([]byte("x"))
	if len(b) != 1+StampSize {
		t.Fatalf("len %d", len(b))
	}
	got, err := ParseStamp(b[1:])
	if err != nil {
		t.Fatal(err)
	}
	if got != s || !time.Unix(0, got.UnixNano).Equal(at) {
		t.Fatalf("got %+v want %+v", got, s)
	}
}

func TestParseStampMalformed(t *testing.T) {
	good := NewStamp(time.Unix(1, 0), nonce(1)).Append(nil)
	top := bytes.Clone(good)
	top[7] |= 0x80
	for name, b := range map[string][]byte{
		"empty": nil, "short": good[:23], "long": append(bytes.Clone(good), 0), "top bit": top,
	} {
		if _, err := ParseStamp(b); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func FuzzParseStamp(f *testing.F) {
	f.Add(NewStamp(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), nonce(1)).Append(nil))
	f.Add(Stamp{UnixNano: 1<<63 - 1, Nonce: nonce(2)}.Append(nil))
	f.Add(make([]byte, StampSize))
	f.Add(bytes.Repeat([]byte{0xff}, StampSize))
	f.Add([]byte{})
	f.Add(make([]byte, StampSize+1))
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := ParseStamp(b)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error kind: %v", err)
			}
			return
		}
		if re := s.Append(nil); !bytes.Equal(re, b) {
			t.Fatalf("not canonical: % x vs % x", re, b)
		}
		// Feed the parsed stamp through a tiny Window twice: the second
		// Check must never succeed.
		w, _ := New(Config{MaxNonces: 2, Now: func() time.Time { return now }})
		first := w.CheckStamp("t", s)
		if err := w.CheckStamp("t", s); err == nil {
			t.Fatalf("replay accepted (first: %v)", first)
		}
	})
}
