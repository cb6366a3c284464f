package lifecycle

import (
	"context"
	"errors"
	"fmt"

	"github.com/gpucache/gpucache/internal/cold"
	"github.com/gpucache/gpucache/internal/cold/crypt"
	"github.com/gpucache/gpucache/internal/cold/pack"
	"github.com/gpucache/gpucache/internal/identity"
)

// BackfillReport counts what Backfill read and delivered.
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
	// Exhausted: Backfill stopped because the next read did not fit.
	Exhausted bool
}

// manifestResult caches one manifest download for a Backfill call.
type manifestResult struct {
	m       *pack.Manifest
	legacy  bool
	bad     bool
	badSeal bool
}

// Backfill reads the namespace's blocks in pointer-key order (pointer, then
// manifest, then payload, each verified) and calls fn with each block's
// range and payload, until every pointer is visited or the next read would
// take BytesRead past budget. fn owns the payload slice. An error from fn,
// a cancelled context or a store error other than not-found, corrupt or
// out-of-range stops it and is returned.
//
// Backfill has no keyring: it delivers blocks of unsealed manifests and
// skips (as Corrupt and SealRejected) blocks of sealed ones, which it
// cannot check. BackfillSealed verifies seals.
func Backfill(ctx context.Context, st cold.Store, ns identity.NamespaceDigest, budget int64,
	fn func(pack.Range, []byte) error) (BackfillReport, error) {
	return BackfillSealed(ctx, st, ns, budget, nil, fn)
}

// BackfillSealed is Backfill with a seal policy (pack.Manifest.VerifySeal):
// with v non-nil (a *seal.Keyring) only blocks of manifests whose kind-1
// seal v verifies are delivered; with v nil it is Backfill. Blocks skipped
// for their seal count in Corrupt and SealRejected.
func BackfillSealed(ctx context.Context, st cold.Store, ns identity.NamespaceDigest, budget int64,
	v pack.SealVerifier, fn func(pack.Range, []byte) error) (BackfillReport, error) {
	return BackfillWith(ctx, st, ns, budget, BackfillOptions{Verifier: v}, fn)
}

// BackfillOptions are BackfillWith's checks and decoders.
type BackfillOptions struct {
	// Verifier is the seal policy (BackfillSealed's v).
	Verifier pack.SealVerifier
	// Crypt opens encrypted packs (pack/doc.go, "Encoded blocks"); nil:
	// their blocks are skipped and counted in KeyUnavailable.
	Crypt pack.Decrypter
	// Codec decompresses zstd blocks; nil: Backfill makes its own.
	Codec pack.Compressor
}

// BackfillWith is BackfillSealed that also delivers the plaintext of
// encrypted (with o.Crypt) and compressed blocks; fn always gets the
// plaintext and its range (Range.Size is its length).
func BackfillWith(ctx context.Context, st cold.Store, ns identity.NamespaceDigest, budget int64,
	o BackfillOptions, fn func(pack.Range, []byte) error) (BackfillReport, error) {
	var rep BackfillReport
	v := o.Verifier
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
	manifests := make(map[string]manifestResult)
	// take reserves n bytes of budget; false means the read must not happen.
	take := func(n int64) bool {
		if n < 0 || n > budget-rep.BytesRead {
			rep.Exhausted = true
			return false
		}
		rep.BytesRead += n
		return true
	}
	// skip classifies a read error: true to go on with the next pointer.
	skip := func(err error) bool {
		switch {
		case errors.Is(err, cold.ErrNotFound):
			rep.Missing++
		case errors.Is(err, cold.ErrCorrupt), errors.Is(err, cold.ErrRange):
			rep.Corrupt++
		default:
			return false
		}
		return true
	}
	for _, oi := range pointers {
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		kns, blk, err := pack.ParsePointerKey(oi.Key)
		if err != nil || kns != ns || oi.Size != int64(pack.PointerLen) {
			rep.Corrupt++ // judged from the listing: nothing downloaded
			continue
		}
		if !take(int64(pack.PointerLen)) {
			return rep, nil
		}
		body, err := readAll(ctx, st, oi.Key, int64(pack.PointerLen))
		if err != nil {
			if skip(err) {
				continue
			}
			return rep, fmt.Errorf("gpucache/cold/lifecycle: backfill pointer %q: %w", oi.Key, err)
		}
		p, err := pack.DecodePointer(body)
		if err != nil || p.Namespace != ns || p.Block != blk {
			rep.Corrupt++
			continue
		}
		mr, ok := manifests[p.ManifestKey]
		if !ok {
			if !take(int64(p.ManifestSize)) {
				return rep, nil
			}
			mb, err := readAll(ctx, st, p.ManifestKey, int64(p.ManifestSize))
			switch {
			case err == nil:
				m, err := pack.OpenManifest(p.ManifestKey, mb)
				switch {
				case errors.Is(err, pack.ErrLegacyManifest):
					mr.legacy = true
				case err != nil:
					mr.bad = true
				case m.VerifySeal(v) != nil:
					mr.bad, mr.badSeal = true, true
				default:
					mr.m = m
				}
			case errors.Is(err, cold.ErrNotFound):
				// Not cached: a later pointer may find it rewritten.
				rep.Missing++
				continue
			case skip(err):
				continue
			default:
				return rep, fmt.Errorf("gpucache/cold/lifecycle: backfill manifest %q: %w", p.ManifestKey, err)
			}
			manifests[p.ManifestKey] = mr
		}
		if mr.legacy {
			rep.Legacy++
			continue
		}
		if mr.bad {
			rep.Corrupt++
			if mr.badSeal {
				rep.SealRejected++
			}
			continue
		}
		rg, found := mr.m.Find(blk)
		if !found || rg.Length > pack.MaxPackSize {
			rep.Corrupt++
			continue
		}
		aead, err := mr.m.Decrypter(o.Crypt)
		if err != nil {
			rep.KeyUnavailable++
			continue
		}
		if !take(int64(rg.Length)) {
			return rep, nil
		}
		payload := make([]byte, rg.Length)
		if err := st.RangeGet(ctx, mr.m.PackKey, int64(rg.Offset), payload); err != nil {
			if skip(err) {
				continue
			}
			return rep, fmt.Errorf("gpucache/cold/lifecycle: backfill pack %q: %w", mr.m.PackKey, err)
		}
		if !mr.m.Plain(rg) {
			plain := make([]byte, rg.Size)
			if err := mr.m.OpenRange(rg, payload, plain, aead, o.Codec); err != nil {
				rep.Corrupt++
				continue
			}
			payload = plain
		} else if pack.Sum(payload) != rg.Sum {
			rep.Corrupt++
			continue
		}
		if err := fn(rg, payload); err != nil {
			return rep, err
		}
		rep.Blocks++
	}
	return rep, nil
}
