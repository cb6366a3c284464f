package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gpucache/gpucache/api/identity"
	"github.com/gpucache/gpucache/internal/cold"
	"github.com/gpucache/gpucache/internal/cold/pack"
)

// Report counts what one Reclaim pass saw and did.
type Report struct {
	// Scanned is the number of objects listed: packs, manifests, pointers.
	Scanned int
	// Deleted is the number of verified deletes (DeletedManifests +
	// DeletedPacks).
	Deleted, DeletedManifests, DeletedPacks int
	// KeptReferenced: manifests named by a pointer, packs named by a
	// manifest (also when the re-check before the delete found one).
	KeptReferenced int
	// KeptYoung: unreferenced objects within the grace period.
	KeptYoung int
	// KeptPinned: unreferenced objects kept because a referencing object
	// could not be read or decoded (see doc.go).
	KeptPinned int
	// Legacy: v1/v2 manifests found and left alone.
	Legacy int
	// Undecodable: manifests and pointers that failed to decode, left alone.
	Undecodable int
	// DeleteUnverified: deletes that returned nil while the object stayed.
	// Unverified lists their keys (at most 64).
	DeleteUnverified int
	Unverified       []string
	// Errors counts failed reads, Heads and deletes; FirstError is the first.
	Errors     int
	FirstError error
}

func (r *Report) fail(err error) {
	r.Errors++
	if r.FirstError == nil {
		r.FirstError = err
	}
}

func (r *Report) unverified(key string) {
	r.DeleteUnverified++
	if len(r.Unverified) < maxUnverified {
		r.Unverified = append(r.Unverified, key)
	}
}

// ptrEntry caches one decoded pointer by the listing that produced it.
type ptrEntry struct {
	modified time.Time
	size     int64
	manifest string
}

type mfState int

const (
	mfV3 mfState = iota
	mfLegacy
)

// mfEntry caches one manifest's decode. Manifest keys name their content,
// so a decoded entry stays valid; undecodable manifests are not cached.
type mfEntry struct {
	state mfState
	pack  string
}

type reclaimer struct {
	st   cold.Store
	ns   identity.NamespaceDigest
	opts Options
	ptrs map[string]ptrEntry
	mfs  map[string]mfEntry
}

// Reclaim deletes unreferenced manifests, then unreferenced packs, of one
// namespace, each only when older than the grace period, each re-checked
// right before and verified right after its delete. See doc.go. It returns
// an error, having deleted nothing, if a listing fails or opts are invalid;
// per-object failures are counted in the Report. A cancelled ctx stops the
// pass and is returned.
func Reclaim(ctx context.Context, st cold.Store, ns identity.NamespaceDigest, opts Options) (Report, error) {
	var rep Report
	opts, err := opts.norm()
	if err != nil {
		return rep, err
	}
	r := &reclaimer{st: st, ns: ns, opts: opts, ptrs: map[string]ptrEntry{}, mfs: map[string]mfEntry{}}
	err = r.run(ctx, &rep)
	return rep, err
}

func (r *reclaimer) run(ctx context.Context, rep *Report) error {
	pfx := pack.NamespacePrefixes(r.ns)
	packs, err := listAll(ctx, r.st, pfx[0])
	if err != nil {
		return err
	}
	manifests, err := listAll(ctx, r.st, pfx[1])
	if err != nil {
		return err
	}
	pointers, err := listAll(ctx, r.st, pfx[2])
	if err != nil {
		return err
	}
	rep.Scanned = len(packs) + len(manifests) + len(pointers)

	ptrRefs, ptrPinned, err := r.pointerRefs(ctx, pointers, rep, true)
	if err != nil {
		return err
	}
	if _, _, err := r.manifestRefs(ctx, manifests, rep, true); err != nil {
		return err
	}
	if err := r.reclaimManifests(ctx, manifests, ptrRefs, ptrPinned, rep); err != nil {
		return err
	}
	if done, err := r.reclaimPacks(ctx, packs, rep); !done || err != nil {
		return err
	}
	rep.Deleted = rep.DeletedManifests + rep.DeletedPacks
	return nil
}

// kept counts and reports an object kept: referenced, pinned (some
// reference could not be read), or, with young, inside the grace period.
func kept(rep *Report, referenced, pinned, young bool) bool {
	switch {
	case referenced:
		rep.KeptReferenced++
	case pinned:
		rep.KeptPinned++
	case young:
		rep.KeptYoung++
	default:
		return false
	}
	return true
}

