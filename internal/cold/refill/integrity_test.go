package refill

import (
	"bytes"
	"context"
	"errors"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gpucache/gpucache/api/identity"
	"github.com/gpucache/gpucache/internal/cold"
	"github.com/gpucache/gpucache/internal/cold/pack"
	"github.com/gpucache/gpucache/internal/cold/s3store/s3test"
	"github.com/gpucache/gpucache/internal/security/seal"
)

// ---- seal helpers ----

// secretFor returns a 32-byte secret derived from a key id and a variant, so
// tests can make "the same id, another secret".
func secretFor(id string, variant byte) []byte {
	b := bytes.Repeat([]byte(id+"/secret"), 32)[:32]
	b[0] ^= variant
	return b
}

// newKeyring returns a keyring on clk holding key id (valid from clk.Now()).
func newKeyring(t testing.TB, clk *clock, id string) *seal.Keyring {
	t.Helper()
	kr := seal.New(clk.Now)
	if err := kr.Add(seal.KeyID(id), secretFor(id, 0), clk.Now()); err != nil {
		t.Fatal(err)
	}
	return kr
}

func buildSealedPack(t testing.TB, ids []identity.CacheIdentity, size int, s pack.Sealer) (*pack.Pack, [][]byte) {
	t.Helper()
	blocks := make([]pack.Block, len(ids))
	payloads := make([][]byte, len(ids))
	for i, id := range ids {
		payloads[i] = payloadFor(id, size)
		blocks[i] = pack.Block{Identity: id, Payload: payloads[i]}
	}
	p, err := pack.BuildWith(ids[0].Namespace, blocks, pack.Options{Sealer: s})
	if err != nil {
		t.Fatal(err)
	}
	return p, payloads
}

// recorder collects integrity events.
type recorder struct {
	mu  sync.Mutex
	evs []IntegrityEvent // guarded by mu
}

func (r *recorder) on(ev IntegrityEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.evs = append(r.evs, ev)
}

// take returns and forgets the events so far.
func (r *recorder) take() []IntegrityEvent {
	r.mu.Lock()
	defer r.mu.Unlock()
	evs := r.evs
	r.evs = nil
	return evs
}

// newSealedEnv is newEnv with a keyring (nil for none) and a recorder.
func newSealedEnv(t testing.TB, kr *seal.Keyring, cfg Config) (*env, *recorder) {
	t.Helper()
	rec := &recorder{}
	cfg.Keyring = kr
	cfg.OnIntegrity = rec.on
	return newEnv(t, cfg), rec
}

// expectEvent checks that exactly one integrity event of kind was
// reported, for id's namespace and key, and returns it.
func expectEvent(t testing.TB, rec *recorder, kind string, id identity.CacheIdentity) IntegrityEvent {
	t.Helper()
	evs := rec.take()
	if len(evs) != 1 {
		t.Fatalf("%d integrity events %v, want one %s", len(evs), evs, kind)
	}
	ev := evs[0]
	w, err := prepare(id)
	if err != nil {
		t.Fatal(err)
	}
	if ev.Kind != kind || ev.Namespace != w.nsd.String() || ev.Key != w.key.String() || ev.Err == nil {
		t.Fatalf("event %+v, want kind %s for %s/%s", ev, kind, w.nsd, w.key)
	}
	return ev
}

func expectNoEvent(t testing.TB, rec *recorder) {
	t.Helper()
	if evs := rec.take(); len(evs) != 0 {
		t.Fatalf("unexpected integrity events %v", evs)
	}
}

// rekey stores a (tampered) manifest body under its own content key and
// re-points id's pointer at it, so every content digest is consistent: only
// the decoder or the seal can catch the change.
func rekey(t testing.TB, e *env, id identity.CacheIdentity, body []byte) {
	t.Helper()
	plantManifest(t, e, id, body)
}

// recordSpan returns the byte range of range record i (identity length,
// identity, key, offset, length, checksum) in a manifest.
func recordSpan(t testing.TB, body []byte, i int) (int, int) {
	t.Helper()
	m, err := pack.DecodeManifest(body)
	if err != nil {
		t.Fatal(err)
	}
	nsb := m.NamespaceCanonical()
	off := 4 + 2 + 2 + 4 + len(nsb) + 2 + len(m.PackKey) + 32 + 8 + 4
	for j := range i {
		off += 4 + len(m.Ranges[j].Canonical) + 32 + 8 + 8 + 32
	}
	end := off + 4 + len(m.Ranges[i].Canonical) + 32 + 8 + 8 + 32
	// Sanity: the record holds the identity and then the block key.
	if !bytes.Equal(body[off+4:off+4+len(m.Ranges[i].Canonical)], m.Ranges[i].Canonical) {
		t.Fatal("record offset arithmetic is wrong")
	}
	return off, end
}

