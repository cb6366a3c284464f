package seal

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

func TestAppendDecodeSeal(t *testing.T) {
	r := newRing(t, newClock())
	s, _ := r.Seal(testIdentity, testPayload)
	prefix := []byte("hdr")
	b := AppendSeal(bytes.Clone(prefix), s)
	if !bytes.HasPrefix(b, prefix) || len(b) != len(prefix)+EncodedLen(s) {
		t.Fatalf("bad append: % x", b)
	}
	b = append(b, "trailer"...)
	got, n, err := DecodeSeal(b[len(prefix):])
	if err != nil {
		t.Fatal(err)
	}
	if n != EncodedLen(s) || got != s {
		t.Fatalf("got %v n=%d, want %v n=%d", got, n, s, EncodedLen(s))
	}
	if err := r.Verify(testIdentity, testPayload, got); err != nil {
		t.Fatal(err)
	}
}

func TestDecodeSealMalformed(t *testing.T) {
	good := AppendSeal(nil, Seal{KeyID: "k1"})
	cases := map[string][]byte{
		"empty":       nil,
		"one byte":    {1},
		"version 0":   append([]byte{0}, good[1:]...),
		"version 2":   append([]byte{2}, good[1:]...),
		"id len 0":    append([]byte{1, 0}, make([]byte, MACSize)...),
		"id len 33":   append(append([]byte{1, 33}, strings.Repeat("x", 33)...), make([]byte, MACSize)...),
		"short mac":   good[:len(good)-1],
		"only header": good[:4],
	}
	for name, b := range cases {
		if _, _, err := DecodeSeal(b); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: err = %v, want ErrMalformed", name, err)
		}
	}
}

func TestAppendSealPanicsOnInvalidID(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("no panic")
		}
	}()
	AppendSeal(nil, Seal{})
}

func FuzzDecodeSeal(f *testing.F) {
	f.Add(AppendSeal(nil, Seal{KeyID: "k1"}))
	f.Add(AppendSeal(nil, Seal{KeyID: KeyID(strings.Repeat("z", MaxKeyIDLen)), MAC: [MACSize]byte{1, 2, 3}}))
	f.Add([]byte{})
	f.Add([]byte{1, 0})
	f.Add([]byte{1, 33})
	f.Add([]byte{1, 255, 'a'})
	f.Fuzz(func(t *testing.T, in []byte) {
		b := bytes.Clone(in) // the alias check below scribbles on b
		s, n, err := DecodeSeal(b)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error kind: %v", err)
			}
			return
		}
		if n < 2+1+MACSize || n > len(b) || n != EncodedLen(s) {
			t.Fatalf("n=%d len=%d", n, len(b))
		}
		// Canonical: re-encoding gives exactly the consumed bytes.
		if re := AppendSeal(nil, s); !bytes.Equal(re, b[:n]) {
			t.Fatalf("not canonical: % x vs % x", re, b[:n])
		}
		// Decoded seal must not alias the input.
		orig := s
		for i := range b {
			b[i] ^= 0xff
		}
		if s != orig {
			t.Fatal("seal aliases input")
		}
	})
}
