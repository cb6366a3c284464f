package seal

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// clock is an injectable clock; tests move it, they never sleep.
type clock struct{ ns atomic.Int64 }

func newClock() *clock {
	c := &clock{}
	c.ns.Store(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC).UnixNano())
	return c
}
func (c *clock) Now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *clock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

func secret(b byte) []byte { return bytes.Repeat([]byte{b}, MinSecretLen) }

func newRing(t *testing.T, c *clock) *Keyring {
	t.Helper()
	r := New(c.Now)
	if err := r.Add("k1", secret(1), c.Now().Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	return r
}

var (
	testIdentity = []byte("tenant=a/model=llama/layer=3/block=0123456789abcdef")
	testPayload  = []byte("kv block bytes: 0123456789 the quick brown fox")
)

func TestSealVerifyRoundTrip(t *testing.T) {
	r := newRing(t, newClock())
	s, err := r.Seal(testIdentity, testPayload)
	if err != nil {
		t.Fatal(err)
	}
	if s.KeyID != "k1" {
		t.Fatalf("key id = %q", s.KeyID)
	}
	if err := r.Verify(testIdentity, testPayload, s); err != nil {
		t.Fatal(err)
	}
	// Empty identity and payload are legal inputs.
	s2, err := r.Seal(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Verify(nil, nil, s2); err != nil {
		t.Fatal(err)
	}
}

// flipPositions returns every bit position of an n-byte buffer, or a sample
// (first/last 64 bits plus a stride) when the buffer is large.
func flipPositions(n int) []int {
	bits := n * 8
	if bits <= 4096 {
		p := make([]int, bits)
		for i := range p {
			p[i] = i
		}
		return p
	}
	var p []int
	for i := 0; i < 64; i++ {
		p = append(p, i, bits-1-i)
	}
	for i := 64; i < bits-64; i += 97 {
		p = append(p, i)
	}
	return p
}

func TestEveryBitFlipFails(t *testing.T) {
	r := newRing(t, newClock())
	big := bytes.Repeat([]byte{0xA5}, 64<<10)
	cases := []struct {
		name              string
		identity, payload []byte
	}{
		{"small", testIdentity, testPayload},
		{"large-payload-sampled", testIdentity, big},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, err := r.Seal(tc.identity, tc.payload)
			if err != nil {
				t.Fatal(err)
			}
			check := func(what string, buf []byte, id, pl func() []byte) {
				for _, bit := range flipPositions(len(buf)) {
					buf[bit/8] ^= 1 << (bit % 8)
					err := r.Verify(id(), pl(), s)
					buf[bit/8] ^= 1 << (bit % 8)
					if !errors.Is(err, ErrBadSeal) {
						t.Fatalf("%s bit %d flipped: err = %v, want ErrBadSeal", what, bit, err)
					}
				}
			}
			id := bytes.Clone(tc.identity)
			pl := bytes.Clone(tc.payload)
			check("identity", id, func() []byte { return id }, func() []byte { return pl })
			check("payload", pl, func() []byte { return id }, func() []byte { return pl })
			// And every bit of the MAC itself.
			for bit := 0; bit < MACSize*8; bit++ {
				bad := s
				bad.MAC[bit/8] ^= 1 << (bit % 8)
				if err := r.Verify(id, pl, bad); !errors.Is(err, ErrBadSeal) {
					t.Fatalf("MAC bit %d: err = %v", bit, err)
				}
			}
			if err := r.Verify(id, pl, s); err != nil {
				t.Fatalf("restored inputs fail: %v", err)
			}
		})
	}
}