// sealSlotStart returns where the seal slot of a decoded manifest body
// begins.
func sealSlotStart(t testing.TB, body []byte) int {
	t.Helper()
	m, err := pack.DecodeManifest(body)
	if err != nil {
		t.Fatal(err)
	}
	return len(m.SealedBytes())
}

// ---- tests ----

// A sealed pack refills byte-identical through every entry point, with and
// without the manifest and pointer caches, and reports no event.
func TestSealedPackRefills(t *testing.T) {
	ctx := context.Background()
	clk := newClock()
	kr := newKeyring(t, clk, "k1")
	ids := chain(t, testNamespace("acme"), 3, 100)
	p, payloads := buildSealedPack(t, ids, 512, kr)
	if m, err := pack.DecodeManifest(p.Manifest.Body); err != nil || !m.Sealed() || m.SealKeyID() != "k1" {
		t.Fatalf("not sealed with k1: %v", err)
	}
	for _, cfg := range []Config{{}, {ManifestCache: 16, PointerTTL: time.Minute}} {
		for _, name := range slices.Sorted(maps.Keys(entryPoints())) {
			refill := entryPoints()[name]
			e, rec := newSealedEnv(t, kr, cfg)
			e.publish(p)
			for round := range 2 {
				for i, id := range ids {
					dst := filled(600)
					n, res, err := refill(e.r, ctx, id, dst)
					if !res.Hit || err != nil || n != 512 || !bytes.Equal(dst[:n], payloads[i]) || !allAA(dst[n:]) {
						t.Fatalf("%s round %d block %d: %d %v %v", name, round, i, n, res, err)
					}
				}
			}
			expectNoEvent(t, rec)
		}
	}
	// A chain reads and verifies the shared manifest once.
	e, rec := newSealedEnv(t, kr, Config{})
	e.publish(p)
	dsts := [][]byte{filled(512), filled(512), filled(512)}
	if ns, res, err := e.r.RefillMatching(ctx, ids, dsts); !res.Hit || len(ns) != 3 || err != nil {
		t.Fatalf("chain: %v %v %v", ns, res, err)
	}
	if e.count(cold.OpRangeGet, "manifests/") != 1 {
		t.Fatal("chain read the manifest more than once")
	}
	expectNoEvent(t, rec)
}

