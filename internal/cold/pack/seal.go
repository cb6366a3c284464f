package pack

import (
	"bytes"
	"fmt"

	"github.com/gpucache/gpucache/internal/cold"
	"github.com/gpucache/gpucache/internal/security/seal"
)

// Seal errors. Each wraps cold.ErrCorrupt: a manifest whose seal cannot be
// accepted fails closed, like any other corrupt manifest.
var (
	// ErrSealMissing: a verifier is configured and the manifest carries no
	// seal (kind 0).
	ErrSealMissing = fmt.Errorf("%w: manifest seal missing", cold.ErrCorrupt)
	// ErrSealInvalid: the manifest's kind-1 seal does not verify: unknown,
	// expired or not-yet-valid key, or a MAC mismatch. The verifier's error
	// (seal.ErrUnknownKey, seal.ErrExpiredKey, seal.ErrKeyNotYetValid,
	// seal.ErrBadSeal) is wrapped too.
	ErrSealInvalid = fmt.Errorf("%w: manifest seal does not verify", cold.ErrCorrupt)
	// ErrSealUnverifiable: the manifest is sealed and no verifier is
	// configured. A sealed manifest is never read unchecked.
	ErrSealUnverifiable = fmt.Errorf("%w: sealed manifest and no keyring to verify it", cold.ErrCorrupt)
)

// Sealer seals a manifest: Seal(nsCanonical, sealedSpan) returns the
// HMAC-SHA256 seal of the span under the current key. *seal.Keyring
// implements it.
type Sealer interface {
	Seal(nsCanonical, sealed []byte) (seal.Seal, error)
}

// SealVerifier checks a manifest seal. *seal.Keyring implements it.
type SealVerifier interface {
	Verify(nsCanonical, sealed []byte, s seal.Seal) error
}

var (
	_ Sealer       = (*seal.Keyring)(nil)
	_ SealVerifier = (*seal.Keyring)(nil)
)

// nilSealer reports whether s is nil, including a nil *seal.Keyring in a
// non-nil interface.
func nilSealer(s any) bool {
	switch v := s.(type) {
	case nil:
		return true
	case *seal.Keyring:
		return v == nil
	}
	return false
}

// SealedBytes returns the bytes a kind-1 seal covers: every manifest byte
// before the seal slot. For a decoded manifest it is the decoder's private
// copy of the bytes it read (do not modify it; changing m's fields does not
// change it); otherwise it is encoded afresh from m's fields (nil if m does
// not encode).
func (m *Manifest) SealedBytes() []byte {
	if m.sealed != nil {
		return m.sealed
	}
	b, _, err := m.encodeSealed()
	if err != nil {
		return nil
	}
	return b
}

// NamespaceCanonical returns the manifest's canonical namespace encoding,
// the domain a seal is bound to (nil if the namespace does not encode). For
// a decoded manifest it aliases SealedBytes; do not modify it.
func (m *Manifest) NamespaceCanonical() []byte {
	if m.nsCanon != nil {
		return m.nsCanon
	}
	b, err := m.Namespace.Canonical()
	if err != nil {
		return nil
	}
	return b
}

// Sealed reports whether the manifest carries a kind-1 seal.
func (m *Manifest) Sealed() bool { return m.Seal.Kind == SealHMACSHA256 }

// SealKeyID returns the seal's key id ("" if unsealed). Key ids are not
// secret.
func (m *Manifest) SealKeyID() string { return string(m.Seal.KeyID) }

