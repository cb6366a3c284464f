package seal

import "testing"

// The security principle of ADR 0023: an HMAC-SHA256 seal with a key id; a
// plain hash is not a MAC (the BlueField and hardening seed contract in
// docs/CONTRACTS.md had only a SHA-256 integrity seal). The MAC is the 32-byte HMAC-SHA256 output, and a secret is
// at least that long. The manifest format (internal/cold/pack doc.go, seal
// slot) stores these widths, so they are pinned to literals.
func TestPinnedSealSizes(t *testing.T) {
	if MACSize != 32 {
		t.Errorf("MACSize = %d, want 32 (HMAC-SHA256)", MACSize)
	}
	if MinSecretLen != 32 {
		t.Errorf("MinSecretLen = %d, want 32", MinSecretLen)
	}
	if MaxKeyIDLen != 32 {
		t.Errorf("MaxKeyIDLen = %d, want 32 (the manifest seal slot's key id bound)", MaxKeyIDLen)
	}
}