// Seal policy: unsealed with a keyring, an unknown key id, another secret
// under the same id, a key not yet valid, and a sealed manifest without a
// keyring are all misses with no payload read and one event.
func TestSealPolicyMisses(t *testing.T) {
	ctx := context.Background()
	clk := newClock()
	kr := newKeyring(t, clk, "k1")
	ids := chain(t, testNamespace("acme"), 3, 100)

	unsealed, _ := buildPack(t, ids, 512)
	unknown, _ := buildSealedPack(t, ids, 512, newKeyring(t, clk, "k-unknown"))
	otherSecret := seal.New(clk.Now)
	if err := otherSecret.Add("k1", secretFor("k1", 1), clk.Now()); err != nil {
		t.Fatal(err)
	}
	forged, _ := buildSealedPack(t, ids, 512, otherSecret)
	future := seal.New(clk.Now)
	if err := future.Add("k1", secretFor("k1", 0), clk.Now()); err != nil {
		t.Fatal(err)
	}
	if err := future.Add("k-future", secretFor("k-future", 0), clk.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	notYet, _ := buildSealedPack(t, ids, 512, sealFunc(func(ns, b []byte) (seal.Seal, error) {
		// Sealed by a peer whose clock is an hour ahead.
		peerClk := newClock()
		peerClk.Advance(time.Hour)
		peer := seal.New(peerClk.Now)
		if err := peer.Add("k-future", secretFor("k-future", 0), peerClk.Now()); err != nil {
			return seal.Seal{}, err
		}
		return peer.Seal(ns, b)
	}))
	sealed, _ := buildSealedPack(t, ids, 512, kr)

	cases := []struct {
		name  string
		kr    *seal.Keyring
		p     *pack.Pack
		kind  string
		keyID string
		is    []error
	}{
		{"unsealed with keyring", kr, unsealed, IntegritySealMissing, "", []error{pack.ErrSealMissing}},
		{"unknown key id", kr, unknown, IntegritySealInvalid, "k-unknown", []error{pack.ErrSealInvalid, seal.ErrUnknownKey}},
		{"same id, other secret", kr, forged, IntegritySealInvalid, "k1", []error{pack.ErrSealInvalid, seal.ErrBadSeal}},
		{"key not yet valid", future, notYet, IntegritySealInvalid, "k-future", []error{pack.ErrSealInvalid, seal.ErrKeyNotYetValid}},
		{"sealed without keyring", nil, sealed, IntegritySealInvalid, "k1", []error{pack.ErrSealUnverifiable}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for _, cfg := range []Config{{}, {ManifestCache: 16, PointerTTL: time.Minute}} {
				e, rec := newSealedEnv(t, c.kr, cfg)
				e.publish(c.p)
				for _, name := range slices.Sorted(maps.Keys(entryPoints())) {
					dst := filled(512)
					n, res, err := entryPoints()[name](e.r, ctx, ids[1], dst)
					expectMiss(t, n, res, Corrupt, dst)
					if !allAA(dst) || e.payloadReads() != 0 || e.writes() != 0 {
						t.Fatalf("%s: %d payload reads, %d writes", name, e.payloadReads(), e.writes())
					}
					for _, want := range append([]error{cold.ErrCorrupt}, c.is...) {
						if !errors.Is(err, want) {
							t.Fatalf("%s: error %v is not %v", name, err, want)
						}
					}
					if ev := expectEvent(t, rec, c.kind, ids[1]); ev.KeyID != c.keyID || ev.Err != err {
						t.Fatalf("%s: event %+v", name, ev)
					}
					if e.r.Breaker() != Closed {
						t.Fatal("a seal failure tripped the breaker")
					}
				}
			}
		})
	}
	// Without a keyring an unsealed pack refills as before, with no event.
	e, rec := newSealedEnv(t, nil, Config{})
	e.publish(unsealed)
	if _, res, err := e.r.RefillBlock(ctx, ids[1], filled(512)); !res.Hit {
		t.Fatalf("unsealed without keyring: %v %v", res, err)
	}
	expectNoEvent(t, rec)
}

