package refill

import (
	"bytes"
	"context"
	"crypto/cipher"
	"errors"
	"fmt"

	"github.com/gpucache/gpucache/internal/cold"
	"github.com/gpucache/gpucache/internal/cold/pack"
)

// call is one admitted refill call: its deadline, what is left of its
// budget, the manifests it has already read, and what it learnt about the
// store's health. Used by one goroutine.
type call struct {
	r         *Refiller
	parent    context.Context // the caller's context
	ctx       context.Context // parent with Config.Timeout
	cancel    context.CancelFunc
	ticket    ticket
	budget    int64                     // payload bytes left
	manifests map[string]*pack.Manifest // verified manifests by key, for chains
	health    outcome                   // worst store outcome seen
}

// begin admits a call through the breaker. It returns a nil call, and the
// miss to return, when the store must not be called.
func (r *Refiller) begin(ctx context.Context, budget int64) (*call, Result, error) {
	if err := ctx.Err(); err != nil {
		return nil, Missing(Unavailable), fmt.Errorf("gpucache/cold/refill: %w", err)
	}
	t, ok := r.br.admit()
	if !ok {
		return nil, Missing(BreakerOpen), nil
	}
	cctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	return &call{r: r, parent: ctx, ctx: cctx, cancel: cancel, ticket: t, budget: budget, health: succeeded}, Result{}, nil
}

// end reports the call's outcome to the breaker.
func (c *call) end() {
	c.cancel()
	c.r.br.done(c.ticket, c.health)
}

// storeMiss classifies a failed store operation and records what it says
// about the store's health.
func (c *call) storeMiss(op, key string, err error) (Result, error) {
	err = fmt.Errorf("gpucache/cold/refill: %s %s: %w", op, key, err)
	switch {
	case errors.Is(err, cold.ErrNotFound):
		return Missing(NotFound), nil
	case errors.Is(err, cold.ErrRange), errors.Is(err, cold.ErrCorrupt), errors.Is(err, cold.ErrInvalidKey):
		// The store answered: the object is not what its reference said.
		if !errors.Is(err, cold.ErrCorrupt) {
			err = fmt.Errorf("%w: %w", cold.ErrCorrupt, err)
		}
		return Missing(Corrupt), err
	case c.parent.Err() != nil:
		// The caller gave up; that says nothing about the store.
		if c.health != failed {
			c.health = neutral
		}
		return Missing(Unavailable), err
	default:
		// Unavailable, our own timeout, or anything unexpected.
		c.health = failed
		return Missing(Unavailable), err
	}
}

// get reads the whole object key of size bytes into a new buffer.
func (c *call) get(op, key string, size int) ([]byte, Result, error) {
	b := make([]byte, size)
	if err := c.r.store.RangeGet(c.ctx, key, 0, b); err != nil {
		res, err := c.storeMiss(op, key, err)
		return nil, res, err
	}
	return b, Hit, nil
}

// integrity reports a miss that points at corruption or tampering to
// Config.OnIntegrity.
func (c *call) integrity(kind string, w want, keyID string, err error) {
	if f := c.r.cfg.OnIntegrity; f != nil {
		f(IntegrityEvent{Kind: kind, Namespace: w.nsd.String(), Key: w.key.String(), KeyID: keyID, Err: err})
	}
}

// block runs the refill of one block. The order of checks is the contract
// (doc.go): pointer, manifest (size-bounded), decode and verify, seal, the
// full identity byte for byte, budget, then and only then the payload read,
// and its checksum.
func (c *call) block(w want, dst dest) (int, Result, error) {
	// 1. Pointer: a fixed-size object under a key derived from the
	// expected identity.
	ptrKey := pack.PointerKey(w.nsd, w.key)
	ptr, cached := c.r.cache.pointer(ptrKey)
	if !cached {
		pb, res, err := c.get("pointer", ptrKey, pack.PointerLen)
		if !res.Hit {
			if res.Reason == Corrupt {
				c.integrity(IntegrityPointerCorrupt, w, "", err)
			}
			return 0, res, err
		}
		if ptr, err = pack.DecodePointer(pb); err != nil {
			err = fmt.Errorf("gpucache/cold/refill: pointer %s: %w", ptrKey, err)
			c.integrity(IntegrityPointerCorrupt, w, "", err)
			return 0, Missing(Corrupt), err
		}
		if ptr.Namespace != w.nsd || ptr.Block != w.key {
			err := fmt.Errorf("gpucache/cold/refill: %w: pointer %s names block %s of namespace %s", cold.ErrCorrupt, ptrKey, ptr.Block, ptr.Namespace)
			c.integrity(IntegrityPointerCorrupt, w, "", err)
			return 0, Missing(Corrupt), err
		}
	}

	// 2-3. Manifest: bounded download, then key digest, v3 decode, verify,
	// seal.
	m, res, err := c.manifest(w, ptr)
	if !res.Hit {
		c.r.cache.forget(ptrKey, ptr.ManifestKey)
		return 0, res, err
	}
	n, res, err := c.payload(w, m, dst)
	if res.Hit {
		if !cached {
			c.r.cache.putPointer(ptrKey, ptr)
		}
	} else {
		c.r.cache.forget(ptrKey, ptr.ManifestKey)
	}
	return n, res, err
}

