package daemon

import (
	"fmt"

	"github.com/gpucache/gpucache/internal/cold/crypt"
	"github.com/gpucache/gpucache/internal/cold/tier"
	"github.com/gpucache/gpucache/internal/config"
)

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