// Bit flips of a sealed pack: every bit of one block's payload, and every
// bit of that block's range record and of the seal slot in the stored
// manifest, both in place (the manifest digest catches it) and with the
// manifest re-keyed under its new digest and the pointer re-pointed (so the
// decoder or the seal must catch it). Each is a miss with n == 0, no
// payload byte in dst and exactly one event of the expected kind; the
// untampered blocks keep refilling byte-identical.
func TestSealedBitFlipsAreMissesWithOneEvent(t *testing.T) {
	ctx := context.Background()
	clk := newClock()
	kr := newKeyring(t, clk, "k1")
	ids := chain(t, testNamespace("acme"), 3, 100)
	const size = 128
	p, payloads := buildSealedPack(t, ids, size, kr)
	target := ids[1]

	// refillMiss refills target and checks a clean miss with one event of
	// kind (or, when kind is "", returns the event for the caller).
	refillMiss := func(t *testing.T, e *env, rec *recorder, kind string, payloadRead bool) IntegrityEvent {
		t.Helper()
		dst := filled(size + 16)
		n, res, err := e.r.RefillBlock(ctx, target, dst)
		expectMiss(t, n, res, Corrupt, dst)
		if !errors.Is(err, cold.ErrCorrupt) {
			t.Fatalf("error %v", err)
		}
		if !allAA(dst[size:]) {
			t.Fatal("bytes past the payload touched")
		}
		if payloadRead {
			if !allZero(dst[:size]) || e.payloadReads() != 1 {
				t.Fatalf("payload read: %d reads, dst zeroed %v", e.payloadReads(), allZero(dst[:size]))
			}
		} else if !allAA(dst) || e.payloadReads() != 0 {
			t.Fatalf("%d payload reads before the miss", e.payloadReads())
		}
		if kind == "" {
			evs := rec.take()
			if len(evs) != 1 {
				t.Fatalf("%d events", len(evs))
			}
			return evs[0]
		}
		return expectEvent(t, rec, kind, target)
	}
	control := func(t *testing.T, e *env, rec *recorder) {
		t.Helper()
		for _, i := range []int{0, 2} {
			dst := filled(size)
			if n, res, err := e.r.RefillBlock(ctx, ids[i], dst); !res.Hit || n != size || !bytes.Equal(dst, payloads[i]) {
				t.Fatalf("untampered block %d: %v %v", i, res, err)
			}
		}
		expectNoEvent(t, rec)
	}

	t.Run("payload every bit", func(t *testing.T) {
		e, rec := newSealedEnv(t, kr, Config{})
		e.publish(p)
		start := pack.HeaderLen + size // block 1's payload
		for i := range size {
			for bit := range 8 {
				b := slices.Clone(p.Object.Body)
				b[start+i] ^= 1 << bit
				e.put(p.Object.Key, b)
				if ev := refillMiss(t, e, rec, IntegrityPayloadChecksum, true); ev.KeyID != "k1" {
					t.Fatalf("byte %d bit %d: key id %q", i, bit, ev.KeyID)
				}
			}
		}
		e.put(p.Object.Key, p.Object.Body)
		control(t, e, rec)
		dst := filled(size)
		if _, res, _ := e.r.RefillBlock(ctx, target, dst); !res.Hit || !bytes.Equal(dst, payloads[1]) {
			t.Fatal("restored payload does not refill")
		}
	})

	recStart, recEnd := recordSpan(t, p.Manifest.Body, 1)
	slot := sealSlotStart(t, p.Manifest.Body)
	regions := map[string][2]int{
		"identity record": {recStart, recEnd},
		"seal slot":       {slot, len(p.Manifest.Body)},
	}

	t.Run("manifest in place", func(t *testing.T) {
		e, rec := newSealedEnv(t, kr, Config{})
		e.publish(p)
		for _, name := range slices.Sorted(maps.Keys(regions)) {
			r := regions[name]
			for i := r[0]; i < r[1]; i++ {
				b := slices.Clone(p.Manifest.Body)
				b[i] ^= 1 << (i % 8)
				e.put(p.Manifest.Key, b)
				refillMiss(t, e, rec, IntegrityManifestCorrupt, false)
			}
		}
		e.put(p.Manifest.Key, p.Manifest.Body)
		control(t, e, rec)
	})

	t.Run("manifest rekeyed", func(t *testing.T) {
		e, rec := newSealedEnv(t, kr, Config{})
		e.publish(p)
		keyIDStart, macStart := slot+2, slot+2+2+1 // "k1", then the MAC length
		for _, name := range slices.Sorted(maps.Keys(regions)) {
			r := regions[name]
			var sealCaught, decodeCaught int
			for i := r[0]; i < r[1]; i++ {
				for bit := range 8 {
					b := slices.Clone(p.Manifest.Body)
					b[i] ^= 1 << bit
					rekey(t, e, target, b)
					m, derr := pack.DecodeManifest(b)
					want := IntegritySealInvalid
					if derr != nil {
						want = IntegrityManifestCorrupt
						decodeCaught++
					} else {
						sealCaught++
					}
					// The key id and MAC bytes always decode: only the seal
					// can catch them, and so it must.
					if name == "seal slot" && (i >= keyIDStart && i < keyIDStart+2 || i >= macStart) && want != IntegritySealInvalid {
						t.Fatalf("seal byte %d bit %d: decode error %v", i, bit, derr)
					}
					// So do the payload checksum bytes, the last 32 of the
					// record.
					if name == "identity record" && i >= recEnd-32 && want != IntegritySealInvalid {
						t.Fatalf("checksum byte %d bit %d: decode error %v", i, bit, derr)
					}
					ev := refillMiss(t, e, rec, want, false)
					if want == IntegritySealInvalid {
						if ev.KeyID != m.SealKeyID() {
							t.Fatalf("event key id %q, manifest names %q", ev.KeyID, m.SealKeyID())
						}
						if !errors.Is(ev.Err, pack.ErrSealInvalid) {
							t.Fatalf("event error %v", ev.Err)
						}
					}
				}
			}
			if sealCaught == 0 {
				t.Fatalf("%s: no flip reached the seal", name)
			}
			t.Logf("%s: %d flips caught by the decoder, %d by the seal", name, decodeCaught, sealCaught)
		}
		rekey(t, e, target, p.Manifest.Body)
		control(t, e, rec)
		dst := filled(size)
		if _, res, _ := e.r.RefillBlock(ctx, target, dst); !res.Hit || !bytes.Equal(dst, payloads[1]) {
			t.Fatal("the genuine manifest, re-pointed, does not refill")
		}
	})
}

