package keyring

import (
	"bytes"
	"errors"
	"testing"
	"time"
)

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// The ring's errors wrap the sentinels its Config names, so each user
// keeps its own package-prefixed errors.
var cfg = Config{
	Name:              "test",
	ErrName:           "gpucache/test",
	MaxIDLen:          4,
	MinSecretLen:      8,
	ErrUnknownKey:     errors.New("unknown"),
	ErrExpiredKey:     errors.New("expired"),
	ErrKeyNotYetValid: errors.New("not yet"),
	ErrNoCurrentKey:   errors.New("no current"),
	ErrDuplicateKey:   errors.New("duplicate"),
	ErrBadKeyID:       errors.New("bad id"),
	ErrWeakSecret:     errors.New("weak"),
}

type id string

func TestLifecycleWrapsConfiguredSentinels(t *testing.T) {
	now := epoch
	r := New[id](cfg, func() time.Time { return now })
	if _, _, err := r.CurrentSecret(); !errors.Is(err, cfg.ErrNoCurrentKey) {
		t.Fatalf("empty ring: %v", err)
	}
	for _, c := range []struct {
		id     id
		secret string
		want   error
	}{{"", "12345678", cfg.ErrBadKeyID}, {"12345", "12345678", cfg.ErrBadKeyID}, {"a", "1234567", cfg.ErrWeakSecret}} {
		if err := r.Add(c.id, []byte(c.secret), epoch); !errors.Is(err, c.want) {
			t.Errorf("Add(%q, %d bytes): %v, want %v", c.id, len(c.secret), err, c.want)
		}
	}
	s1 := []byte("secret-1")
	if err := r.Add("k1", s1, epoch); err != nil {
		t.Fatal(err)
	}
	s1[0] = 'X' // the ring holds its own copy
	if err := r.Add("k1", []byte("secret-x"), epoch); !errors.Is(err, cfg.ErrDuplicateKey) {
		t.Fatalf("duplicate Add: %v", err)
	}
	if err := r.Rotate("k2", []byte("secret-2"), -time.Second); err == nil {
		t.Fatal("negative grace accepted")
	}
	if err := r.Rotate("k2", []byte("secret-2"), time.Hour); err != nil {
		t.Fatal(err)
	}
	if cur, sec, err := r.CurrentSecret(); err != nil || cur != "k2" || string(sec) != "secret-2" {
		t.Fatalf("current after rotate: %q %q %v", cur, sec, err)
	}
	// A second rotation keeps k1's earlier expiry.
	now = epoch.Add(30 * time.Minute)
	if err := r.Rotate("k3", []byte("secret-3"), 2*time.Hour); err != nil {
		t.Fatal(err)
	}
	if sec, err := r.Secret("k1"); err != nil || !bytes.Equal(sec, []byte("secret-1")) {
		t.Fatalf("k1 within grace: %q %v", sec, err)
	}
	now = epoch.Add(time.Hour)
	if _, err := r.Secret("k1"); !errors.Is(err, cfg.ErrExpiredKey) {
		t.Fatalf("k1 at grace end: %v", err)
	}
	if _, err := r.Secret("k2"); err != nil {
		t.Fatalf("k2 within its grace: %v", err)
	}
	if n := r.Prune(); n != 1 {
		t.Fatalf("Prune dropped %d, want 1 (k1)", n)
	}
	if _, err := r.Secret("k1"); !errors.Is(err, cfg.ErrUnknownKey) {
		t.Fatalf("pruned k1: %v", err)
	}
	now = epoch.Add(-time.Second)
	if _, _, err := r.CurrentSecret(); !errors.Is(err, cfg.ErrKeyNotYetValid) {
		t.Fatalf("before notBefore: %v", err)
	}
	if got, want := r.String(), `test.Keyring{current: "k3", keys: 2}`; got != want {
		t.Fatalf("String %q, want %q", got, want)
	}
}