// manifest returns the verified manifest ptr names, downloading it at most
// once per call. Its seal is verified once per call, whether it was
// downloaded or taken from the cross-call cache, so a key that expired or
// was dropped since the manifest was cached stops verifying.
func (c *call) manifest(w want, ptr pack.Pointer) (*pack.Manifest, Result, error) {
	if m, ok := c.manifests[ptr.ManifestKey]; ok {
		return m, Hit, nil // verified, seal included, earlier in this call
	}
	m, fromCache := c.r.cache.manifest(ptr.ManifestKey)
	if !fromCache {
		if ptr.ManifestSize > uint64(c.r.cfg.ManifestMax) {
			return nil, Missing(OverBudget), nil
		}
		mb, res, err := c.get("manifest", ptr.ManifestKey, int(ptr.ManifestSize))
		if !res.Hit {
			if res.Reason == Corrupt {
				c.integrity(IntegrityManifestCorrupt, w, "", err)
			}
			return nil, res, err
		}
		m, err = pack.OpenManifest(ptr.ManifestKey, mb)
		switch {
		case errors.Is(err, pack.ErrLegacyManifest):
			return nil, Missing(Legacy), nil
		case err != nil:
			err = fmt.Errorf("gpucache/cold/refill: %w", err)
			c.integrity(IntegrityManifestCorrupt, w, "", err)
			return nil, Missing(Corrupt), err
		}
	}
	// 3b. Seal: with a keyring it must verify now; without one a sealed
	// manifest is not read.
	if err := m.VerifySeal(c.r.verifier); err != nil {
		err = fmt.Errorf("gpucache/cold/refill: manifest %s: %w", ptr.ManifestKey, err)
		kind := IntegritySealInvalid
		if errors.Is(err, pack.ErrSealMissing) {
			kind = IntegritySealMissing
		}
		c.integrity(kind, w, m.SealKeyID(), err)
		return nil, Missing(Corrupt), err
	}
	if c.manifests == nil {
		c.manifests = make(map[string]*pack.Manifest, 1)
	}
	c.manifests[ptr.ManifestKey] = m
	if !fromCache {
		c.r.cache.putManifest(ptr.ManifestKey, m)
	}
	return m, Hit, nil
}

// dest is where a block's payload goes: a buffer the caller passed, or
// (alloc set) one the caller hands out once the payload's length is known.
type dest struct {
	buf   []byte
	alloc func(n int) ([]byte, bool)
}

