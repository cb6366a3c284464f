package pack

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/gpucache/gpucache/internal/cold"
	"github.com/gpucache/gpucache/internal/security/seal"
)

func TestBuildSealedRoundTrip(t *testing.T) {
	ns := testNamespace("acme")
	blocks := blocksOf(chain(t, ns, 3, 7), 40)
	kr := testKeyring(t, "k1")
	p := mustBuildSealed(t, ns, blocks, kr)
	plain := mustBuild(t, ns, blocks)

	m := mustDecode(t, p.Manifest.Body)
	if !m.Sealed() || m.SealKeyID() != "k1" || len(m.Seal.MAC) != seal.MACSize {
		t.Fatalf("seal %+v", m.Seal)
	}
	// The sealed span is the unsealed manifest minus its empty slot: the
	// seal covers every byte before the slot and changes nothing else.
	span := plain.Manifest.Body[:len(plain.Manifest.Body)-3]
	if !bytes.Equal(m.SealedBytes(), span) || !bytes.Equal(p.Manifest.Body[:len(span)], span) {
		t.Fatal("sealed span differs from the unsealed manifest's bytes before the slot")
	}
	if !bytes.Equal(p.Object.Body, plain.Object.Body) || p.Manifest.Key == plain.Manifest.Key {
		t.Fatal("sealing changed the pack object, or not the manifest key")
	}
	nsb, _ := ns.Canonical()
	if !bytes.Equal(m.NamespaceCanonical(), nsb) {
		t.Fatal("NamespaceCanonical")
	}
	// The MAC is exactly keyring.Seal(namespace, span).
	want, err := kr.Seal(nsb, span)
	if err != nil || !bytes.Equal(m.Seal.MAC, want.MAC[:]) {
		t.Fatalf("MAC is not Seal(namespace, span): %v", err)
	}
	// Deterministic: same input, same bytes and keys.
	if q := mustBuildSealed(t, ns, blocks, kr); !bytes.Equal(q.Manifest.Body, p.Manifest.Body) || q.Manifest.Key != p.Manifest.Key {
		t.Fatal("BuildWith with a Sealer is not deterministic")
	}

	// The policy.
	if err := m.VerifySeal(kr); err != nil {
		t.Fatalf("VerifySeal: %v", err)
	}
	if err := VerifyWith(p, kr, nil, nil); err != nil {
		t.Fatalf("VerifyWith: %v", err)
	}
	if err := m.VerifySeal(nil); !errors.Is(err, ErrSealUnverifiable) || !errors.Is(err, cold.ErrCorrupt) {
		t.Fatalf("no keyring, sealed manifest: %v", err)
	}
	var nilKR *seal.Keyring
	if err := m.VerifySeal(nilKR); !errors.Is(err, ErrSealUnverifiable) {
		t.Fatalf("typed-nil keyring, sealed manifest: %v", err)
	}
	if err := VerifyWith(p, nil, nil, nil); !errors.Is(err, ErrRejected) || !errors.Is(err, ErrSealUnverifiable) {
		t.Fatalf("VerifyWith without keyring: %v", err)
	}
	pm := mustDecode(t, plain.Manifest.Body)
	if err := pm.VerifySeal(nil); err != nil {
		t.Fatalf("no keyring, unsealed: %v", err)
	}
	if err := pm.VerifySeal(kr); !errors.Is(err, ErrSealMissing) || !errors.Is(err, cold.ErrCorrupt) {
		t.Fatalf("keyring, unsealed: %v", err)
	}
	if err := VerifyWith(plain, kr, nil, nil); !errors.Is(err, ErrSealMissing) {
		t.Fatalf("VerifyWith of an unsealed pack: %v", err)
	}

	// Another secret under the same id; an unknown id; an expired key.
	other := seal.New(func() time.Time { return testEpoch })
	if err := other.Add("k1", bytes.Repeat([]byte{9}, 32), testEpoch); err != nil {
		t.Fatal(err)
	}
	if err := m.VerifySeal(other); !errors.Is(err, ErrSealInvalid) || !errors.Is(err, seal.ErrBadSeal) {
		t.Fatalf("other secret: %v", err)
	}
	if err := m.VerifySeal(testKeyring(t, "k2")); !errors.Is(err, ErrSealInvalid) || !errors.Is(err, seal.ErrUnknownKey) {
		t.Fatalf("unknown key: %v", err)
	}
	now := testEpoch
	rot := seal.New(func() time.Time { return now })
	_ = rot.Add("k1", bytes.Repeat([]byte("k1/secret"), 8)[:32], testEpoch)
	if err := m.VerifySeal(rot); err != nil {
		t.Fatal(err)
	}
	if err := rot.Rotate("k2", bytes.Repeat([]byte{7}, 32), time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := m.VerifySeal(rot); err != nil {
		t.Fatalf("in grace: %v", err)
	}
	now = now.Add(time.Hour)
	if err := m.VerifySeal(rot); !errors.Is(err, ErrSealInvalid) || !errors.Is(err, seal.ErrExpiredKey) {
		t.Fatalf("expired: %v", err)
	}

	// Domain binding: the same span and MAC do not verify under another
	// namespace.
	evil, _ := testNamespace("evil").Canonical()
	s := seal.Seal{KeyID: "k1"}
	copy(s.MAC[:], m.Seal.MAC)
	if err := kr.Verify(evil, m.SealedBytes(), s); !errors.Is(err, seal.ErrBadSeal) {
		t.Fatalf("seal not bound to the namespace: %v", err)
	}
}

func TestBuildWithSealerEdges(t *testing.T) {
	ns := testNamespace("acme")
	blocks := blocksOf(chain(t, ns, 2, 7), 40)
	plain := mustBuild(t, ns, blocks)
	var nilKR *seal.Keyring
	for name, s := range map[string]Sealer{"nil": nil, "typed nil keyring": nilKR} {
		p, err := BuildWith(ns, blocks, Options{Sealer: s})
		if err != nil || !bytes.Equal(p.Manifest.Body, plain.Manifest.Body) {
			t.Fatalf("%s sealer: %v; want Build's bytes", name, err)
		}
	}
	if _, err := BuildWith(ns, blocks, Options{Sealer: seal.New(nil)}); !errors.Is(err, seal.ErrNoCurrentKey) {
		t.Fatalf("empty keyring: %v", err)
	}
	for _, id := range []string{"", string(bytes.Repeat([]byte("k"), 33))} {
		f := sealFunc(func(_, _ []byte) (seal.Seal, error) { return seal.Seal{KeyID: seal.KeyID(id)}, nil })
		if _, err := BuildWith(ns, blocks, Options{Sealer: f}); !errors.Is(err, ErrInvalid) {
			t.Fatalf("key id %q: %v", id, err)
		}
	}
	boom := errors.New("boom")
	if _, err := BuildWith(ns, blocks, Options{Sealer: sealFunc(func(_, _ []byte) (seal.Seal, error) { return seal.Seal{}, boom })}); !errors.Is(err, boom) {
		t.Fatalf("sealer error: %v", err)
	}
	// A Sealer sees the canonical namespace and the span.
	nsb, _ := ns.Canonical()
	var gotNS, gotSpan []byte
	f := sealFunc(func(n, b []byte) (seal.Seal, error) {
		gotNS, gotSpan = bytes.Clone(n), bytes.Clone(b)
		return seal.Seal{KeyID: "f"}, nil
	})
	p, err := BuildWith(ns, blocks, Options{Sealer: f})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(gotNS, nsb) || !bytes.Equal(gotSpan, plain.Manifest.Body[:len(plain.Manifest.Body)-3]) {
		t.Fatal("Sealer inputs")
	}
	if m := mustDecode(t, p.Manifest.Body); m.SealKeyID() != "f" || !bytes.Equal(m.Seal.MAC, make([]byte, 32)) {
		t.Fatalf("seal %+v", m.Seal)
	}
}

// Every single-bit change of a sealed manifest either fails to decode
// (ErrCorrupt, or ErrLegacyManifest for a version byte turned into 1 or 2)
// or fails VerifySeal (ErrSealInvalid); none verifies.
// Truncations fail closed too.
func TestSealedManifestEveryBitFlip(t *testing.T) {
	ns := testNamespace("acme")
	kr := testKeyring(t, "k1")
	p := mustBuildSealed(t, ns, blocksOf(chain(t, ns, 2, 7), 40), kr)
	b := p.Manifest.Body
	decoded := 0
	for i := range len(b) {
		for bit := range 8 {
			c := bytes.Clone(b)
			c[i] ^= 1 << bit
			m, err := DecodeManifest(c)
			if err != nil {
				if !errors.Is(err, cold.ErrCorrupt) && !errors.Is(err, ErrLegacyManifest) {
					t.Fatalf("byte %d bit %d: %v", i, bit, err)
				}
				continue
			}
			decoded++
			if err := m.VerifySeal(kr); !errors.Is(err, ErrSealInvalid) {
				t.Fatalf("byte %d bit %d: decoded and VerifySeal = %v", i, bit, err)
			}
		}
	}
	if decoded == 0 {
		t.Fatal("no flip reached the seal check; the test proves nothing about the MAC")
	}
	t.Logf("%d of %d flips decode and are caught by the seal", decoded, 8*len(b))
	for n := range len(b) {
		if _, err := DecodeManifest(b[:n]); !errors.Is(err, cold.ErrCorrupt) {
			t.Fatalf("prefix %d/%d: %v", n, len(b), err)
		}
	}
}

// A decoded manifest keeps one private copy of its sealed span: changing the
// input afterwards changes nothing, and appending to a Canonical slice does
// not write into the span.
func TestDecodedManifestOwnsSealedSpan(t *testing.T) {
	ns := testNamespace("acme")
	kr := testKeyring(t, "k1")
	p := mustBuildSealed(t, ns, blocksOf(chain(t, ns, 3, 7), 40), kr)
	in := bytes.Clone(p.Manifest.Body)
	m := mustDecode(t, in)
	clear(in)
	if err := m.VerifySeal(kr); err != nil {
		t.Fatal(err)
	}
	_ = append(m.Ranges[0].Canonical, 0xff, 0xff)
	_ = append(m.NamespaceCanonical(), 0xff)
	if err := m.VerifySeal(kr); err != nil {
		t.Fatalf("append reached the sealed span: %v", err)
	}
}

// EncodeSealed re-seals a manifest that Build did not make (a repack), and
// SealedBytes then follows the fields, not the decoded bytes.
func TestEncodeSealed(t *testing.T) {
	ns := testNamespace("acme")
	kr := testKeyring(t, "k1")
	p := mustBuild(t, ns, blocksOf(chain(t, ns, 2, 7), 40))
	m := mustDecode(t, p.Manifest.Body)
	m.Ranges[1].Sum[0] ^= 1
	b, err := m.EncodeSealed(kr)
	if err != nil {
		t.Fatal(err)
	}
	if !m.Sealed() || !bytes.Equal(m.SealedBytes(), b[:len(b)-3-2-32]) {
		t.Fatal("EncodeSealed did not set the seal, or SealedBytes is stale")
	}
	d := mustDecode(t, b)
	if err := d.VerifySeal(kr); err != nil || d.Ranges[1].Sum != m.Ranges[1].Sum {
		t.Fatalf("re-sealed manifest: %v", err)
	}
	u, err := d.EncodeSealed(nil)
	if err != nil || d.Sealed() || !bytes.Equal(u, append(bytes.Clone(b[:len(b)-3-2-32]), 0, 0, 0)) {
		t.Fatalf("EncodeSealed(nil): %v", err)
	}
}
