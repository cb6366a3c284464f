package lifecycle

import (
	"context"
	"errors"
	"fmt"

	"github.com/gpucache/gpucache/api/identity"
	"github.com/gpucache/gpucache/internal/cold"
	"github.com/gpucache/gpucache/internal/cold/crypt"
	"github.com/gpucache/gpucache/internal/cold/pack"
)

// BackfillReport counts what BackfillWith read and delivered.
type BackfillReport struct {
	// BytesRead is every byte requested from the store: pointers,
	// manifests and payloads. It never exceeds the budget.
	BytesRead int64
	// Blocks is the number of verified blocks handed to fn.
	Blocks int
	// Legacy: blocks whose manifest is v1/v2 (clean misses).
	Legacy int
	// Corrupt: blocks skipped because a pointer, manifest or payload failed
	// its checks (seal failures included).
	Corrupt int
	// SealRejected: of Corrupt, blocks whose manifest's seal was missing
	// (a verifier was given), did not verify, or could not be checked (no
	// verifier was given and the manifest is sealed).
	SealRejected int
	// Missing: blocks skipped because an object was gone.
	Missing int
	// KeyUnavailable: blocks skipped because their pack is encrypted under
	// a key the call cannot use (no cipher keyring, unknown or expired key
	// id). Nothing of them was downloaded past the manifest.
	KeyUnavailable int
	// Exhausted: BackfillWith stopped because the next read did not fit.
	Exhausted bool
}

// manifestResult caches one manifest download for a BackfillWith call.
type manifestResult struct {
	m       *pack.Manifest
	legacy  bool
	bad     bool
	badSeal bool
}

// BackfillOptions are BackfillWith's checks and decoders.
type BackfillOptions struct {
	// Verifier is the seal policy; nil: sealed manifests are skipped.
	Verifier pack.SealVerifier
	// Crypt opens encrypted packs (pack/doc.go, "Encoded blocks"); nil:
	// their blocks are skipped and counted in KeyUnavailable.
	Crypt pack.Decrypter
	// Codec decompresses zstd blocks; nil: BackfillWith makes its own.
	Codec pack.Compressor
}

// BackfillWith reads the namespace's blocks in pointer-key order (pointer,
// then manifest, then payload, each verified) and calls fn with each
// block's range and plaintext (Range.Size is its length), until every
// pointer is visited or the next read would take BytesRead past budget. fn
// owns the payload slice. An error from fn, a cancelled context or a store
// error other than not-found, corrupt or out-of-range stops it and is
// returned.
//
// The seal policy is pack.Manifest.VerifySeal with o.Verifier: with a
// verifier (a *seal.Keyring) only blocks of manifests whose kind-1 seal it
// verifies are delivered; without one, blocks of unsealed manifests are
// delivered and those of sealed ones, which it cannot check, are skipped.
// Blocks skipped for their seal count in Corrupt and SealRejected.
// Encrypted blocks are opened with o.Crypt, compressed ones decompressed
// with o.Codec.
func BackfillWith(ctx context.Context, st cold.Store, ns identity.NamespaceDigest, budget int64,
	o BackfillOptions, fn func(pack.Range, []byte) error) (BackfillReport, error) {
	var rep BackfillReport
	if o.Codec == nil {
		z, err := crypt.NewZstd()
		if err != nil {
			return rep, err
		}
		o.Codec = z
	}
	if budget <= 0 {
		rep.Exhausted = true
		return rep, nil
	}
	pointers, err := listAll(ctx, st, pack.NamespacePrefixes(ns)[2])
	if err != nil {
		return rep, err
	}
	b := &backfill{st: st, ns: ns, budget: budget, o: o, fn: fn, manifests: make(map[string]manifestResult)}
	for _, oi := range pointers {
		if err := ctx.Err(); err != nil {
			return b.rep, err
		}
		if stop, err := b.pointer(ctx, oi); stop || err != nil {
			return b.rep, err
		}
	}
	return b.rep, nil
}

// backfill is one BackfillWith walk over the namespace's pointers.
type backfill struct {
	st        cold.Store
	ns        identity.NamespaceDigest
	budget    int64
	o         BackfillOptions
	fn        func(pack.Range, []byte) error
	rep       BackfillReport
	manifests map[string]manifestResult // by manifest key, read once
}

// take reserves n bytes of budget; false means the read must not happen.
func (b *backfill) take(n int64) bool {
	if n < 0 || n > b.budget-b.rep.BytesRead {
		b.rep.Exhausted = true
		return false
	}
	b.rep.BytesRead += n
	return true
}