// forgery rewrites a pack consistently, as an attacker with write access to
// the bucket can: edit changes the decoded manifest and the pack object;
// forge recomputes the pack digest and key, re-encodes the manifest (with
// the seal sealer makes, or keeping the old seal bytes when keepSeal), and
// publishes pack, manifest and every pointer. Every content digest matches.
func forgery(t testing.TB, e *env, p *pack.Pack, edit func(m *pack.Manifest, obj []byte), sealer pack.Sealer, keepSeal bool) {
	t.Helper()
	m, err := pack.DecodeManifest(p.Manifest.Body)
	if err != nil {
		t.Fatal(err)
	}
	obj := slices.Clone(p.Object.Body)
	edit(m, obj)
	nsd, _ := m.Namespace.Digest()
	m.PackDigest = pack.Sum(obj)
	m.PackKey = pack.PackKey(nsd, m.PackDigest)
	var body []byte
	if keepSeal {
		body, err = m.Encode()
	} else {
		body, err = m.EncodeSealed(sealer)
	}
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pack.OpenManifest(pack.ManifestKey(nsd, pack.Sum(body)), body); err != nil {
		t.Fatalf("the forgery is not digest-consistent: %v", err)
	}
	e.put(m.PackKey, obj)
	mkey := pack.ManifestKey(nsd, pack.Sum(body))
	e.put(mkey, body)
	for _, r := range m.Ranges {
		ptr := pack.Pointer{Namespace: nsd, Block: r.Key, ManifestKey: mkey, Manifest: pack.Sum(body), ManifestSize: uint64(len(body))}
		pb, err := ptr.Encode()
		if err != nil {
			t.Fatal(err)
		}
		e.put(ptr.Key(), pb)
	}
}