// VerifySeal applies the seal policy. With a verifier (v non-nil), the
// manifest must carry a well-formed kind-1 seal that v accepts:
//
//	v.Verify(NamespaceCanonical(), SealedBytes(), seal.Seal{KeyID, MAC})
//
// else the error wraps ErrSealMissing or ErrSealInvalid (and v's error).
// Without one (v nil), an unsealed manifest is accepted and a sealed one is
// ErrSealUnverifiable. Every error wraps cold.ErrCorrupt. Call it on every
// read: a key that expires after a manifest was decoded (and cached) stops
// verifying.
func (m *Manifest) VerifySeal(v SealVerifier) error {
	if nilSealer(v) {
		if m.Seal.Kind == SealNone && len(m.Seal.KeyID) == 0 && len(m.Seal.MAC) == 0 {
			return nil
		}
		return fmt.Errorf("%w (key id %q)", ErrSealUnverifiable, string(m.Seal.KeyID))
	}
	switch {
	case m.Seal.Kind == SealNone:
		return ErrSealMissing
	case m.Seal.Kind != SealHMACSHA256 || len(m.Seal.KeyID) == 0 || len(m.Seal.KeyID) > seal.MaxKeyIDLen || len(m.Seal.MAC) != seal.MACSize:
		return fmt.Errorf("%w: malformed seal (kind %d)", ErrSealInvalid, m.Seal.Kind)
	}
	s := seal.Seal{KeyID: seal.KeyID(m.Seal.KeyID)}
	copy(s.MAC[:], m.Seal.MAC)
	ns, body := m.NamespaceCanonical(), m.SealedBytes()
	if ns == nil || body == nil {
		return fmt.Errorf("%w: manifest does not encode", ErrSealInvalid)
	}
	if err := v.Verify(ns, body, s); err != nil {
		return fmt.Errorf("%w: %w", ErrSealInvalid, err)
	}
	return nil
}

// EncodeSealed is Encode with the seal slot set from s: the kind-1 seal
// s.Seal(canonical namespace, every byte before the slot) when s is
// non-nil, an empty slot when s is nil. It sets m.Seal to what it wrote,
// and from then on SealedBytes and NamespaceCanonical describe m's fields,
// not bytes m was decoded from. Use it to write a manifest that Build did
// not make (a repack); Build and BuildWith call it for theirs.
func (m *Manifest) EncodeSealed(s Sealer) ([]byte, error) {
	if nilSealer(s) {
		s = nil
	}
	return sealManifest(m, s)
}

// sealManifest encodes m with the seal s makes, or with an empty seal slot
// when s is nil.
func sealManifest(m *Manifest, s Sealer) ([]byte, error) {
	body, nsb, err := m.encodeSealed()
	if err != nil {
		return nil, err
	}
	m.sealed, m.nsCanon = nil, nil
	m.Seal = Seal{}
	if s != nil {
		st, err := s.Seal(nsb, body)
		if err != nil {
			return nil, fmt.Errorf("gpucache/cold/pack: seal manifest: %w", err)
		}
		if n := len(st.KeyID); n == 0 || n > seal.MaxKeyIDLen {
			return nil, fmt.Errorf("%w: seal key id is %d bytes, want 1..%d", ErrInvalid, n, seal.MaxKeyIDLen)
		}
		m.Seal = Seal{Kind: SealHMACSHA256, KeyID: []byte(st.KeyID), MAC: bytes.Clone(st.MAC[:])}
	}
	return m.appendSealSlot(body)
}

// VerifyWith is Verify followed by the seal policy of
// Manifest.VerifySeal with v (with v non-nil the manifest must carry a
// kind-1 seal that v accepts; with v nil it must carry none), for a pack
// whose blocks may be encrypted (dec opens them; nil rejects an encrypted
// pack) or compressed (cz decompresses them; nil rejects a compressed
// range): every range is decoded and its plaintext checked against its
// checksum before any write. Errors wrap ErrRejected and cold.ErrCorrupt
// (and the seal error).
func VerifyWith(p *Pack, v SealVerifier, dec Decrypter, cz Compressor) error {
	if err := verify(p, dec, cz); err != nil {
		return err
	}
	m, err := DecodeManifest(p.Manifest.Body)
	if err != nil { // Verify decoded it already
		return rejectf("%w", err)
	}
	if err := m.VerifySeal(v); err != nil {
		return rejectf("%w", err)
	}
	return nil
}