// reclaimManifests deletes the decoded v3 manifests no pointer names
// (refs, pinned: from the first listing), re-checking the pointers right
// before each delete.
func (r *reclaimer) reclaimManifests(ctx context.Context, manifests []cold.ObjectInfo, refs map[string]bool, pinned bool, rep *Report) error {
	pfx := pack.NamespacePrefixes(r.ns)
	for _, oi := range manifests {
		if err := ctx.Err(); err != nil {
			return err
		}
		e, ok := r.mfs[oi.Key]
		if !ok || e.state != mfV3 {
			continue // legacy or undecodable: left alone, counted already
		}
		if kept(rep, refs[oi.Key], pinned, r.opts.young(oi.Modified)) {
			continue
		}
		// Re-check references right before the delete.
		fresh, err := listAll(ctx, r.st, pfx[2])
		if err != nil {
			rep.fail(err)
			continue
		}
		now, nowPinned, err := r.pointerRefs(ctx, fresh, rep, false)
		if err != nil {
			return err
		}
		if kept(rep, now[oi.Key], nowPinned, false) {
			continue
		}
		if r.deleteIfOld(ctx, oi.Key, rep) {
			rep.DeletedManifests++
		}
	}
	return nil
}

// reclaimPacks deletes the packs of this namespace that no remaining
// manifest names, re-checking the manifests right before each delete.
// done is false when the manifests could not be listed: no pack is
// deleted then.
func (r *reclaimer) reclaimPacks(ctx context.Context, packs []cold.ObjectInfo, rep *Report) (done bool, err error) {
	pfx := pack.NamespacePrefixes(r.ns)
	fresh, err := listAll(ctx, r.st, pfx[1])
	if err != nil {
		rep.fail(err)
		return false, nil // cannot know the references: delete no pack
	}
	refs, pinned, err := r.manifestRefs(ctx, fresh, rep, false)
	if err != nil {
		return false, err
	}
	for _, oi := range packs {
		if err := ctx.Err(); err != nil {
			return false, err
		}
		if kns, _, err := pack.ParsePackKey(oi.Key); err != nil || kns != r.ns {
			continue // not a pack key of this namespace: not ours to delete
		}
		if kept(rep, refs[oi.Key], pinned, r.opts.young(oi.Modified)) {
			continue
		}
		fresh, err := listAll(ctx, r.st, pfx[1])
		if err != nil {
			rep.fail(err)
			continue
		}
		now, nowPinned, err := r.manifestRefs(ctx, fresh, rep, false)
		if err != nil {
			return false, err
		}
		if kept(rep, now[oi.Key], nowPinned, false) {
			continue
		}
		if r.deleteIfOld(ctx, oi.Key, rep) {
			rep.DeletedPacks++
		}
	}
	return true, nil
}

// deleteIfOld Heads key (it must exist and still be past the grace period),
// deletes it and verifies the delete. It reports a verified delete.
func (r *reclaimer) deleteIfOld(ctx context.Context, key string, rep *Report) bool {
	oi, err := r.st.Head(ctx, key)
	switch {
	case errors.Is(err, cold.ErrNotFound):
		return false // gone already
	case err != nil:
		rep.fail(fmt.Errorf("head %q: %w", key, err))
		return false
	case r.opts.young(oi.Modified):
		rep.KeptYoung++ // rewritten since the listing
		return false
	}
	switch out, err := verifiedDelete(ctx, r.st, key); out {
	case delVerified:
		return true
	case delUnverified:
		rep.unverified(key)
	default:
		rep.fail(err)
	}
	return false
}

// pointerRefs reads the listed pointers (reusing cached decodes whose
// listing is unchanged and old) and returns the manifest keys they name.
// pinned is true if any pointer could not be read or decoded: it might name
// any manifest. err is only a cancelled context.
func (r *reclaimer) pointerRefs(ctx context.Context, infos []cold.ObjectInfo, rep *Report, count bool) (map[string]bool, bool, error) {
	refs := make(map[string]bool)
	pinned := false
	for _, oi := range infos {
		if err := ctx.Err(); err != nil {
			return nil, false, err
		}
		if e, ok := r.ptrs[oi.Key]; ok && e.modified.Equal(oi.Modified) && e.size == oi.Size && !r.opts.young(oi.Modified) {
			refs[e.manifest] = true
			continue
		}
		delete(r.ptrs, oi.Key)
		manifest, ok, pin := r.readPointer(ctx, oi, rep, count)
		pinned = pinned || pin
		if ok {
			refs[manifest] = true
		}
	}
	return refs, pinned, nil
}

// readPointer reads and decodes pointer oi and caches it; it returns the
// manifest key it names (ok) or pin, when it could not be read or decoded
// (neither: deleted since the listing).
func (r *reclaimer) readPointer(ctx context.Context, oi cold.ObjectInfo, rep *Report, count bool) (manifest string, ok, pin bool) {
	if oi.Size != int64(pack.PointerLen) {
		if count {
			rep.Undecodable++
		}
		return "", false, true
	}
	body, err := readAll(ctx, r.st, oi.Key, oi.Size)
	if errors.Is(err, cold.ErrNotFound) {
		return "", false, false // deleted since the listing
	}
	if err != nil {
		rep.fail(fmt.Errorf("read pointer %q: %w", oi.Key, err))
		return "", false, true
	}
	p, err := pack.DecodePointer(body)
	if err == nil {
		kns, blk, kerr := pack.ParsePointerKey(oi.Key)
		if kerr != nil || kns != r.ns || p.Namespace != r.ns || p.Block != blk {
			err = fmt.Errorf("%w: pointer %q does not match its key", cold.ErrCorrupt, oi.Key)
		}
	}
	if err != nil {
		if count {
			rep.Undecodable++
		}
		return "", false, true
	}
	r.ptrs[oi.Key] = ptrEntry{modified: oi.Modified, size: oi.Size, manifest: p.ManifestKey}
	return p.ManifestKey, true, false
}