// The attack plain SHA-256 digests cannot catch: the bucket's content is
// rewritten consistently (another block's bytes under this identity, or
// attacker bytes with a matching checksum, or the identity's position
// moved), every digest and key recomputed and the pointers re-pointed.
// Without seals it is served; with a keyring it is a miss with a
// seal_invalid (or seal_missing) event before any payload read.
func TestConsistentRewriteIsCaughtOnlyByTheSeal(t *testing.T) {
	ctx := context.Background()
	clk := newClock()
	kr := newKeyring(t, clk, "k1")
	attacker := seal.New(clk.Now)
	if err := attacker.Add("k1", secretFor("k1", 0x55), clk.Now()); err != nil {
		t.Fatal(err)
	}
	ids := chain(t, testNamespace("acme"), 3, 100)
	const size = 256
	p, payloads := buildSealedPack(t, ids, size, kr)
	plain, _ := buildPack(t, ids, size)
	evil := bytes.Repeat([]byte{0x66}, size)
	moved := ids[1]
	moved.Position += 4

	attacks := map[string]struct {
		edit    func(m *pack.Manifest, obj []byte)
		victim  identity.CacheIdentity
		servedS []byte // what an unsealed reader is served
	}{
		"swap two blocks' payloads and checksums": {
			edit: func(m *pack.Manifest, obj []byte) {
				a, b := m.Ranges[0], m.Ranges[1]
				pa := slices.Clone(obj[a.Offset : a.Offset+a.Length])
				copy(obj[a.Offset:], obj[b.Offset:b.Offset+b.Length])
				copy(obj[b.Offset:], pa)
				m.Ranges[0].Sum, m.Ranges[1].Sum = b.Sum, a.Sum
			},
			victim: ids[1], servedS: payloads[0],
		},
		"attacker payload with its checksum": {
			edit: func(m *pack.Manifest, obj []byte) {
				r := m.Ranges[1]
				copy(obj[r.Offset:], evil)
				m.Ranges[1].Sum = pack.Sum(evil)
			},
			victim: ids[1], servedS: evil,
		},
		"identity position moved": {
			edit: func(m *pack.Manifest, _ []byte) {
				m.Ranges[1].Identity.Position += 4
				m.Ranges[1].Canonical = nil // re-encode from the identity
			},
			victim: moved, servedS: payloads[1],
		},
	}
	for _, name := range slices.Sorted(maps.Keys(attacks)) {
		a := attacks[name]
		t.Run(name, func(t *testing.T) {
			// Control: without seals the forgery is served. This is the
			// attack the digests cannot stop.
			e, rec := newSealedEnv(t, nil, Config{})
			e.publish(plain)
			forgery(t, e, plain, a.edit, nil, false)
			dst := filled(size)
			if n, res, err := e.r.RefillBlock(ctx, a.victim, dst); !res.Hit || n != size || !bytes.Equal(dst, a.servedS) {
				t.Fatalf("unsealed forgery not served (%v %v): the attack is not digest-consistent", res, err)
			}
			expectNoEvent(t, rec)

			for _, v := range []struct {
				name   string
				sealer pack.Sealer
				keep   bool
				kind   string
				is     error
			}{
				{"old seal kept", nil, true, IntegritySealInvalid, seal.ErrBadSeal},
				{"seal stripped", nil, false, IntegritySealMissing, pack.ErrSealMissing},
				{"resealed with a guessed secret", attacker, false, IntegritySealInvalid, seal.ErrBadSeal},
			} {
				for _, cfg := range []Config{{}, {ManifestCache: 16, PointerTTL: time.Minute}} {
					e, rec := newSealedEnv(t, kr, cfg)
					e.publish(p)
					// Warm the caches with the genuine manifest first.
					if _, res, _ := e.r.RefillBlock(ctx, ids[2], filled(size)); !res.Hit {
						t.Fatal("genuine block before the attack")
					}
					forgery(t, e, p, a.edit, v.sealer, v.keep)
					for _, ep := range slices.Sorted(maps.Keys(entryPoints())) {
						if ep == "RefillKey" && name == "identity position moved" {
							continue // a key-only read of the genuine key: see below
						}
						dst := filled(size)
						n, res, err := entryPoints()[ep](e.r, ctx, a.victim, dst)
						expectMiss(t, n, res, Corrupt, dst)
						if !allAA(dst) || e.payloadReads() != 0 || !errors.Is(err, v.is) {
							t.Fatalf("%s/%s: %v, %d payload reads", v.name, ep, err, e.payloadReads())
						}
						expectEvent(t, rec, v.kind, a.victim)
					}
					// The untampered pack's blocks are still readable by
					// their genuine identity once the pointers lead back.
					e.publish(p)
					for i, id := range ids {
						dst := filled(size)
						if n, res, err := e.r.RefillBlock(ctx, id, dst); !res.Hit || n != size || !bytes.Equal(dst, payloads[i]) {
							t.Fatalf("%s: genuine block %d: %v %v", v.name, i, res, err)
						}
					}
					expectNoEvent(t, rec)
				}
			}
		})
	}
}

