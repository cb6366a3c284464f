package identity

import "testing"

// The identity principle (docs/adr/0023-design-principles-and-conventions.md)
// and the cold-cache seed contract (docs/CONTRACTS.md, "Where the contracts
// come from": keys contain their content digests, manifest v3 binds each
// range to the full canonical identity): keys and namespace digests are
// SHA-256 values. The canonical-encoding bounds
// are published in docs/PROTOCOL.md "Limits" (MaxNamespaceLen is
// identity.MaxCanonicalLen, MaxBlockTokens) and "PUT_OPAQUE" (1..1024-byte
// names). These compare the constants with those literals.
func TestPinnedIdentitySizes(t *testing.T) {
	for _, c := range []struct {
		name      string
		got, want int
	}{
		{"len(BlockKey)", len(BlockKey{}), 32},
		{"len(NamespaceDigest)", len(NamespaceDigest{}), 32},
		{"MaxCanonicalLen", MaxCanonicalLen, 4096},
		{"MaxBlockTokens", MaxBlockTokens, 65536},
		{"MaxOpaqueLen", MaxOpaqueLen, 1024},
		{"MaxStringLen", MaxStringLen, 256},
	} {
		if c.got != c.want {
			t.Errorf("identity %s = %d, want %d", c.name, c.got, c.want)
		}
	}
}
