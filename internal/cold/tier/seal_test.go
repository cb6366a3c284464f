package tier

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gpucache/gpucache/api/identity"
	"github.com/gpucache/gpucache/internal/cold"
	"github.com/gpucache/gpucache/internal/cold/pack"
	"github.com/gpucache/gpucache/internal/cold/refill"
	"github.com/gpucache/gpucache/internal/security/seal"
	"github.com/gpucache/gpucache/internal/testfix"
)

type events struct {
	mu  sync.Mutex
	evs []refill.IntegrityEvent // guarded by mu
}

func (e *events) on(ev refill.IntegrityEvent) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.evs = append(e.evs, ev)
}

func (e *events) take() []refill.IntegrityEvent {
	e.mu.Lock()
	defer e.mu.Unlock()
	evs := e.evs
	e.evs = nil
	return evs
}

// writeBehind remembers and evicts n chained blocks starting at token seed,
// with payloadOf payloads, flushes, and returns their identities.
func writeBehind(t *testing.T, tr *Tier, ns identity.Namespace, n int, seed uint32) []identity.CacheIdentity {
	t.Helper()
	ids, _ := writeChain(t, tr, ns, n, seed, func(k identity.BlockKey) []byte { return payloadOf(k, 1024) })
	return ids
}

// writeChain remembers and evicts n chained blocks starting at token seed,
// each with payload(key), flushes them as one pack, and returns their
// identities and keys.
func writeChain(t *testing.T, tr *Tier, ns identity.Namespace, n int, seed uint32, payload func(identity.BlockKey) []byte) ([]identity.CacheIdentity, []identity.BlockKey) {
	t.Helper()
	d, _ := ns.Digest()
	toks := make([]uint32, n*int(ns.Layout.BlockTokens))
	for i := range toks {
		toks[i] = seed + uint32(i)
	}
	ids, err := identity.Identities(ns, toks)
	if err != nil {
		t.Fatal(err)
	}
	keys := make([]identity.BlockKey, len(ids))
	for i, id := range ids {
		keys[i], _ = id.Key()
		tr.Remember(id)
		tr.Evicted(d, keys[i], id.Parent, id.ValidLength, payload(keys[i]))
	}
	if rep := tr.Flush(context.Background(), true); rep.Completed != 1 || rep.Err != nil {
		t.Fatalf("flush: %+v", rep)
	}
	return ids, keys
}

// manifests returns every stored manifest, decoded, by key.
func manifests(t *testing.T, store *cold.Mem) map[string]*pack.Manifest {
	t.Helper()
	out := map[string]*pack.Manifest{}
	for _, k := range store.Keys() {
		if !strings.HasPrefix(k, "manifests/") {
			continue
		}
		m, err := pack.OpenManifest(k, readObject(t, store, k))
		if err != nil {
			t.Fatal(err)
		}
		out[k] = m
	}
	return out
}

func refillAll(t *testing.T, tr *Tier, ns identity.Namespace, ids []identity.CacheIdentity) {
	t.Helper()
	dst := make([]byte, 1024)
	for i, id := range ids {
		k, _ := id.Key()
		if n, res, err := tr.Refill(context.Background(), ns, k, dst); !res.Hit || n != 1024 || !bytes.Equal(dst, payloadOf(k, 1024)) {
			t.Fatalf("block %d: %v %v", i, res, err)
		}
	}
}

// With a keyring the tier seals what it writes with the current key and
// refills only what verifies: through a rotation's grace period both keys'
// blocks refill; after k1 expires its blocks are misses with a
// seal_invalid event naming k1 (their manifests are cached, and still
// re-verified), while k2's blocks refill.
func TestSealedWriteBehindAndRotation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		kr := seal.New(time.Now)
		if err := kr.Add("k1", bytes.Repeat([]byte{1}, 32), time.Now()); err != nil {
			t.Fatal(err)
		}
		store := cold.NewMem()
		ev := &events{}
		tr := newTier(t, store, func(c *Config) { c.Keyring = kr; c.OnIntegrity = ev.on })
		ns := testfix.TinyNamespace("acme")

		old := writeBehind(t, tr, ns, 4, 0)
		ms := manifests(t, store)
		if len(ms) != 1 {
			t.Fatalf("%d manifests", len(ms))
		}
		var oldKey string
		for k, m := range ms {
			if !m.Sealed() || m.SealKeyID() != "k1" {
				t.Fatalf("manifest %s sealed %v with %q", k, m.Sealed(), m.SealKeyID())
			}
			oldKey = k
		}
		refillAll(t, tr, ns, old)

		const grace = time.Hour
		if err := kr.Rotate("k2", bytes.Repeat([]byte{2}, 32), grace); err != nil {
			t.Fatal(err)
		}
		fresh := writeBehind(t, tr, ns, 4, 10000)
		for k, m := range manifests(t, store) {
			if want := map[bool]string{true: "k1", false: "k2"}[k == oldKey]; m.SealKeyID() != want {
				t.Fatalf("manifest %s sealed with %q, want %q", k, m.SealKeyID(), want)
			}
		}
		time.Sleep(grace / 2) // synctest: the fake clock moves at once
		refillAll(t, tr, ns, old)
		refillAll(t, tr, ns, fresh)
		if evs := ev.take(); len(evs) != 0 || tr.Stats().RefillIntegrity != 0 {
			t.Fatalf("events in grace: %v", evs)
		}

		time.Sleep(grace / 2) // synctest: the fake clock moves at once
		d, _ := ns.Digest()
		for _, id := range old {
			k, _ := id.Key()
			dst := bytes.Repeat([]byte{0xAA}, 1024)
			n, res, err := tr.Refill(context.Background(), ns, k, dst)
			if res.Hit || res.Reason != refill.Corrupt || n != 0 || !errors.Is(err, seal.ErrExpiredKey) || !bytes.Equal(dst, bytes.Repeat([]byte{0xAA}, 1024)) {
				t.Fatalf("expired block: %d %v %v", n, res, err)
			}
			evs := ev.take()
			if len(evs) != 1 || evs[0].Kind != refill.IntegritySealInvalid || evs[0].KeyID != "k1" || evs[0].Namespace != d.String() || evs[0].Key != k.String() {
				t.Fatalf("events %+v", evs)
			}
		}
		refillAll(t, tr, ns, fresh)
		if evs := ev.take(); len(evs) != 0 {
			t.Fatalf("events for k2 blocks: %v", evs)
		}
		if st := tr.Stats(); st.RefillIntegrity != uint64(len(old)) {
			t.Fatalf("RefillIntegrity %d, want %d", st.RefillIntegrity, len(old))
		}
	})
}

