package pack

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/gpucache/gpucache/internal/cold"
)

// The seed contracts (docs/CONTRACTS.md, "Where the contracts come from")
// fix the manifest format version and its digests:
//
//   - cold-cache failure isolation: manifest v3 binds each range to the
//     complete canonical CacheIdentity; legacy v1/v2 manifests are clean
//     misses that need recompute and repack; changing a version header
//     does not migrate an entry;
//   - CPU transfer contract, row "Legacy manifests": valid legacy v1/v2
//     headers yield Missing with zero payload-range reads;
//   - cold-cache failure isolation: object and manifest keys contain their
//     content digests (SHA-256, the identity principle of ADR 0023).
//
// The other tests read ManifestVersion; these use the literals, so bumping
// the version (a migration that means repopulating the cold tier, see
// docs/OPERATIONS.md "Seed limits") fails here until it is made on purpose.
const (
	seedManifestVersion = 3 // cold-cache failure isolation: "Manifest v3"
	seedDigestSize      = 32
)

func TestSeedPinnedManifestVersion(t *testing.T) {
	if ManifestVersionEncoded != 4 {
		t.Errorf("ManifestVersionEncoded = %d, ADR 0019 fixes 4", ManifestVersionEncoded)
	}
	if ManifestVersion != seedManifestVersion {
		t.Errorf("ManifestVersion = %d, the seed contract fixes %d (cold-cache failure isolation; docs/CONTRACTS.md)", ManifestVersion, seedManifestVersion)
	}
	p, _ := goodManifest(t)
	b := p.Manifest.Body
	if string(b[:4]) != "GCMF" || binary.LittleEndian.Uint16(b[4:6]) != 3 {
		t.Fatalf("encoded manifest header %q %d, want \"GCMF\" version 3", b[:4], binary.LittleEndian.Uint16(b[4:6]))
	}
	if !strings.HasSuffix(p.Manifest.Key, ".m3") {
		t.Errorf("manifest key %q does not end in .m3", p.Manifest.Key)
	}
}

// v1 and v2 are the legacy versions: a clean miss (ErrLegacyManifest, not
// corruption). v4 is the encoded form of ADR 0019 (encrypted or compressed
// blocks; a v3 body relabelled v4 does not parse as one and fails closed).
// Everything else is unsupported and fails closed.
func TestSeedLegacyAndUnknownManifestVersions(t *testing.T) {
	p, _ := goodManifest(t)
	for v := range uint16(6) {
		t.Run(fmt.Sprint("v", v), func(t *testing.T) {
			m, err := DecodeManifest(setVersion(p.Manifest.Body, v))
			switch v {
			case 1, 2:
				if !errors.Is(err, ErrLegacyManifest) || errors.Is(err, cold.ErrCorrupt) || m != nil {
					t.Fatalf("v%d: %v, want ErrLegacyManifest only (a clean miss)", v, err)
				}
			case 3:
				if err != nil {
					t.Fatalf("v3: %v", err)
				}
			case 4:
				if !errors.Is(err, cold.ErrCorrupt) || m != nil {
					t.Fatalf("a v3 body labelled v4: %v, want a corrupt manifest (fails closed)", err)
				}
			default:
				if !errors.Is(err, ErrManifestVersion) || !errors.Is(err, cold.ErrCorrupt) || m != nil {
					t.Fatalf("v%d: %v, want ErrManifestVersion (fails closed)", v, err)
				}
			}
		})
	}
}

// Pack and manifest keys carry the lower-case hex SHA-256 of their bodies.
func TestSeedKeysCarrySHA256OfBody(t *testing.T) {
	if n := len(Digest{}); n != seedDigestSize {
		t.Fatalf("Digest is %d bytes, want %d (SHA-256)", n, seedDigestSize)
	}
	p, _ := goodManifest(t)
	for _, o := range []Object{p.Object, p.Manifest} {
		sum := sha256.Sum256(o.Body)
		if !strings.Contains(o.Key, hex.EncodeToString(sum[:])) {
			t.Errorf("key %q does not contain the SHA-256 of its body", o.Key)
		}
	}
}
