package crypt

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"
)

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func secret(id string) []byte { return bytes.Repeat([]byte(id+"/master"), 8)[:32] }

// clock is an injected clock; tests move it, nothing sleeps.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func seal(t *testing.T, r *Keyring, tenant string) (string, []byte) {
	t.Helper()
	id, a, err := r.Encrypter(tenant)
	if err != nil {
		t.Fatal(err)
	}
	nonce := make([]byte, a.NonceSize())
	return id, a.Seal(nil, nonce, []byte("kv block"), nil)
}

func open(r *Keyring, tenant, id string, ct []byte) error {
	a, err := r.Decrypter(tenant, id)
	if err != nil {
		return err
	}
	_, err = a.Open(nil, make([]byte, a.NonceSize()), ct, nil)
	return err
}

// Rotation: the old key decrypts through its grace period, not at or after
// its end; new writes use the new key.
func TestRotationGrace(t *testing.T) {
	c := &clock{t: epoch}
	r := New(c.now)
	if err := r.Add("k1", secret("k1"), epoch); err != nil {
		t.Fatal(err)
	}
	id1, ct1 := seal(t, r, "acme")
	if id1 != "k1" {
		t.Fatalf("current %q", id1)
	}
	if err := r.Rotate("k2", secret("k2"), time.Hour); err != nil {
		t.Fatal(err)
	}
	if id, _ := seal(t, r, "acme"); id != "k2" {
		t.Fatalf("after rotation writes use %q, want k2", id)
	}
	c.t = epoch.Add(time.Hour - time.Nanosecond)
	if err := open(r, "acme", "k1", ct1); err != nil {
		t.Fatalf("within grace: %v", err)
	}
	c.t = epoch.Add(time.Hour)
	if err := open(r, "acme", "k1", ct1); !errors.Is(err, ErrExpiredKey) {
		t.Fatalf("at grace end: %v, want ErrExpiredKey", err)
	}
	if err := open(r, "acme", "nope", ct1); !errors.Is(err, ErrUnknownKey) {
		t.Fatalf("unknown id: %v", err)
	}
	c.t = epoch.Add(-time.Second)
	if _, err := r.Decrypter("acme", "k2"); !errors.Is(err, ErrKeyNotYetValid) {
		t.Fatalf("before notBefore: %v", err)
	}
}

// Keys are per tenant: one tenant's key does not open another's blocks,
// and another secret under the same id does not either.
func TestPerTenantAndWrongSecret(t *testing.T) {
	r := New(func() time.Time { return epoch })
	if err := r.Add("k1", secret("k1"), epoch); err != nil {
		t.Fatal(err)
	}
	_, ct := seal(t, r, "acme")
	if err := open(r, "globex", "k1", ct); err == nil {
		t.Fatal("another tenant's key opened the block")
	}
	wrong := New(func() time.Time { return epoch })
	if err := wrong.Add("k1", secret("other"), epoch); err != nil {
		t.Fatal(err)
	}
	if err := open(wrong, "acme", "k1", ct); err == nil {
		t.Fatal("a wrong secret under the same id opened the block")
	}
	a, _ := DeriveKey(secret("k1"), "acme")
	b, _ := DeriveKey(secret("k1"), "acme")
	if !bytes.Equal(a, b) || len(a) != KeyLen {
		t.Fatal("derivation is not deterministic")
	}
	if _, err := DeriveKey(secret("k1"), ""); !errors.Is(err, ErrBadTenant) {
		t.Fatalf("empty tenant: %v", err)
	}
}

func TestKeyringRefusesBadInput(t *testing.T) {
	r := New(nil)
	if _, _, err := r.Encrypter("acme"); !errors.Is(err, ErrNoCurrentKey) {
		t.Fatalf("empty keyring: %v", err)
	}
	for _, c := range []struct {
		id     string
		secret []byte
		want   error
	}{
		{"", secret("x"), ErrBadKeyID},
		{strings.Repeat("k", 33), secret("x"), ErrBadKeyID},
		{"k", []byte("short"), ErrWeakSecret},
	} {
		if err := r.Add(c.id, c.secret, epoch); !errors.Is(err, c.want) {
			t.Fatalf("Add(%q): %v, want %v", c.id, err, c.want)
		}
	}
	if err := r.Add("k", secret("k"), epoch); err != nil {
		t.Fatal(err)
	}
	if err := r.Add("k", secret("k"), epoch); !errors.Is(err, ErrDuplicateKey) {
		t.Fatalf("duplicate: %v", err)
	}
	if err := r.Rotate("k2", secret("k2"), -time.Second); err == nil {
		t.Fatal("negative grace accepted")
	}
}

// No formatting path prints a secret.
func TestKeyringNeverPrintsSecrets(t *testing.T) {
	r := New(nil)
	if err := r.Add("k1", secret("k1"), epoch); err != nil {
		t.Fatal(err)
	}
	var logged bytes.Buffer
	slog.New(slog.NewTextHandler(&logged, nil)).Info("x", "ring", r)
	for _, s := range []string{fmt.Sprint(r), fmt.Sprintf("%#v", r), fmt.Sprintf("%x", r), fmt.Sprintf("%+v", r), logged.String()} {
		if strings.Contains(s, "master") || strings.Contains(s, fmt.Sprintf("%x", secret("k1")[:8])) {
			t.Fatalf("secret printed: %s", s)
		}
	}
}

func TestZstdRoundTripAndBounds(t *testing.T) {
	z, err := NewZstd()
	if err != nil {
		t.Fatal(err)
	}
	src := bytes.Repeat([]byte("attention keys and values "), 4096)
	c := z.Compress(nil, src)
	if len(c) >= len(src) {
		t.Fatalf("repetitive input did not compress: %d -> %d", len(src), len(c))
	}
	out := make([]byte, len(src))
	if err := z.Decompress(out, c); err != nil || !bytes.Equal(out, src) {
		t.Fatalf("round trip: %v", err)
	}
	// A frame that decodes to more than the buffer fails, never grows it.
	short := make([]byte, len(src)-1)
	if err := z.Decompress(short, c); !errors.Is(err, ErrDecompress) {
		t.Fatalf("short buffer: %v", err)
	}
	long := make([]byte, len(src)+1)
	if err := z.Decompress(long, c); !errors.Is(err, ErrDecompress) {
		t.Fatalf("long buffer: %v", err)
	}
	// A bomb: a tiny frame of a huge run into a small buffer.
	bomb := z.Compress(nil, make([]byte, 64<<20))
	if err := z.Decompress(make([]byte, 1024), bomb); !errors.Is(err, ErrDecompress) {
		t.Fatalf("bomb: %v", err)
	}
	if err := z.Decompress(out, []byte("not zstd")); !errors.Is(err, ErrDecompress) {
		t.Fatalf("garbage: %v", err)
	}
}
