package antireplay

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"testing"
	"time"
)

// goldenFile is testdata/stamp_golden.json: the stamp's exact bytes, shared
// with the server's wire test and with clients in other languages.
type goldenFile struct {
	Stamps []struct {
		Name     string `json:"name"`
		UnixNano int64  `json:"unix_nanos"`
		Nonce    string `json:"nonce"`
		Hex      string `json:"hex"`
	} `json:"stamps"`
	Malformed []struct {
		Name string `json:"name"`
		Hex  string `json:"hex"`
	} `json:"malformed"`
	Legacy []struct {
		Name              string `json:"name"`
		BigEndianUnixNano int64  `json:"big_endian_unix_nanos"`
		UnixNano          int64  `json:"unix_nanos"`
		Hex               string `json:"hex"`
	} `json:"legacy_big_endian"`
}

func loadGolden(t *testing.T) goldenFile {
	t.Helper()
	b, err := os.ReadFile("testdata/stamp_golden.json")
	if err != nil {
		t.Fatal(err)
	}
	var g goldenFile
	if err := json.Unmarshal(b, &g); err != nil {
		t.Fatal(err)
	}
	if len(g.Stamps) == 0 || len(g.Malformed) == 0 || len(g.Legacy) == 0 {
		t.Fatalf("golden file has an empty section: %+v", g)
	}
	return g
}

func unhex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestStampGolden pins the wire bytes: every vector encodes to its hex and
// its hex parses back to it; the malformed ones are refused.
func TestStampGolden(t *testing.T) {
	g := loadGolden(t)
	for _, v := range g.Stamps {
		var s Stamp
		s.UnixNano = v.UnixNano
		copy(s.Nonce[:], unhex(t, v.Nonce))
		want := unhex(t, v.Hex)
		if got := s.Append(nil); !bytes.Equal(got, want) {
			t.Errorf("%s: Append = %x, want %s", v.Name, got, v.Hex)
		}
		got, err := ParseStamp(want)
		if err != nil || got != s {
			t.Errorf("%s: ParseStamp = %+v, %v; want %+v", v.Name, got, err, s)
		}
	}
	for _, v := range g.Malformed {
		if s, err := ParseStamp(unhex(t, v.Hex)); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: ParseStamp = %+v, %v; want ErrMalformed", v.Name, s, err)
		}
	}
	for _, v := range g.Legacy {
		b := unhex(t, v.Hex)
		if binary.BigEndian.Uint64(b) != uint64(v.BigEndianUnixNano) {
			t.Fatalf("%s: the vector is not the big-endian encoding it claims", v.Name)
		}
		s, err := ParseStamp(b)
		if err != nil || s.UnixNano != v.UnixNano {
			t.Errorf("%s: ParseStamp = %d, %v; want %d", v.Name, s.UnixNano, err, v.UnixNano)
		}
	}
}

// A stamp written big-endian (a client from before ADR 0012) is refused,
// and the error says why.
func TestBigEndianStampRefusedWithHint(t *testing.T) {
	g := loadGolden(t)
	v := g.Legacy[0]
	c := newClock()
	c.ns.Store(v.BigEndianUnixNano)
	w := newWindow(t, c, 0)
	s, err := ParseStamp(unhex(t, v.Hex))
	if err != nil {
		t.Fatal(err)
	}
	err = w.CheckStamp("a", s)
	if !errors.Is(err, ErrStale) || !errors.Is(err, ErrByteOrder) {
		t.Fatalf("legacy stamp: %v, want ErrStale and ErrByteOrder", err)
	}
	// The other half: a nanosecond field whose low byte is below 0x80
	// reads as a far-future time.
	var b [StampSize]byte
	binary.BigEndian.PutUint64(b[:], uint64(c.Now().UnixNano())&^0xff|0x7f)
	if s, err = ParseStamp(b[:]); err != nil {
		t.Fatal(err)
	}
	if err := w.CheckStamp("a", s); !errors.Is(err, ErrFuture) || !errors.Is(err, ErrByteOrder) {
		t.Fatalf("legacy future stamp: %v, want ErrFuture and ErrByteOrder", err)
	}
	// An honest stale or future stamp gets no byte-order hint.
	for _, d := range []time.Duration{-10 * time.Minute, time.Hour} {
		if err := w.CheckStamp("a", Stamp{UnixNano: c.Now().Add(d).UnixNano(), Nonce: nonce(1)}); err == nil || errors.Is(err, ErrByteOrder) {
			t.Fatalf("skew %v: %v", d, err)
		}
	}
}