// The length prefixes stop bytes moving across the identity/payload border.
func TestBoundaryShiftFails(t *testing.T) {
	r := newRing(t, newClock())
	s, err := r.Seal([]byte("abc"), []byte("def"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range [][2]string{{"ab", "cdef"}, {"abcd", "ef"}, {"", "abcdef"}, {"abcdef", ""}} {
		if err := r.Verify([]byte(c[0]), []byte(c[1]), s); !errors.Is(err, ErrBadSeal) {
			t.Fatalf("%q|%q: err = %v", c[0], c[1], err)
		}
	}
	// Truncation and extension of the payload fail too.
	if err := r.Verify([]byte("abc"), []byte("de"), s); !errors.Is(err, ErrBadSeal) {
		t.Fatal(err)
	}
	if err := r.Verify([]byte("abc"), []byte("def\x00"), s); !errors.Is(err, ErrBadSeal) {
		t.Fatal(err)
	}
}

func TestWrongAndUnknownKey(t *testing.T) {
	c := newClock()
	r := newRing(t, c)
	if err := r.Add("k2", secret(2), c.Now().Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	s, _ := r.Seal(testIdentity, testPayload)
	// Same MAC relabelled with another known key: mismatch.
	wrong := s
	wrong.KeyID = "k2"
	if err := r.Verify(testIdentity, testPayload, wrong); !errors.Is(err, ErrBadSeal) {
		t.Fatalf("wrong key id: %v", err)
	}
	unknown := s
	unknown.KeyID = "nope"
	if err := r.Verify(testIdentity, testPayload, unknown); !errors.Is(err, ErrUnknownKey) {
		t.Fatalf("unknown key: %v", err)
	}
	// Another keyring with the same id but another secret rejects it.
	other := New(c.Now)
	_ = other.Add("k1", secret(9), time.Time{})
	if err := other.Verify(testIdentity, testPayload, s); !errors.Is(err, ErrBadSeal) {
		t.Fatalf("foreign secret: %v", err)
	}
	// Empty keyring cannot seal.
	if _, err := New(c.Now).Seal(nil, nil); !errors.Is(err, ErrNoCurrentKey) {
		t.Fatalf("empty ring: %v", err)
	}
}

func TestRotationGraceAndExpiry(t *testing.T) {
	c := newClock()
	r := newRing(t, c)
	old, _ := r.Seal(testIdentity, testPayload)
	const grace = 10 * time.Minute
	if err := r.Rotate("k2", secret(2), grace); err != nil {
		t.Fatal(err)
	}
	if r.Current() != "k2" {
		t.Fatalf("current = %q", r.Current())
	}
	fresh, _ := r.Seal(testIdentity, testPayload)
	if fresh.KeyID != "k2" {
		t.Fatalf("new seals use %q", fresh.KeyID)
	}
	// In grace: both verify.
	start := c.Now()
	for _, d := range []time.Duration{0, time.Minute, grace - time.Nanosecond} {
		c.ns.Store(start.Add(d).UnixNano())
		if err := r.Verify(testIdentity, testPayload, old); err != nil {
			t.Fatalf("old seal at +%v in grace: %v", d, err)
		}
		if err := r.Verify(testIdentity, testPayload, fresh); err != nil {
			t.Fatalf("new seal at +%v: %v", d, err)
		}
	}
	// At and after the end of grace: the old key is expired.
	for _, d := range []time.Duration{grace, grace + time.Hour} {
		c.ns.Store(start.Add(d).UnixNano())
		if err := r.Verify(testIdentity, testPayload, old); !errors.Is(err, ErrExpiredKey) {
			t.Fatalf("old seal at +%v: err = %v, want ErrExpiredKey", d, err)
		}
		if err := r.Verify(testIdentity, testPayload, fresh); err != nil {
			t.Fatalf("new seal at +%v: %v", d, err)
		}
	}
	// Prune forgets it: unknown from then on; the current key stays.
	if n := r.Prune(); n != 1 {
		t.Fatalf("pruned %d, want 1", n)
	}
	if err := r.Verify(testIdentity, testPayload, old); !errors.Is(err, ErrUnknownKey) {
		t.Fatalf("after prune: %v", err)
	}
	if err := r.Verify(testIdentity, testPayload, fresh); err != nil {
		t.Fatal(err)
	}
}

func TestRotateTwiceKeepsEarlierExpiry(t *testing.T) {
	c := newClock()
	r := newRing(t, c)
	s1, _ := r.Seal(testIdentity, testPayload)
	_ = r.Rotate("k2", secret(2), time.Minute)
	s2, _ := r.Seal(testIdentity, testPayload)
	c.Advance(30 * time.Second)
	_ = r.Rotate("k3", secret(3), time.Hour)
	c.Advance(31 * time.Second) // k1's one-minute grace is over; k2 in its hour
	if err := r.Verify(testIdentity, testPayload, s1); !errors.Is(err, ErrExpiredKey) {
		t.Fatalf("k1: %v", err)
	}
	if err := r.Verify(testIdentity, testPayload, s2); err != nil {
		t.Fatalf("k2: %v", err)
	}
	// Zero grace expires the previous key at once.
	_ = r.Rotate("k4", secret(4), 0)
	s3 := Seal{KeyID: "k3"}
	if err := r.Verify(testIdentity, testPayload, s3); !errors.Is(err, ErrExpiredKey) {
		t.Fatalf("k3 after zero grace: %v", err)
	}
}

func TestNotBefore(t *testing.T) {
	c := newClock()
	r := New(c.Now)
	if err := r.Add("future", secret(1), c.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Seal(nil, nil); !errors.Is(err, ErrKeyNotYetValid) {
		t.Fatalf("seal before notBefore: %v", err)
	}
	c.Advance(time.Minute)
	s, err := r.Seal(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	c.Advance(-time.Second)
	if err := r.Verify(nil, nil, s); !errors.Is(err, ErrKeyNotYetValid) {
		t.Fatalf("verify before notBefore: %v", err)
	}
}

func TestKeyValidation(t *testing.T) {
	r := New(nil)
	cases := []struct {
		name string
		id   KeyID
		sec  []byte
		want error
	}{
		{"empty id", "", secret(1), ErrBadKeyID},
		{"long id", KeyID(strings.Repeat("x", MaxKeyIDLen+1)), secret(1), ErrBadKeyID},
		{"short secret", "k", secret(1)[:MinSecretLen-1], ErrWeakSecret},
		{"ok max id", KeyID(strings.Repeat("x", MaxKeyIDLen)), secret(1), nil},
	}
	for _, tc := range cases {
		if err := r.Add(tc.id, tc.sec, time.Time{}); !errors.Is(err, tc.want) {
			t.Errorf("%s: err = %v, want %v", tc.name, err, tc.want)
		}
	}
	if err := r.Add(KeyID(strings.Repeat("x", MaxKeyIDLen)), secret(2), time.Time{}); !errors.Is(err, ErrDuplicateKey) {
		t.Errorf("duplicate Add: %v", err)
	}
	if err := r.Rotate(KeyID(strings.Repeat("x", MaxKeyIDLen)), secret(2), 0); !errors.Is(err, ErrDuplicateKey) {
		t.Errorf("duplicate Rotate: %v", err)
	}
	if err := r.Rotate("n", secret(2), -1); err == nil {
		t.Error("negative grace accepted")
	}
}

// The secret is copied: mutating the caller's buffer changes nothing.
func TestSecretCopied(t *testing.T) {
	c := newClock()
	r := New(c.Now)
	sec := secret(7)
	_ = r.Add("k", sec, time.Time{})
	s, _ := r.Seal(testIdentity, testPayload)
	clear(sec)
	if err := r.Verify(testIdentity, testPayload, s); err != nil {
		t.Fatal(err)
	}
}

func TestPrintingRevealsNoSecret(t *testing.T) {
	c := newClock()
	r := New(c.Now)
	sec := []byte("TOPSECRET-0123456789-abcdefghijklmnop")
	_ = r.Add("k1", sec, time.Time{})
	_ = r.Rotate("k2", append([]byte("OTHERSECRET-"), sec...), time.Minute)
	var logs bytes.Buffer
	lg := slog.New(slog.NewTextHandler(&logs, nil))
	lg.Info("ring", "keyring", r)
	slog.New(slog.NewJSONHandler(&logs, nil)).Info("ring", "keyring", r)
	outs := []string{logs.String()}
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%x", "%X", "%q", "%d"} {
		outs = append(outs, fmt.Sprintf(verb, r))
	}
	outs = append(outs, r.String(), r.GoString(), fmt.Sprint(r), fmt.Sprint([]*Keyring{r}))
	for _, out := range outs {
		for _, bad := range []string{"TOPSECRET", "OTHERSECRET", hex.EncodeToString(sec[:8]), hex.EncodeToString([]byte("OTHER")), "84 79 80"} {
			if strings.Contains(strings.ToLower(out), strings.ToLower(bad)) {
				t.Fatalf("output reveals secret material %q: %s", bad, out)
			}
		}
		if !strings.Contains(out, "k2") {
			t.Fatalf("output lost the key id: %s", out)
		}
	}
}

func TestConcurrentSealVerifyRotate(t *testing.T) {
	c := newClock()
	r := newRing(t, c)
	const workers, iters = 4, 300
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			id := []byte(fmt.Sprintf("id-%d", w))
			for i := range iters {
				pl := []byte(fmt.Sprintf("payload-%d", i))
				s, err := r.Seal(id, pl)
				if err != nil {
					t.Errorf("seal: %v", err)
					return
				}
				// Grace is long, so every seal verifies whatever rotations happen.
				if err := r.Verify(id, pl, s); err != nil {
					t.Errorf("verify: %v", err)
					return
				}
				_ = r.String()
			}
		})
	}
	wg.Go(func() {
		for i := range 50 {
			if err := r.Rotate(KeyID(fmt.Sprintf("r%d", i)), secret(byte(i)), time.Hour); err != nil {
				t.Errorf("rotate: %v", err)
			}
			c.Advance(time.Millisecond)
			r.Prune()
		}
	})
	wg.Wait()
}