// Someone with write access to the bucket rewrites a sealed manifest
// consistently (a payload checksum changed, digest and key recomputed,
// pointer re-pointed): the tier's refill is a miss with a seal_invalid
// event, and the other blocks still refill.
func TestSealedTierRejectsConsistentRewrite(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		kr := seal.New(time.Now)
		if err := kr.Add("k1", bytes.Repeat([]byte{1}, 32), time.Now()); err != nil {
			t.Fatal(err)
		}
		store := cold.NewMem()
		ev := &events{}
		tr := newTier(t, store, func(c *Config) { c.Keyring = kr; c.OnIntegrity = ev.on })
		ns := testfix.TinyNamespace("acme")
		ids := writeBehind(t, tr, ns, 3, 0)
		var m *pack.Manifest
		for _, mm := range manifests(t, store) {
			m = mm
		}
		victim, _ := ids[1].Key()
		d, _ := ns.Digest()
		for i := range m.Ranges {
			if m.Ranges[i].Key == victim {
				m.Ranges[i].Sum[0] ^= 1 // keeps the old seal bytes
			}
		}
		body, err := m.Encode()
		if err != nil {
			t.Fatal(err)
		}
		mkey := pack.ManifestKey(d, pack.Sum(body))
		ptr := pack.Pointer{Namespace: d, Block: victim, ManifestKey: mkey, Manifest: pack.Sum(body), ManifestSize: uint64(len(body))}
		pb, _ := ptr.Encode()
		ctx := context.Background()
		if err := store.Put(ctx, mkey, body, cold.PutOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := store.Put(ctx, ptr.Key(), pb, cold.PutOptions{}); err != nil {
			t.Fatal(err)
		}
		// The pointer may be cached for PointerTTL: use a fresh tier's reader
		// on the same store and keyring.
		tr2 := newTier(t, store, func(c *Config) { c.Keyring = kr; c.OnIntegrity = ev.on })
		dst := make([]byte, 1024)
		if n, res, err := tr2.Refill(ctx, ns, victim, dst); res.Hit || n != 0 || !errors.Is(err, pack.ErrSealInvalid) {
			t.Fatalf("rewritten manifest: %d %v %v", n, res, err)
		}
		if evs := ev.take(); len(evs) != 1 || evs[0].Kind != refill.IntegritySealInvalid {
			t.Fatalf("events %+v", evs)
		}
		refillAll(t, tr2, ns, []identity.CacheIdentity{ids[0], ids[2]})
	})
}

// Defaults are unchanged: no keyring writes unsealed manifests and refills
// them; a tier without a keyring never serves a sealed manifest.
func TestUnsealedDefaultAndSealedWithoutKeyring(t *testing.T) {
	store := cold.NewMem()
	tr := newTier(t, store, nil)
	ns := testfix.TinyNamespace("acme")
	ids := writeBehind(t, tr, ns, 2, 0)
	for k, m := range manifests(t, store) {
		if m.Seal.Kind != pack.SealNone || len(m.Seal.KeyID)+len(m.Seal.MAC) != 0 {
			t.Fatalf("default tier sealed %s", k)
		}
	}
	refillAll(t, tr, ns, ids)

	kr := seal.New(nil)
	if err := kr.Add("k1", bytes.Repeat([]byte{1}, 32), time.Time{}); err != nil {
		t.Fatal(err)
	}
	sealedStore := cold.NewMem()
	writer := newTier(t, sealedStore, func(c *Config) { c.Keyring = kr })
	sids := writeBehind(t, writer, ns, 2, 500)
	ev := &events{}
	reader := newTier(t, sealedStore, func(c *Config) { c.OnIntegrity = ev.on })
	k, _ := sids[0].Key()
	if _, res, err := reader.Refill(context.Background(), ns, k, make([]byte, 1024)); res.Hit || !errors.Is(err, pack.ErrSealUnverifiable) {
		t.Fatalf("sealed manifest without keyring: %v %v", res, err)
	}
	if evs := ev.take(); len(evs) != 1 || evs[0].Kind != refill.IntegritySealInvalid || evs[0].KeyID != "k1" {
		t.Fatalf("events %+v", evs)
	}
	refillAll(t, writer, ns, sids)
	// Refill.Keyring alone serves for both writing and reading.
	bothStore := cold.NewMem()
	both := newTier(t, bothStore, func(c *Config) { c.Refill.Keyring = kr })
	bids := writeBehind(t, both, ns, 2, 900)
	refillAll(t, both, ns, bids)
	for k, m := range manifests(t, bothStore) {
		if m.SealKeyID() != "k1" {
			t.Fatalf("Refill.Keyring tier wrote %s sealed with %q", k, m.SealKeyID())
		}
	}
}
