package crypt

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// Sentinel errors, tested with errors.Is.
var (
	// ErrUnknownKey: the pack names a key id the keyring does not hold.
	ErrUnknownKey = errors.New("gpucache/cold/crypt: unknown key id")
	// ErrExpiredKey: the key exists but its rotation grace period has ended.
	ErrExpiredKey = errors.New("gpucache/cold/crypt: key expired")
	// ErrKeyNotYetValid: the key's notBefore lies in the future.
	ErrKeyNotYetValid = errors.New("gpucache/cold/crypt: key not yet valid")
	// ErrNoCurrentKey: Encrypter was called on a keyring with no key.
	ErrNoCurrentKey = errors.New("gpucache/cold/crypt: no current key")
	// ErrDuplicateKey: Add or Rotate named an id the keyring already holds.
	ErrDuplicateKey = errors.New("gpucache/cold/crypt: duplicate key id")
	// ErrBadKeyID: the id is empty or longer than MaxKeyIDLen bytes.
	ErrBadKeyID = errors.New("gpucache/cold/crypt: bad key id")
	// ErrWeakSecret: the secret is shorter than MinSecretLen bytes.
	ErrWeakSecret = errors.New("gpucache/cold/crypt: secret too short")
	// ErrBadTenant: an empty tenant (every pack belongs to one).
	ErrBadTenant = errors.New("gpucache/cold/crypt: empty tenant")
)

const (
	// MaxKeyIDLen is the longest key id, in bytes; a key id is stored in
	// every encrypted manifest and is not secret.
	MaxKeyIDLen = 32
	// MinSecretLen is the shortest accepted master secret.
	MinSecretLen = 32
	// KeyLen is the derived per-tenant key length: AES-256.
	KeyLen = 32

	hkdfSalt = "gpucache/cold/crypt/v1"
)

// key is one master secret. A *key is immutable once in the map; Rotate
// replaces the entry with a copy carrying the new expiry.
type key struct {
	secret    []byte    // private copy; never printed
	notBefore time.Time // usable from this instant
	expires   time.Time // zero: no expiry; else usable while now < expires
}

func (k *key) usable(now time.Time) error {
	if now.Before(k.notBefore) {
		return ErrKeyNotYetValid
	}
	if !k.expires.IsZero() && !now.Before(k.expires) {
		return ErrExpiredKey
	}
	return nil
}

// Keyring holds the current encryption key and the keys that still decrypt.
// It is safe for concurrent use; use it by pointer.
type Keyring struct {
	now func() time.Time // immutable after New

	mu struct {
		sync.RWMutex
		keys    map[string]*key // guarded by mu
		current string          // guarded by mu; "" when empty
	}
}

// New returns an empty keyring reading time from now (time.Now if nil).
func New(now func() time.Time) *Keyring {
	if now == nil {
		now = time.Now
	}
	r := &Keyring{now: now}
	r.mu.keys = make(map[string]*key)
	return r
}

func newKey(id string, secret []byte, notBefore time.Time) (*key, error) {
	if len(id) == 0 || len(id) > MaxKeyIDLen {
		return nil, fmt.Errorf("%w: length %d, want 1..%d", ErrBadKeyID, len(id), MaxKeyIDLen)
	}
	if len(secret) < MinSecretLen {
		return nil, fmt.Errorf("%w: %d < %d bytes", ErrWeakSecret, len(secret), MinSecretLen)
	}
	return &key{secret: append([]byte(nil), secret...), notBefore: notBefore}, nil
}

// Add registers a key usable from notBefore on, with no expiry. If the
// keyring has no current key, it becomes current. The secret is copied.
func (r *Keyring) Add(id string, secret []byte, notBefore time.Time) error {
	k, err := newKey(id, secret, notBefore)
	if err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.mu.keys[id]; ok {
		return fmt.Errorf("%w: %q", ErrDuplicateKey, id)
	}
	r.mu.keys[id] = k
	if r.mu.current == "" {
		r.mu.current = id
	}
	return nil
}

