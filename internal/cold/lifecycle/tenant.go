package lifecycle

import (
	"context"
	"errors"
	"fmt"

	"github.com/gpucache/gpucache/api/identity"
	"github.com/gpucache/gpucache/internal/cold"
	"github.com/gpucache/gpucache/internal/cold/pack"
)

// ErrIncomplete: Purge stopped with objects of the namespace still stored.
var ErrIncomplete = errors.New("gpucache/cold/lifecycle: purge incomplete")

// KindStats counts objects of one kind and their bytes.
type KindStats struct {
	Count int
	Bytes int64
}

func (k *KindStats) add(oi cold.ObjectInfo) {
	k.Count++
	k.Bytes += oi.Size
}

// Inventory is one namespace's cold objects by kind. Other counts keys under
// the namespace's prefixes that do not parse as that kind's key.
type Inventory struct {
	Namespace                         identity.NamespaceDigest
	Packs, Manifests, Pointers, Other KindStats
}

// Total sums every kind.
func (i Inventory) Total() KindStats {
	t := KindStats{}
	for _, k := range []KindStats{i.Packs, i.Manifests, i.Pointers, i.Other} {
		t.Count += k.Count
		t.Bytes += k.Bytes
	}
	return t
}

// List counts a namespace's objects and bytes per kind from listings alone
// (no object is read).
func List(ctx context.Context, st cold.Store, ns identity.NamespaceDigest) (Inventory, error) {
	inv := Inventory{Namespace: ns}
	pfx := pack.NamespacePrefixes(ns)
	parse := [3]func(string) (identity.NamespaceDigest, error){
		func(k string) (identity.NamespaceDigest, error) { n, _, err := pack.ParsePackKey(k); return n, err },
		func(k string) (identity.NamespaceDigest, error) { n, _, err := pack.ParseManifestKey(k); return n, err },
		func(k string) (identity.NamespaceDigest, error) { n, _, err := pack.ParsePointerKey(k); return n, err },
	}
	dst := [3]*KindStats{&inv.Packs, &inv.Manifests, &inv.Pointers}
	for i, p := range pfx {
		err := st.List(ctx, p, func(oi cold.ObjectInfo) error {
			if n, err := parse[i](oi.Key); err == nil && n == ns {
				dst[i].add(oi)
			} else {
				inv.Other.add(oi)
			}
			return nil
		})
		if err != nil {
			return inv, fmt.Errorf("gpucache/cold/lifecycle: list %q: %w", p, err)
		}
	}
	return inv, nil
}

// PurgeReport counts what Purge deleted.
type PurgeReport struct {
	Namespace                                       identity.NamespaceDigest
	DeletedPointers, DeletedManifests, DeletedPacks int
	// Unverified lists keys whose delete returned nil but which stayed (at
	// most 64); DeleteUnverified counts them.
	DeleteUnverified int
	Unverified       []string
	// Errors counts failed deletes and verifying Heads.
	Errors int
	// Complete: every prefix of the namespace listed empty at the end.
	Complete bool
}

// purgeRounds bounds the list-and-delete rounds of one kind.
const purgeRounds = 3

// Purge removes every object under the namespace's prefixes: pointers, then
// manifests, then packs, each delete verified. It moves to the next kind
// only when a re-list of the current kind is empty, and never retries a key
// it already tried; otherwise it stops and returns an error wrapping
// ErrIncomplete.
func Purge(ctx context.Context, st cold.Store, ns identity.NamespaceDigest) (PurgeReport, error) {
	rep := PurgeReport{Namespace: ns}
	pfx := pack.NamespacePrefixes(ns)
	order := []struct {
		prefix  string
		deleted *int
	}{{pfx[2], &rep.DeletedPointers}, {pfx[1], &rep.DeletedManifests}, {pfx[0], &rep.DeletedPacks}}
	var errs []error
	for _, ph := range order {
		tried := make(map[string]bool)
		empty := false
		for round := 0; round < purgeRounds && !empty; round++ {
			infos, err := listAll(ctx, st, ph.prefix)
			if err != nil {
				return rep, errors.Join(append(errs, err)...)
			}
			progress, failed, err := rep.deleteRound(ctx, st, infos, tried, ph.deleted)
			errs = append(errs, failed...)
			if err != nil {
				return rep, err
			}
			empty = len(infos) == 0
			if !progress && !empty {
				break // only keys already tried remain
			}
		}
		if !empty {
			// One last look: the final round may have emptied it.
			infos, err := listAll(ctx, st, ph.prefix)
			if err != nil {
				return rep, errors.Join(append(errs, err)...)
			}
			if len(infos) > 0 {
				errs = append(errs, fmt.Errorf("%w: %d objects left under %q", ErrIncomplete, len(infos), ph.prefix))
				return rep, errors.Join(errs...)
			}
		}
	}
	rep.Complete = true
	return rep, errors.Join(errs...)
}

// deleteRound deletes the listed objects not yet tried, counting verified
// deletes in *deleted; progress: it tried one. failed holds the delete
// errors; err is only a cancelled context.
func (rep *PurgeReport) deleteRound(ctx context.Context, st cold.Store, infos []cold.ObjectInfo, tried map[string]bool, deleted *int) (progress bool, failed []error, err error) {
	for _, oi := range infos {
		if err := ctx.Err(); err != nil {
			return progress, failed, err
		}
		if tried[oi.Key] {
			continue
		}
		tried[oi.Key] = true
		progress = true
		switch out, err := verifiedDelete(ctx, st, oi.Key); out {
		case delVerified:
			*deleted++
		case delUnverified:
			rep.DeleteUnverified++
			if len(rep.Unverified) < maxUnverified {
				rep.Unverified = append(rep.Unverified, oi.Key)
			}
		default:
			rep.Errors++
			failed = append(failed, err)
		}
	}
	return progress, failed, nil
}
