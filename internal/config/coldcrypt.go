package config

// Cold-tier encryption at rest and compression (ADR 0019). The fields live
// in Config:
//
//	ColdEncryptionKeys  []SecretConfig `yaml:"cold_encryption_keys"` (YAML only)
//	ColdEncryptionGrace time.Duration  `yaml:"cold_encryption_grace"`
//	ColdCompression     string         `yaml:"cold_compression"`
//	ColdCompressionMinSaving int       `yaml:"cold_compression_min_saving"`

// Cold compression settings (cold_compression).
const (
	ColdCompressionOff  = "off"
	ColdCompressionZstd = "zstd"
	// ColdCompressionZstdPlanes compresses each block's byte planes (low
	// bytes, then high bytes): what pays on bf16 KV (docs/BENCHMARKS.md).
	ColdCompressionZstdPlanes = "zstd-planes"
)

// MinColdEncryptionKey is the shortest accepted master key: 32 bytes
// (crypt.MinSecretLen), e.g. `openssl rand -hex 32` (64 characters).
const MinColdEncryptionKey = 32

func (c *Config) coldCryptFields() []field {
	return []field{
		{"cold_encryption_grace", "how long a replaced cold encryption key still decrypts packs", (*durVal)(&c.ColdEncryptionGrace)},
		{"cold_compression", "compress cold-tier blocks before encryption: off, zstd or zstd-planes (byte planes first; pays on bf16)", (*strVal)(&c.ColdCompression)},
		{"cold_compression_min_saving", "keep a block's compressed form only if it saves at least this percent (1..99)", (*intVal)(&c.ColdCompressionMinSaving)},
	}
}

// validateColdCrypt checks the cold encryption and compression settings
// that need no file access (key files are read, and their length checked,
// when the daemon starts: daemon/coldcrypt.go).
func (c Config) validateColdCrypt() error {
	switch c.ColdCompression {
	case ColdCompressionOff, ColdCompressionZstd, ColdCompressionZstdPlanes:
	default:
		return invalidf("cold_compression %q is not off, zstd or zstd-planes", c.ColdCompression)
	}
	if c.ColdCompressionMinSaving < 1 || c.ColdCompressionMinSaving > 99 {
		return invalidf("cold_compression_min_saving %d is not a percentage in 1..99", c.ColdCompressionMinSaving)
	}
	if c.ColdEncryptionGrace < 0 {
		return invalidf("cold_encryption_grace must not be negative")
	}
	if c.ColdStore == "off" && (len(c.ColdEncryptionKeys) > 0 || c.ColdCompression != ColdCompressionOff) {
		return invalidf("cold_encryption_keys and cold_compression need a cold tier, but cold_store is off")
	}
	ids := map[string]bool{}
	for _, k := range c.ColdEncryptionKeys {
		if k.ID == "" || len(k.ID) > 32 || ids[k.ID] {
			return invalidf("cold_encryption_keys: every key needs a unique id of 1..32 bytes (got %q); the id is stored in every encrypted manifest", k.ID)
		}
		ids[k.ID] = true
	}
	return nil
}