// manifestRefs decodes the listed manifests (cached by key) and returns the
// pack keys that v3 manifests name. pinned is true if any manifest is legacy,
// undecodable or unreadable. err is only a cancelled context.
func (r *reclaimer) manifestRefs(ctx context.Context, infos []cold.ObjectInfo, rep *Report, count bool) (map[string]bool, bool, error) {
	refs := make(map[string]bool)
	pinned := false
	for _, oi := range infos {
		if err := ctx.Err(); err != nil {
			return nil, false, err
		}
		e, ok := r.mfs[oi.Key]
		if !ok {
			var state mfState
			state, e.pack, ok = r.decodeManifest(ctx, oi, rep, count)
			e.state = state
			if ok {
				r.mfs[oi.Key] = e
			}
		} else if count && e.state == mfLegacy {
			rep.Legacy++
		}
		if !ok || e.state != mfV3 {
			pinned = true
			continue
		}
		refs[e.pack] = true
	}
	return refs, pinned, nil
}

// decodeManifest reads and opens one manifest. ok is false when it could not
// be read or decoded (it is then not cached and pins the packs).
func (r *reclaimer) decodeManifest(ctx context.Context, oi cold.ObjectInfo, rep *Report, count bool) (mfState, string, bool) {
	if oi.Size <= 0 || oi.Size > pack.MaxManifestLen {
		if count {
			rep.Undecodable++
		}
		return 0, "", false
	}
	body, err := readAll(ctx, r.st, oi.Key, oi.Size)
	if err != nil {
		if !errors.Is(err, cold.ErrNotFound) {
			rep.fail(fmt.Errorf("read manifest %q: %w", oi.Key, err))
		}
		// A manifest deleted since the listing pins nothing, but its
		// absence cannot be told from a race with a rewrite: stay safe.
		return 0, "", false
	}
	m, err := pack.OpenManifest(oi.Key, body)
	switch {
	case errors.Is(err, pack.ErrLegacyManifest):
		if count {
			rep.Legacy++
		}
		return mfLegacy, "", true
	case err != nil:
		if count {
			rep.Undecodable++
		}
		return 0, "", false
	}
	return mfV3, m.PackKey, true
}

// ExpireReport counts what Expire did.
type ExpireReport struct {
	// PointersScanned: pointers listed. PointersExpired: verified deletes.
	// PointersKept: pointers at or after the cutoff (also when a Head before
	// the delete showed a rewrite).
	PointersScanned, PointersExpired, PointersKept int
	// PointersUnverified and Unverified: deletes that left the object.
	PointersUnverified int
	Unverified         []string
	// Errors and FirstError: failed Heads and deletes.
	Errors     int
	FirstError error
	// Reclaim is the pass run after the pointers went.
	Reclaim Report
}

// Expire deletes the namespace's pointers last modified before olderThan,
// so their blocks become misses, then runs Reclaim for the manifests and
// packs no longer referenced (still subject to opts.Grace).
func Expire(ctx context.Context, st cold.Store, ns identity.NamespaceDigest, olderThan time.Time, opts Options) (ExpireReport, error) {
	var rep ExpireReport
	opts, err := opts.norm()
	if err != nil {
		return rep, err
	}
	pointers, err := listAll(ctx, st, pack.NamespacePrefixes(ns)[2])
	if err != nil {
		return rep, err
	}
	rep.PointersScanned = len(pointers)
	fail := func(err error) {
		rep.Errors++
		if rep.FirstError == nil {
			rep.FirstError = err
		}
	}
	for _, oi := range pointers {
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		if !oi.Modified.Before(olderThan) {
			rep.PointersKept++
			continue
		}
		cur, err := st.Head(ctx, oi.Key)
		switch {
		case errors.Is(err, cold.ErrNotFound):
			continue
		case err != nil:
			fail(fmt.Errorf("head %q: %w", oi.Key, err))
			continue
		case !cur.Modified.Before(olderThan):
			rep.PointersKept++
			continue
		}
		switch out, err := verifiedDelete(ctx, st, oi.Key); out {
		case delVerified:
			rep.PointersExpired++
		case delUnverified:
			rep.PointersUnverified++
			if len(rep.Unverified) < maxUnverified {
				rep.Unverified = append(rep.Unverified, oi.Key)
			}
		default:
			fail(err)
		}
	}
	rep.Reclaim, err = Reclaim(ctx, st, ns, opts)
	return rep, err
}