// Rotation: blocks sealed under k1; Rotate to k2 with grace G. During the
// grace old blocks refill (from the manifest cache, re-verified) and new
// writes are sealed with k2; once the clock reaches k1's expiry old blocks
// are misses with a seal_invalid event naming k1, even though their
// manifests are cached, while k2 blocks refill.
func TestRotationGraceAndExpiry(t *testing.T) {
	ctx := context.Background()
	clk := newClock()
	kr := newKeyring(t, clk, "k1")
	const grace = time.Hour
	e, rec := newSealedEnv(t, kr, Config{Now: clk.Now, ManifestCache: 64})
	const size = 256

	old := chain(t, testNamespace("acme"), 3, 100)
	p1, oldPayloads := buildSealedPack(t, old, size, kr)
	e.publish(p1)
	refillAll := func(ids []identity.CacheIdentity, payloads [][]byte) {
		t.Helper()
		for i, id := range ids {
			dst := filled(size)
			if n, res, err := e.r.RefillBlock(ctx, id, dst); !res.Hit || n != size || !bytes.Equal(dst, payloads[i]) {
				t.Fatalf("block %d: %v %v", i, res, err)
			}
		}
	}
	refillAll(old, oldPayloads)

	if err := kr.Rotate("k2", secretFor("k2", 0), grace); err != nil {
		t.Fatal(err)
	}
	fresh := chain(t, testNamespace("acme"), 3, 5000)
	p2, freshPayloads := buildSealedPack(t, fresh, size, kr)
	if m, _ := pack.DecodeManifest(p2.Manifest.Body); m.SealKeyID() != "k2" {
		t.Fatalf("new write sealed with %q, want k2", m.SealKeyID())
	}
	e.publish(p2)

	// In the grace period: both refill; the old manifest comes from the
	// cache and is re-verified, not re-downloaded.
	clk.Advance(grace - time.Nanosecond)
	e.reset()
	refillAll(old, oldPayloads)
	if got := e.count(cold.OpRangeGet, "manifests/"); got != 0 {
		t.Fatalf("%d manifest downloads for cached manifests", got)
	}
	refillAll(fresh, freshPayloads)
	expectNoEvent(t, rec)

	// At expiry: the cached k1 manifest stops verifying.
	clk.Advance(time.Nanosecond)
	for i, id := range old {
		e.reset()
		dst := filled(size)
		n, res, err := e.r.RefillBlock(ctx, id, dst)
		expectMiss(t, n, res, Corrupt, dst)
		if !allAA(dst) || e.payloadReads() != 0 || !errors.Is(err, seal.ErrExpiredKey) {
			t.Fatalf("old block %d: %v, %d payload reads", i, err, e.payloadReads())
		}
		if i == 0 && e.count(cold.OpRangeGet, "manifests/") != 0 {
			t.Fatal("the expired check did not run on the cached manifest")
		}
		if ev := expectEvent(t, rec, IntegritySealInvalid, id); ev.KeyID != "k1" {
			t.Fatalf("event key id %q, want k1", ev.KeyID)
		}
	}
	dsts := [][]byte{filled(size), filled(size), filled(size)}
	if ns, res, _ := e.r.RefillMatching(ctx, old, dsts); len(ns) != 0 || res.Reason != Corrupt || !allAA(dsts[0]) {
		t.Fatalf("old chain after expiry: %v %v", ns, res)
	}
	expectEvent(t, rec, IntegritySealInvalid, old[0])
	refillAll(fresh, freshPayloads)
	expectNoEvent(t, rec)

	// Pruned: the key id is now unknown; still a miss naming k1.
	if kr.Prune() != 1 {
		t.Fatal("k1 not pruned")
	}
	n, res, err := e.r.RefillBlock(ctx, old[1], filled(size))
	if res.Hit || n != 0 || !errors.Is(err, seal.ErrUnknownKey) {
		t.Fatalf("after prune: %v %v", res, err)
	}
	if ev := expectEvent(t, rec, IntegritySealInvalid, old[1]); ev.KeyID != "k1" {
		t.Fatalf("event key id %q", ev.KeyID)
	}
	refillAll(fresh, freshPayloads)
	expectNoEvent(t, rec)
}

