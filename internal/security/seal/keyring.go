package seal

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/gpucache/gpucache/internal/security/keyring"
)

// Sentinel errors. All carry the package prefix and are tested with errors.Is.
var (
	// ErrUnknownKey: the seal names a key id the keyring does not hold
	// (never added, or pruned after expiry).
	ErrUnknownKey = errors.New("gpucache/seal: unknown key id")
	// ErrExpiredKey: the key exists but its rotation grace period has ended.
	ErrExpiredKey = errors.New("gpucache/seal: key expired")
	// ErrKeyNotYetValid: the key's notBefore lies in the future.
	ErrKeyNotYetValid = errors.New("gpucache/seal: key not yet valid")
	// ErrBadSeal: the MAC does not match the identity and payload. The data
	// or its identity was altered, or the seal was made with another secret.
	ErrBadSeal = errors.New("gpucache/seal: seal mismatch")
	// ErrNoCurrentKey: Seal was called on a keyring with no key.
	ErrNoCurrentKey = errors.New("gpucache/seal: no current key")
	// ErrDuplicateKey: Add or Rotate named an id the keyring already holds.
	ErrDuplicateKey = errors.New("gpucache/seal: duplicate key id")
	// ErrBadKeyID: the id is empty or longer than MaxKeyIDLen bytes.
	ErrBadKeyID = errors.New("gpucache/seal: bad key id")
	// ErrWeakSecret: the secret is shorter than MinSecretLen bytes.
	ErrWeakSecret = errors.New("gpucache/seal: secret too short")
	// ErrTooLarge: identity longer than 2^32-1 bytes.
	ErrTooLarge = errors.New("gpucache/seal: identity too large")
)

const (
	// MaxKeyIDLen is the longest key id, in bytes.
	MaxKeyIDLen = 32
	// MinSecretLen is the shortest accepted secret: the HMAC-SHA256 output size.
	MinSecretLen = 32
	// MACSize is the size of a seal's MAC.
	MACSize = sha256.Size

	domain = "gpucache/seal/v1\x00"
)

// KeyID names a sealing key. It is not secret and is stored next to every
// seal. 1..MaxKeyIDLen bytes.
type KeyID string

// Seal is the authenticity tag of one (identity, payload) pair.
type Seal struct {
	KeyID KeyID
	MAC   [MACSize]byte
}

// String prints the key id and a MAC prefix; a MAC is not secret.
func (s Seal) String() string { return fmt.Sprintf("seal{%q %x…}", string(s.KeyID), s.MAC[:4]) }

// Keyring holds the current sealing key and the keys that still verify.
//
// Seal always uses the current key. Rotate installs a new current key and
// gives the previous one a grace period during which it still verifies, so
// blocks sealed just before a rotation (or by a peer that has not rotated
// yet) stay readable; after the grace period Verify reports ErrExpiredKey.
//
// Secrets are copied on entry and never leave the Keyring: String, GoString,
// Format and LogValue print only key ids and counts. The key lifecycle is
// internal/security/keyring's.
//
// A Keyring is safe for concurrent use. Use it by pointer.
type Keyring struct {
	ring *keyring.Ring[KeyID] // immutable after New
}

var ringConfig = keyring.Config{
	Name:              "seal",
	ErrName:           "gpucache/seal",
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
	return &Keyring{ring: keyring.New[KeyID](ringConfig, now)}
}

// Add registers a key that verifies from notBefore on, with no expiry. If the
// keyring has no current key, the new key becomes current. Use Add to load
// keys at start-up (including keys a peer may still seal with); use Rotate
// to change the current key. The secret is copied.
func (r *Keyring) Add(id KeyID, secret []byte, notBefore time.Time) error {
	return r.ring.Add(id, secret, notBefore)
}

// Rotate makes a new key, valid from now, the current key. The previous
// current key keeps verifying until now+grace and is expired from then on
// (grace 0 expires it at once). Keys already in a grace period keep their
// own expiry. The secret is copied.
func (r *Keyring) Rotate(newID KeyID, secret []byte, grace time.Duration) error {
	return r.ring.Rotate(newID, secret, grace)
}

// Current returns the id of the key Seal uses ("" if none).
func (r *Keyring) Current() KeyID { return r.ring.Current() }

// Prune forgets expired keys and returns how many it dropped. Seals made
// with a pruned key fail with ErrUnknownKey afterwards. The secret bytes are
// not zeroed (a concurrent Verify may still be reading them); they become
// garbage.
func (r *Keyring) Prune() int { return r.ring.Prune() }

// Seal computes the seal of (identityCanonical, payload) with the current key.
//
// MAC = HMAC-SHA256(secret, "gpucache/seal/v1\x00" || u32be len(identity) ||
// identity || u64be len(payload) || payload). The domain string keeps these
// MACs apart from any other use of the secret, and the length prefixes stop
// bytes from moving across the identity/payload boundary. The inputs are
// only read.
func (r *Keyring) Seal(identityCanonical, payload []byte) (Seal, error) {
	if uint64(len(identityCanonical)) > math.MaxUint32 {
		return Seal{}, ErrTooLarge
	}
	id, secret, err := r.ring.CurrentSecret()
	if err != nil {
		return Seal{}, err
	}
	s := Seal{KeyID: id}
	mac(secret, identityCanonical, payload, &s.MAC)
	return s, nil
}

// Verify checks s against (identityCanonical, payload). It returns nil only
// if the named key is known, valid now, and the MAC matches (compared with
// hmac.Equal). Errors wrap ErrUnknownKey, ErrKeyNotYetValid, ErrExpiredKey
// or ErrBadSeal.
func (r *Keyring) Verify(identityCanonical, payload []byte, s Seal) error {
	if uint64(len(identityCanonical)) > math.MaxUint32 {
		return ErrTooLarge
	}
	secret, err := r.ring.Secret(s.KeyID)
	if err != nil {
		return err
	}
	var want [MACSize]byte
	mac(secret, identityCanonical, payload, &want)
	if !hmac.Equal(want[:], s.MAC[:]) {
		return fmt.Errorf("%w (key %q)", ErrBadSeal, string(s.KeyID))
	}
	return nil
}

func mac(secret, identity, payload []byte, out *[MACSize]byte) {
	h := hmac.New(sha256.New, secret)
	var hdr [len(domain) + 4]byte
	copy(hdr[:], domain)
	binary.BigEndian.PutUint32(hdr[len(domain):], uint32(len(identity)))
	h.Write(hdr[:])
	h.Write(identity)
	var plen [8]byte
	binary.BigEndian.PutUint64(plen[:], uint64(len(payload)))
	h.Write(plen[:])
	h.Write(payload)
	h.Sum(out[:0])
}

// String describes the keyring without any secret.
func (r *Keyring) String() string { return r.ring.String() }

// GoString is String: %#v must not dump the secrets either.
func (r *Keyring) GoString() string { return r.String() }

// Format makes every verb (%v, %+v, %#v, %s, %x, %q, ...) print String.
func (r *Keyring) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(r.String())) }

// LogValue keeps slog from reflecting into the keyring.
func (r *Keyring) LogValue() slog.Value { return slog.StringValue(r.String()) }

var (
	_ fmt.Stringer   = (*Keyring)(nil)
	_ fmt.GoStringer = (*Keyring)(nil)
	_ fmt.Formatter  = (*Keyring)(nil)
	_ slog.LogValuer = (*Keyring)(nil)
)
