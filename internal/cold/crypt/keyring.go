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
	"time"

	"github.com/gpucache/gpucache/internal/security/keyring"
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

// Keyring holds the current encryption key and the keys that still decrypt.
// Its key lifecycle (Add, Rotate with grace, expiry) is
// internal/security/keyring's. It is safe for concurrent use; use it by
// pointer.
type Keyring struct {
	ring *keyring.Ring[string] // immutable after New
}

var ringConfig = keyring.Config{
	Name:              "crypt",
	ErrName:           "gpucache/cold/crypt",
	MaxIDLen:          MaxKeyIDLen,
	MinSecretLen:      MinSecretLen,
	ErrUnknownKey:     ErrUnknownKey,
	ErrExpiredKey:     ErrExpiredKey,
	ErrKeyNotYetValid: ErrKeyNotYetValid,
	ErrNoCurrentKey:   ErrNoCurrentKey,
	ErrDuplicateKey:   ErrDuplicateKey,
	ErrBadKeyID:       ErrBadKeyID,
	ErrWeakSecret:     ErrWeakSecret,
}

// New returns an empty keyring reading time from now (time.Now if nil).
func New(now func() time.Time) *Keyring {
	return &Keyring{ring: keyring.New[string](ringConfig, now)}
}

// Add registers a key usable from notBefore on, with no expiry. If the
// keyring has no current key, it becomes current. The secret is copied.
func (r *Keyring) Add(id string, secret []byte, notBefore time.Time) error {
	return r.ring.Add(id, secret, notBefore)
}

// Rotate makes a new key, usable from now, the current key. The previous
// current key keeps decrypting until now+grace and is expired from then
// on (grace 0 expires it at once). Keys already in a grace period keep
// their own expiry. The secret is copied.
func (r *Keyring) Rotate(newID string, secret []byte, grace time.Duration) error {
	return r.ring.Rotate(newID, secret, grace)
}

// Current returns the id of the key new packs are encrypted with ("" if
// none).
func (r *Keyring) Current() string { return r.ring.Current() }

// Encrypter returns the current key id and the AES-256-GCM AEAD of
// tenant under it. The current key must be usable now.
func (r *Keyring) Encrypter(tenant string) (string, cipher.AEAD, error) {
	id, secret, err := r.ring.CurrentSecret()
	if err != nil {
		return "", nil, err
	}
	a, err := derive(secret, tenant)
	return id, a, err
}

// Decrypter returns the AES-256-GCM AEAD of tenant under key id. Errors
// wrap ErrUnknownKey, ErrExpiredKey or ErrKeyNotYetValid; the key is
// checked against the clock on every call.
func (r *Keyring) Decrypter(tenant, id string) (cipher.AEAD, error) {
	secret, err := r.ring.Secret(id)
	if err != nil {
		return nil, err
	}
	return derive(secret, tenant)
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
func (r *Keyring) String() string { return r.ring.String() }

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
