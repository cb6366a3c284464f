// Package keyring is the key lifecycle shared by the keyrings that hold
// secrets: seal (block MACs) and cold/crypt (cold-tier encryption).
//
// A Ring holds secrets by id, one of them current. Add loads a key; Rotate
// installs a new current key and gives the previous one a grace period;
// Prune forgets expired keys. Current and Lookup hand out a secret only
// while its key is valid at the ring's clock. What a secret is used for
// (HMAC, key derivation) is the caller's business.
//
// The Ring reports errors that wrap the caller's own sentinels (Config), so
// seal's and crypt's errors keep their package prefix and identity.
package keyring

import (
	"fmt"
	"sync"
	"time"
)

// Config names a Ring's limits and the sentinels its errors wrap. Every
// field must be set.
type Config struct {
	// Name names the ring in String: "seal" prints "seal.Keyring{...}".
	Name string
	// ErrName prefixes the errors that have no sentinel, e.g. "gpucache/seal".
	ErrName string
	// MaxIDLen is the longest id, in bytes; an id has at least one byte.
	MaxIDLen int
	// MinSecretLen is the shortest accepted secret, in bytes.
	MinSecretLen int

	ErrUnknownKey     error // the id is not held (never added, or pruned)
	ErrExpiredKey     error // the key's grace period has ended
	ErrKeyNotYetValid error // the key's notBefore lies in the future
	ErrNoCurrentKey   error // the ring is empty
	ErrDuplicateKey   error // Add or Rotate named an id already held
	ErrBadKeyID       error // id empty or longer than MaxIDLen
	ErrWeakSecret     error // secret shorter than MinSecretLen
}

// key is one secret. A *key is immutable once stored in the map, so
// callers may use its secret after the lock is dropped; Rotate replaces the
// entry with a copy carrying the new expiry instead of writing to it.
type key struct {
	secret    []byte    // private copy; never printed
	notBefore time.Time // usable from this instant
	expires   time.Time // zero: no expiry; else usable while now < expires
}

// Ring holds the current key and the keys that are still usable. It is
// safe for concurrent use; use it by pointer.
type Ring[ID ~string] struct {
	cfg Config           // immutable after New
	now func() time.Time // immutable after New

	mu struct {
		sync.RWMutex
		keys    map[ID]*key // guarded by mu
		current ID          // guarded by mu; "" when empty
	}
}

// New returns an empty ring reading time from now (time.Now if nil).
func New[ID ~string](cfg Config, now func() time.Time) *Ring[ID] {
	if now == nil {
		now = time.Now
	}
	r := &Ring[ID]{cfg: cfg, now: now}
	r.mu.keys = make(map[ID]*key)
	return r
}

func (r *Ring[ID]) newKey(id ID, secret []byte, notBefore time.Time) (*key, error) {
	if len(id) == 0 || len(id) > r.cfg.MaxIDLen {
		return nil, fmt.Errorf("%w: length %d, want 1..%d", r.cfg.ErrBadKeyID, len(id), r.cfg.MaxIDLen)
	}
	if len(secret) < r.cfg.MinSecretLen {
		return nil, fmt.Errorf("%w: %d < %d bytes", r.cfg.ErrWeakSecret, len(secret), r.cfg.MinSecretLen)
	}
	return &key{secret: append([]byte(nil), secret...), notBefore: notBefore}, nil
}

// Add registers a key usable from notBefore on, with no expiry. If the ring
// has no current key, it becomes current. The secret is copied.
func (r *Ring[ID]) Add(id ID, secret []byte, notBefore time.Time) error {
	k, err := r.newKey(id, secret, notBefore)
	if err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.mu.keys[id]; ok {
		return fmt.Errorf("%w: %q", r.cfg.ErrDuplicateKey, string(id))
	}
	r.mu.keys[id] = k
	if r.mu.current == "" {
		r.mu.current = id
	}
	return nil
}

// Rotate makes a new key, usable from now, the current key. The previous
// current key stays usable until now+grace and is expired from then on
// (grace 0 expires it at once). Keys already in a grace period keep their
// own expiry. The secret is copied.
func (r *Ring[ID]) Rotate(newID ID, secret []byte, grace time.Duration) error {
	if grace < 0 {
		return fmt.Errorf("%s: negative grace %v", r.cfg.ErrName, grace)
	}
	now := r.now()
	k, err := r.newKey(newID, secret, now)
	if err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.mu.keys[newID]; ok {
		return fmt.Errorf("%w: %q", r.cfg.ErrDuplicateKey, string(newID))
	}
	if old, ok := r.mu.keys[r.mu.current]; ok {
		exp := now.Add(grace)
		if old.expires.IsZero() || exp.Before(old.expires) {
			nk := *old // copy-on-write: readers may hold old
			nk.expires = exp
			r.mu.keys[r.mu.current] = &nk
		}
	}
	r.mu.keys[newID] = k
	r.mu.current = newID
	return nil
}

// Current returns the id of the current key ("" if none).
func (r *Ring[ID]) Current() ID {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.mu.current
}

// Prune forgets expired keys other than the current one and returns how
// many it dropped; their ids fail with ErrUnknownKey afterwards. The secret
// bytes are not zeroed (a concurrent user may still be reading them); they
// become garbage.
func (r *Ring[ID]) Prune() int {
	now := r.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for id, k := range r.mu.keys {
		if id != r.mu.current && !k.expires.IsZero() && !now.Before(k.expires) {
			delete(r.mu.keys, id)
			n++
		}
	}
	return n
}

// usable reports whether k may be used at now.
func (r *Ring[ID]) usable(k *key, now time.Time) error {
	if now.Before(k.notBefore) {
		return r.cfg.ErrKeyNotYetValid
	}
	if !k.expires.IsZero() && !now.Before(k.expires) {
		return r.cfg.ErrExpiredKey
	}
	return nil
}

// CurrentSecret returns the current key's id and secret if that key is
// usable now. Errors wrap ErrNoCurrentKey, ErrKeyNotYetValid or
// ErrExpiredKey. The secret is the ring's own copy: read it, never write
// to it or keep it past its use.
func (r *Ring[ID]) CurrentSecret() (ID, []byte, error) {
	r.mu.RLock()
	id := r.mu.current
	k := r.mu.keys[id]
	r.mu.RUnlock()
	if k == nil {
		return "", nil, r.cfg.ErrNoCurrentKey
	}
	// Read the clock after the key: Rotate stamps notBefore before it takes
	// the lock, so a monotonic clock read here is never earlier than that.
	if err := r.usable(k, r.now()); err != nil {
		return "", nil, fmt.Errorf("current key %q: %w", string(id), err)
	}
	return id, k.secret, nil
}

// Secret returns key id's secret if that key is usable now. Errors wrap
// ErrUnknownKey, ErrKeyNotYetValid or ErrExpiredKey. The secret is owned
// as in CurrentSecret.
func (r *Ring[ID]) Secret(id ID) ([]byte, error) {
	r.mu.RLock()
	k := r.mu.keys[id]
	r.mu.RUnlock()
	if k == nil {
		return nil, fmt.Errorf("%w: %q", r.cfg.ErrUnknownKey, string(id))
	}
	if err := r.usable(k, r.now()); err != nil { // clock after the key, as above
		return nil, fmt.Errorf("key %q: %w", string(id), err)
	}
	return k.secret, nil
}

// String describes the ring without any secret: its Name, the current id
// and the number of keys.
func (r *Ring[ID]) String() string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return fmt.Sprintf("%s.Keyring{current: %q, keys: %d}", r.cfg.Name, string(r.mu.current), len(r.mu.keys))
}