// Rotate makes a new key, usable from now, the current key. The previous
// current key keeps decrypting until now+grace and is expired from then
// on (grace 0 expires it at once). Keys already in a grace period keep
// their own expiry. The secret is copied.
func (r *Keyring) Rotate(newID string, secret []byte, grace time.Duration) error {
	if grace < 0 {
		return fmt.Errorf("gpucache/cold/crypt: negative grace %v", grace)
	}
	now := r.now()
	k, err := newKey(newID, secret, now)
	if err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.mu.keys[newID]; ok {
		return fmt.Errorf("%w: %q", ErrDuplicateKey, newID)
	}
	if old, ok := r.mu.keys[r.mu.current]; ok {
		exp := now.Add(grace)
		if old.expires.IsZero() || exp.Before(old.expires) {
			nk := *old
			nk.expires = exp
			r.mu.keys[r.mu.current] = &nk
		}
	}
	r.mu.keys[newID] = k
	r.mu.current = newID
	return nil
}

// Current returns the id of the key new packs are encrypted with ("" if
// none).
func (r *Keyring) Current() string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.mu.current
}

// Encrypter returns the current key id and the AES-256-GCM AEAD of
// tenant under it. The current key must be usable now.
func (r *Keyring) Encrypter(tenant string) (string, cipher.AEAD, error) {
	r.mu.RLock()
	id := r.mu.current
	k := r.mu.keys[id]
	r.mu.RUnlock()
	if k == nil {
		return "", nil, ErrNoCurrentKey
	}
	if err := k.usable(r.now()); err != nil {
		return "", nil, fmt.Errorf("current key %q: %w", id, err)
	}
	a, err := derive(k.secret, tenant)
	return id, a, err
}

// Decrypter returns the AES-256-GCM AEAD of tenant under key id. Errors
// wrap ErrUnknownKey, ErrExpiredKey or ErrKeyNotYetValid; the key is
// checked against the clock on every call.
func (r *Keyring) Decrypter(tenant, id string) (cipher.AEAD, error) {
	r.mu.RLock()
	k := r.mu.keys[id]
	r.mu.RUnlock()
	if k == nil {
		return nil, fmt.Errorf("%w: %q", ErrUnknownKey, id)
	}
	if err := k.usable(r.now()); err != nil {
		return nil, fmt.Errorf("key %q: %w", id, err)
	}
	return derive(k.secret, tenant)
}

// DeriveKey returns tenant's 32-byte key under a master secret (doc.go).
// Exported for the format's test vectors; callers use Encrypter and
// Decrypter.
func DeriveKey(secret []byte, tenant string) ([]byte, error) {
	if tenant == "" {
		return nil, ErrBadTenant
	}
	info := binary.BigEndian.AppendUint32(nil, uint32(len(tenant)))
	info = append(info, tenant...)
	return hkdf.Key(sha256.New, secret, []byte(hkdfSalt), string(info), KeyLen)
}

func derive(secret []byte, tenant string) (cipher.AEAD, error) {
	dk, err := DeriveKey(secret, tenant)
	if err != nil {
		return nil, err
	}
	b, err := aes.NewCipher(dk)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(b)
}

// String describes the keyring without any secret.
func (r *Keyring) String() string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return fmt.Sprintf("crypt.Keyring{current: %q, keys: %d}", r.mu.current, len(r.mu.keys))
}

// GoString is String: %#v must not dump the secrets either.
func (r *Keyring) GoString() string { return r.String() }

// Format makes every verb print String.
func (r *Keyring) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(r.String())) }

// LogValue keeps slog from reflecting into the keyring.
func (r *Keyring) LogValue() slog.Value { return slog.StringValue(r.String()) }

var (
	_ fmt.Stringer   = (*Keyring)(nil)
	_ fmt.GoStringer = (*Keyring)(nil)
	_ fmt.Formatter  = (*Keyring)(nil)
	_ slog.LogValuer = (*Keyring)(nil)
)
