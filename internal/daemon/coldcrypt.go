package daemon

import (
	"fmt"
	"time"

	"github.com/gpucache/gpucache/internal/cold/crypt"
	"github.com/gpucache/gpucache/internal/cold/tier"
	"github.com/gpucache/gpucache/internal/config"
)

// coldKeyringOf builds the cold tier's encryption keyring (ADR 0019) from
// cold_encryption_keys: the last key is current, the others still decrypt
// (a peer or an older pack may use them). Nil when no key is configured.
func coldKeyringOf(cfg config.Config, getenv func(string) (string, bool)) (*crypt.Keyring, error) {
	n := len(cfg.ColdEncryptionKeys)
	if n == 0 {
		return nil, nil
	}
	r := crypt.New(nil)
	order := append([]config.SecretConfig{cfg.ColdEncryptionKeys[n-1]}, cfg.ColdEncryptionKeys[:n-1]...) // the first Add is current
	for _, k := range order {
		b, _, err := k.Read(getenv)
		if err != nil {
			return nil, fmt.Errorf("cold_encryption_keys: %w", err)
		}
		if err := r.Add(k.ID, b, time.Time{}); err != nil {
			return nil, fmt.Errorf("%w: cold_encryption_keys: key %q: %w (use at least %d random bytes, e.g. openssl rand -hex 32)", config.ErrInvalid, k.ID, err, crypt.MinSecretLen)
		}
	}
	return r, nil
}

// rotateColdKey makes the last of next's cold_encryption_keys current when
// it is not already: the previous key keeps decrypting for
// cold_encryption_grace. Called by reload with s.mu held.
func (s *secure) rotateColdKey(next config.Config) error {
	if s.coldKeys == nil || len(next.ColdEncryptionKeys) == 0 {
		return nil
	}
	last := next.ColdEncryptionKeys[len(next.ColdEncryptionKeys)-1]
	if last.ID == s.coldKeys.Current() {
		return nil
	}
	b, _, err := last.Read(s.getenv)
	if err != nil {
		return err
	}
	if err := s.coldKeys.Rotate(last.ID, b, next.ColdEncryptionGrace); err != nil {
		return fmt.Errorf("cold encryption key %q: %w", last.ID, err)
	}
	s.audit.Rotation("cold_encryption_key", last.ID)
	return nil
}

// coldCryptConfig sets the tier's encryption and compression from the
// config and the node's cold keyring.
func coldCryptConfig(tcfg *tier.Config, cfg config.Config, sec *secure) error {
	if sec != nil && sec.coldKeys != nil {
		tcfg.Crypt = sec.coldKeys
	}
	if cfg.ColdCompression != config.ColdCompressionOff {
		z, err := crypt.NewZstd()
		if err != nil {
			return err
		}
		tcfg.Compress = z
		tcfg.CompressBytePlanes = cfg.ColdCompression == config.ColdCompressionZstdPlanes
		tcfg.CompressMinSavingPct = cfg.ColdCompressionMinSaving
	}
	return nil
}