// payload finds w's range in m, checks identity, budget and dst, reads the
// payload into dst and checks its SHA-256.
func (c *call) payload(w want, m *pack.Manifest, d dest) (int, Result, error) {
	// 4. The manifest's namespace and the block's full canonical identity
	// must equal the expected ones byte for byte. The pointer and manifest
	// keys already commit to the namespace digest and the block key; this
	// compares what they do not cover (position) and everything again.
	if m.Namespace != w.id.Namespace {
		c.integrity(IntegrityIdentityMismatch, w, m.SealKeyID(), errors.New("gpucache/cold/refill: manifest namespace is not the expected namespace"))
		return 0, Missing(IdentityMismatch), nil
	}
	rg, ok := m.Find(w.key)
	if !ok {
		err := fmt.Errorf("gpucache/cold/refill: %w: manifest of pointer %s lacks block %s", cold.ErrCorrupt, pack.PointerKey(w.nsd, w.key), w.key)
		c.integrity(IntegrityManifestCorrupt, w, m.SealKeyID(), err)
		return 0, Missing(Corrupt), err
	}
	if w.canon != nil && !bytes.Equal(rg.Canonical, w.canon) {
		c.integrity(IntegrityIdentityMismatch, w, m.SealKeyID(), errors.New("gpucache/cold/refill: manifest binds the block key to another full identity"))
		return 0, Missing(IdentityMismatch), nil
	}

	// 4b. An encrypted pack: its key id must be usable now.
	aead, err := m.Decrypter(c.r.dec)
	if err != nil {
		err = fmt.Errorf("gpucache/cold/refill: manifest %s: %w", m.PackKey, err)
		c.integrity(IntegrityKeyUnavailable, w, m.CipherKey(), err)
		return 0, Missing(KeyUnavailable), err
	}

	// 5. Budget (the larger of the stored and the plaintext length), then
	// the destination.
	if max(rg.Length, rg.Size) > uint64(max(c.budget, 0)) {
		return 0, Missing(OverBudget), nil
	}
	dst := d.buf
	if d.alloc != nil {
		// Every check that needs no payload byte has passed: only now
		// does the caller commit a destination (a hot-tier slot).
		b, ok := d.alloc(int(rg.Size))
		if !ok {
			return 0, Missing(NoDestination), nil
		}
		dst = b
	}
	if rg.Size > uint64(len(dst)) {
		return 0, Missing(ShortBuffer), fmt.Errorf("%w: payload %d bytes, dst %d", ErrShortBuffer, rg.Size, len(dst))
	}
	if !m.Plain(rg) {
		return c.encoded(w, m, rg, aead, dst[:rg.Size])
	}

	// 6. The payload read, into the caller's buffer, hashed as it streams
	// in (cold.RangeGetTee): the checksum costs no second pass over the
	// bytes and overlaps the transfer. Nothing in out is the caller's
	// until step 7 has passed.
	n := int(rg.Length)
	out := dst[:n]
	c.budget -= int64(n)
	sum := pack.NewSum()
	if err := cold.RangeGetTee(c.ctx, c.r.store, m.PackKey, int64(rg.Offset), out, sum); err != nil {
		clear(out)
		res, err := c.storeMiss("payload", m.PackKey, err)
		if res.Reason == Corrupt {
			c.integrity(IntegrityPayloadChecksum, w, m.SealKeyID(), err)
		}
		return 0, res, err
	}

	// 7. Checksum: a corrupt payload or another object under the pack key
	// returns no bytes.
	if sum.Digest() != rg.Sum {
		clear(out)
		err := fmt.Errorf("gpucache/cold/refill: %w: payload of block %s in %s fails its checksum", cold.ErrCorrupt, w.key, m.PackKey)
		c.integrity(IntegrityPayloadChecksum, w, m.SealKeyID(), err)
		return 0, Missing(Corrupt), err
	}
	return n, Hit, nil
}

// encoded reads an encrypted or compressed range: its stored bytes into a
// buffer of their own (the plaintext differs in length or is not yet
// authentic, so it cannot go to out directly), then decrypts and
// decompresses them into out and checks the plaintext's SHA-256. On a miss
// out is zeroed.
func (c *call) encoded(w want, m *pack.Manifest, rg pack.Range, aead cipher.AEAD, out []byte) (int, Result, error) {
	c.budget -= int64(max(rg.Length, rg.Size))
	stored := make([]byte, rg.Length)
	if err := c.r.store.RangeGet(c.ctx, m.PackKey, int64(rg.Offset), stored); err != nil {
		clear(out)
		res, err := c.storeMiss("payload", m.PackKey, err)
		if res.Reason == Corrupt {
			c.integrity(IntegrityPayloadChecksum, w, m.SealKeyID(), err)
		}
		return 0, res, err
	}
	if err := m.OpenRange(rg, stored, out, aead, c.r.cfg.Codec); err != nil {
		err = fmt.Errorf("gpucache/cold/refill: block %s in %s: %w", w.key, m.PackKey, err)
		switch {
		case errors.Is(err, pack.ErrDecrypt):
			c.integrity(IntegrityDecrypt, w, m.CipherKey(), err)
		default:
			c.integrity(IntegrityPayloadChecksum, w, m.SealKeyID(), err)
		}
		return 0, Missing(Corrupt), err
	}
	return len(out), Hit, nil
}