// skip classifies a read error: true to go on with the next pointer.
func (b *backfill) skip(err error) bool {
	switch {
	case errors.Is(err, cold.ErrNotFound):
		b.rep.Missing++
	case errors.Is(err, cold.ErrCorrupt), errors.Is(err, cold.ErrRange):
		b.rep.Corrupt++
	default:
		return false
	}
	return true
}

// pointer reads the pointer oi, then its manifest and its block. stop:
// the budget is spent.
func (b *backfill) pointer(ctx context.Context, oi cold.ObjectInfo) (stop bool, err error) {
	kns, blk, err := pack.ParsePointerKey(oi.Key)
	if err != nil || kns != b.ns || oi.Size != int64(pack.PointerLen) {
		b.rep.Corrupt++ // judged from the listing: nothing downloaded
		return false, nil
	}
	if !b.take(int64(pack.PointerLen)) {
		return true, nil
	}
	body, err := readAll(ctx, b.st, oi.Key, int64(pack.PointerLen))
	if err != nil {
		if b.skip(err) {
			return false, nil
		}
		return false, fmt.Errorf("gpucache/cold/lifecycle: backfill pointer %q: %w", oi.Key, err)
	}
	p, err := pack.DecodePointer(body)
	if err != nil || p.Namespace != b.ns || p.Block != blk {
		b.rep.Corrupt++
		return false, nil
	}
	mr, next, err := b.manifest(ctx, p)
	if next != manifestUse || err != nil {
		return next == manifestStop, err
	}
	return b.block(ctx, mr, blk)
}

// What pointer does after manifest.
const (
	manifestUse  = iota // deliver the block
	manifestSkip        // go on with the next pointer
	manifestStop        // the budget is spent
)

// manifest returns the manifest p names, read and checked once per key.
func (b *backfill) manifest(ctx context.Context, p pack.Pointer) (manifestResult, int, error) {
	if mr, ok := b.manifests[p.ManifestKey]; ok {
		return mr, manifestUse, nil
	}
	if !b.take(int64(p.ManifestSize)) {
		return manifestResult{}, manifestStop, nil
	}
	mb, err := readAll(ctx, b.st, p.ManifestKey, int64(p.ManifestSize))
	switch {
	case err == nil:
	case errors.Is(err, cold.ErrNotFound):
		// Not cached: a later pointer may find it rewritten.
		b.rep.Missing++
		return manifestResult{}, manifestSkip, nil
	case b.skip(err):
		return manifestResult{}, manifestSkip, nil
	default:
		return manifestResult{}, manifestSkip, fmt.Errorf("gpucache/cold/lifecycle: backfill manifest %q: %w", p.ManifestKey, err)
	}
	var mr manifestResult
	m, err := pack.OpenManifest(p.ManifestKey, mb)
	switch {
	case errors.Is(err, pack.ErrLegacyManifest):
		mr.legacy = true
	case err != nil:
		mr.bad = true
	case m.VerifySeal(b.o.Verifier) != nil:
		mr.bad, mr.badSeal = true, true
	default:
		mr.m = m
	}
	b.manifests[p.ManifestKey] = mr
	return mr, manifestUse, nil
}

// block reads block blk of manifest mr, checks or decodes it, and hands
// its plaintext to fn. stop: the budget is spent.
func (b *backfill) block(ctx context.Context, mr manifestResult, blk identity.BlockKey) (stop bool, err error) {
	if mr.legacy {
		b.rep.Legacy++
		return false, nil
	}
	if mr.bad {
		b.rep.Corrupt++
		if mr.badSeal {
			b.rep.SealRejected++
		}
		return false, nil
	}
	rg, found := mr.m.Find(blk)
	if !found || rg.Length > pack.MaxPackSize {
		b.rep.Corrupt++
		return false, nil
	}
	aead, err := mr.m.Decrypter(b.o.Crypt)
	if err != nil {
		b.rep.KeyUnavailable++
		return false, nil
	}
	if !b.take(int64(rg.Length)) {
		return true, nil
	}
	payload := make([]byte, rg.Length)
	if err := b.st.RangeGet(ctx, mr.m.PackKey, int64(rg.Offset), payload); err != nil {
		if b.skip(err) {
			return false, nil
		}
		return false, fmt.Errorf("gpucache/cold/lifecycle: backfill pack %q: %w", mr.m.PackKey, err)
	}
	if !mr.m.Plain(rg) {
		plain := make([]byte, rg.Size)
		if err := mr.m.OpenRange(rg, payload, plain, aead, b.o.Codec); err != nil {
			b.rep.Corrupt++
			return false, nil
		}
		payload = plain
	} else if pack.Sum(payload) != rg.Sum {
		b.rep.Corrupt++
		return false, nil
	}
	if err := b.fn(rg, payload); err != nil {
		return false, err
	}
	b.rep.Blocks++
	return false, nil
}
