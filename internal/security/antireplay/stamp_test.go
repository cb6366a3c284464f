package antireplay

import (
	"bytes"
	"errors"
	"testing"
	"time"
)

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