// The pre-existing corruption paths report events too; ordinary absence,
// legacy entries and budgets do not.
func TestIntegrityEventsForExistingPaths(t *testing.T) {
	ctx := context.Background()
	ids := chain(t, testNamespace("acme"), 3, 100)
	p, _ := buildPack(t, ids, 512)
	w, _ := prepare(ids[1])
	ptrKey := pack.PointerKey(w.nsd, w.key)
	moved := ids[1]
	moved.Position += 4

	cases := map[string]struct {
		setup func(e *env)
		id    identity.CacheIdentity
		kind  string // "" for no event
	}{
		"pointer garbage":         {func(e *env) { e.put(ptrKey, make([]byte, pack.PointerLen)) }, ids[1], IntegrityPointerCorrupt},
		"pointer short":           {func(e *env) { e.put(ptrKey, []byte("GCPT")) }, ids[1], IntegrityPointerCorrupt},
		"pointer of another":      {func(e *env) { e.put(ptrKey, p.Pointers[2].Body) }, ids[1], IntegrityPointerCorrupt},
		"manifest replaced":       {func(e *env) { e.put(p.Manifest.Key, bytes.Repeat([]byte{1}, len(p.Manifest.Body))) }, ids[1], IntegrityManifestCorrupt},
		"manifest truncated":      {func(e *env) { e.put(p.Manifest.Key, p.Manifest.Body[:100]) }, ids[1], IntegrityManifestCorrupt},
		"payload flipped":         {func(e *env) { b := slices.Clone(p.Object.Body); b[pack.HeaderLen+600] ^= 1; e.put(p.Object.Key, b) }, ids[1], IntegrityPayloadChecksum},
		"pack truncated":          {func(e *env) { e.put(p.Object.Key, p.Object.Body[:pack.HeaderLen+600]) }, ids[1], IntegrityPayloadChecksum},
		"identity mismatch":       {func(*env) {}, moved, IntegrityIdentityMismatch},
		"not found":               {func(*env) {}, chain(t, testNamespace("acme"), 4, 100)[3], ""},
		"pack gone":               {func(e *env) { _ = e.mem.Delete(ctx, p.Object.Key) }, ids[1], ""},
		"legacy":                  {func(e *env) { plantManifest(t, e, ids[1], legacyHeader(2, "old")) }, ids[1], ""},
		"store down (no corrupt)": {func(e *env) { e.setFault(func(context.Context, string, string) error { return cold.ErrUnavailable }) }, ids[1], ""},
	}
	for _, name := range slices.Sorted(maps.Keys(cases)) {
		c := cases[name]
		t.Run(name, func(t *testing.T) {
			e, rec := newSealedEnv(t, nil, Config{})
			e.publish(p)
			c.setup(e)
			n, res, err := e.r.RefillBlock(ctx, c.id, filled(512))
			if res.Hit || n != 0 {
				t.Fatalf("hit: %v", res)
			}
			if c.kind == "" {
				expectNoEvent(t, rec)
				return
			}
			ev := expectEvent(t, rec, c.kind, c.id)
			if err != nil && ev.Err != err {
				t.Fatalf("event error %v, refill error %v", ev.Err, err)
			}
		})
	}
}

// The same seal checks against a real S3 server (versitygw; skipped
// without GPUCACHE_VERSITYGW): a sealed pack refills, and a consistently
// rewritten manifest (old seal kept, digest and key recomputed, pointer
// re-pointed) is a miss with a seal_invalid event.
func TestSealedRefillOverS3(t *testing.T) {
	store := s3test.NewStore(t, "sealed/")
	ctx := context.Background()
	clk := newClock()
	kr := newKeyring(t, clk, "k1")
	ids := chain(t, testNamespace("acme"), 3, 100)
	p, payloads := buildSealedPack(t, ids, 4096, kr)
	put := func(key string, body []byte) {
		t.Helper()
		if err := store.Put(ctx, key, body, cold.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, o := range append([]pack.Object{p.Object, p.Manifest}, p.Pointers...) {
		put(o.Key, o.Body)
	}
	rec := &recorder{}
	r, err := New(store, Config{Keyring: kr, OnIntegrity: rec.on, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	for i, id := range ids {
		dst := filled(4096)
		if n, res, err := r.RefillBlock(ctx, id, dst); !res.Hit || n != 4096 || !bytes.Equal(dst, payloads[i]) {
			t.Fatalf("block %d: %v %v", i, res, err)
		}
	}
	expectNoEvent(t, rec)

	m, err := pack.DecodeManifest(p.Manifest.Body)
	if err != nil {
		t.Fatal(err)
	}
	m.Ranges[1].Sum[0] ^= 1
	body, err := m.Encode() // the old seal bytes
	if err != nil {
		t.Fatal(err)
	}
	w, _ := prepare(ids[1])
	mkey := pack.ManifestKey(w.nsd, pack.Sum(body))
	put(mkey, body)
	ptr := pack.Pointer{Namespace: w.nsd, Block: w.key, ManifestKey: mkey, Manifest: pack.Sum(body), ManifestSize: uint64(len(body))}
	pb, err := ptr.Encode()
	if err != nil {
		t.Fatal(err)
	}
	put(ptr.Key(), pb)
	dst := filled(4096)
	n, res, err := r.RefillBlock(ctx, ids[1], dst)
	expectMiss(t, n, res, Corrupt, dst)
	if !allAA(dst) || !errors.Is(err, seal.ErrBadSeal) {
		t.Fatalf("rewritten manifest over S3: %v", err)
	}
	expectEvent(t, rec, IntegritySealInvalid, ids[1])
}

// sealFunc adapts a function to pack.Sealer: a peer's sealer.
type sealFunc func(nsCanonical, sealed []byte) (seal.Seal, error)

func (f sealFunc) Seal(nsCanonical, sealed []byte) (seal.Seal, error) { return f(nsCanonical, sealed) }
