package admin

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/gpucache/gpucache/api/identity"
	"github.com/gpucache/gpucache/internal/cold"
	"github.com/gpucache/gpucache/internal/cold/lifecycle"
	"github.com/gpucache/gpucache/internal/cold/pack"
)

// Lifecycle runs the cold tier's lifecycle operations (package
// cold/lifecycle) for the admin endpoints: inventory, tenant purge,
// retention and backfill. One operation runs at a time per node; a second
// is refused with ErrBusy rather than queued.
//
// # Finding a tenant's namespaces
//
// The namespace digest covers the tenant, so a tenant's objects are those
// under the digests of its namespaces. Every v3 manifest carries its full
// namespace, and pack.OpenManifest checks that the digest in its key is the
// digest of that namespace, so reading one manifest per digest names the
// tenant soundly (a manifest cannot claim another tenant's digest without
// a SHA-256 preimage). Digests with only legacy or unreadable manifests
// cannot be attributed; the inventory counts them under no tenant and purge
// leaves them (purge by digest is an operator decision).
//
// # Safe to interrupt and rerun
//
// Before deleting anything, PurgeTenant writes a journal object
// (JournalPrefix + hex(tenant) + "/" + digest) for every namespace it will
// purge, and removes each one only when that namespace's purge is complete.
// A purge interrupted after a namespace's manifests are gone (leaving its
// packs, which do not name their tenant) is therefore still found by the
// rerun, which finishes it.
type Lifecycle struct {
	// Store is the cold tier (required).
	Store cold.Store
	// Audit, when set, records each operation's start and outcome.
	Audit func(actor, action string, attrs ...slog.Attr)
	// Deliver, when set, receives the blocks Backfill reads, each checked
	// against its manifest's checksum, with the namespace digest its
	// pointer was found under (the payload is Deliver's). It reports
	// whether it published the block; false with a nil error means the
	// block was already there. An error that wraps ErrBackfillIdentity
	// counts the block as rejected, any other as refused; neither stops
	// the backfill. Without Deliver, Backfill is refused with
	// ErrNoBackfill.
	Deliver func(ctx context.Context, d identity.NamespaceDigest, r pack.Range, payload []byte) (published bool, err error)
	// Drop, when set, is called by PurgeTenant before it deletes anything:
	// it removes the tenant's blocks from DRAM and withdraws them from the
	// write-behind (remembered, batched and queued), so that nothing of the
	// tenant is written to the cold tier after the purge. An error stops
	// the purge before any delete.
	Drop func(ctx context.Context, tenant string) (DropSummary, error)
	// Verifier, when set, makes Backfill deliver only blocks whose manifest
	// seal verifies (lifecycle.BackfillSealed).
	Verifier pack.SealVerifier
	// Crypt, when set, opens encrypted packs (ADR 0019) so Backfill
	// delivers their plaintext; nil: their blocks are skipped and counted
	// as key-unavailable.
	Crypt pack.Decrypter
	// Grace is the reclaim grace period of Expire; zero means
	// lifecycle.DefaultGrace.
	Grace time.Duration

	busy sync.Mutex // held for the duration of one operation
}

// JournalPrefix is where PurgeTenant records the namespaces it is purging.
const JournalPrefix = "lifecycle/purge/"

var (
	// ErrBusy: another lifecycle operation is running on this node.
	ErrBusy = errors.New("gpucache/admin: a lifecycle operation is already running")
	// ErrNoBackfill: the node has no sink for backfilled blocks.
	ErrNoBackfill = errors.New("gpucache/admin: backfill is not available on this node")
	// ErrBackfillIdentity: a backfilled block's identity does not match
	// the namespace and key it was found under (Deliver wraps it).
	ErrBackfillIdentity = errors.New("gpucache/admin: backfilled block fails its identity check")
	// ErrBadTenant: an empty or over-long tenant name.
	ErrBadTenant = errors.New("gpucache/admin: bad tenant name")
)

// maxTenantLen bounds a tenant name in a journal key (hex doubles it).
const maxTenantLen = 256

// Progress is one line of an operation's progress report.
type Progress func(format string, args ...any)

func (l *Lifecycle) audit(actor, action string, attrs ...slog.Attr) {
	if l.Audit != nil {
		l.Audit(actor, action, attrs...)
	}
}

func (l *Lifecycle) acquire() (func(), error) {
	if !l.busy.TryLock() {
		return nil, ErrBusy
	}
	return l.busy.Unlock, nil
}

// nsInfo is what discovery learned about one namespace digest.
type nsInfo struct {
	digest identity.NamespaceDigest
	ns     identity.Namespace
	known  bool // ns was read from a v3 manifest
}

// namespaces lists every namespace digest that has a manifest and names
// its namespace from the first of its manifests that opens.
func (l *Lifecycle) namespaces(ctx context.Context) ([]nsInfo, error) {
	byNS := make(map[identity.NamespaceDigest][]cold.ObjectInfo)
	err := l.Store.List(ctx, "manifests/", func(oi cold.ObjectInfo) error {
		if d, _, err := pack.ParseManifestKey(oi.Key); err == nil {
			byNS[d] = append(byNS[d], oi)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("gpucache/admin: list manifests: %w", err)
	}
	out := make([]nsInfo, 0, len(byNS))
	for d, infos := range byNS {
		info := nsInfo{digest: d}
		for _, oi := range infos {
			if oi.Size <= 0 || oi.Size > pack.MaxManifestLen {
				continue
			}
			body := make([]byte, oi.Size)
			if err := l.Store.RangeGet(ctx, oi.Key, 0, body); err != nil {
				if ctx.Err() != nil {
					return nil, ctx.Err()
				}
				continue
			}
			if m, err := pack.OpenManifest(oi.Key, body); err == nil {
				info.ns, info.known = m.Namespace, true
				break
			}
		}
		out = append(out, info)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].digest.String() < out[j].digest.String() })
	return out, nil
}

// TenantInventory is one namespace's cold objects, attributed to a tenant.
type TenantInventory struct {
	Tenant    string `json:"tenant"` // "" when no manifest names it
	Namespace string `json:"namespace"`
	ModelID   string `json:"model_id,omitempty"`
	Packs     Count  `json:"packs"`
	Manifests Count  `json:"manifests"`
	Pointers  Count  `json:"pointers"`
	Other     Count  `json:"other"`
}

// Count is a number of objects and their bytes.
type Count struct {
	Objects int   `json:"objects"`
	Bytes   int64 `json:"bytes"`
}

func count(k lifecycle.KindStats) Count { return Count{Objects: k.Count, Bytes: k.Bytes} }

// Inventory counts the cold objects of every namespace, or of tenant's
// only when tenant is not "", from listings and one manifest read per
// namespace.
func (l *Lifecycle) Inventory(ctx context.Context, actor, tenant string, progress Progress) ([]TenantInventory, error) {
	release, err := l.acquire()
	if err != nil {
		return nil, err
	}
	defer release()
	l.audit(actor, "inventory", slog.String("tenant", tenant))
	nss, err := l.namespaces(ctx)
	if err != nil {
		return nil, err
	}
	out := []TenantInventory{}
	for _, n := range nss {
		if tenant != "" && (!n.known || n.ns.Tenant != tenant) {
			continue
		}
		inv, err := lifecycle.List(ctx, l.Store, n.digest)
		if err != nil {
			return out, err
		}
		out = append(out, TenantInventory{Tenant: n.ns.Tenant, Namespace: n.digest.String(), ModelID: n.ns.ModelID,
			Packs: count(inv.Packs), Manifests: count(inv.Manifests), Pointers: count(inv.Pointers), Other: count(inv.Other)})
		progress("namespace %s tenant %q: %d objects, %d bytes", n.digest, n.ns.Tenant, inv.Total().Count, inv.Total().Bytes)
	}
	return out, nil
}

// DropSummary is what Lifecycle.Drop removed from the node.
type DropSummary struct {
	DRAMBlocks int `json:"dram_blocks_dropped"`
	// DRAMBusy: blocks left in DRAM because a reader pinned them, a lease
	// held them or they were being written; they are not written behind.
	DRAMBusy   int `json:"dram_blocks_busy"`
	Remembered int `json:"write_behind_forgotten"`
	Batched    int `json:"write_behind_batched_dropped"`
	Packs      int `json:"write_behind_packs_cancelled"`
}

// PurgeSummary is what PurgeTenant did.
type PurgeSummary struct {
	Tenant string `json:"tenant"`
	// Node is what Drop removed from this node (DRAM, write-behind).
	Node       DropSummary `json:"node"`
	Namespaces int         `json:"namespaces"`
	Pointers   int         `json:"pointers_deleted"`
	Manifests  int         `json:"manifests_deleted"`
	Packs      int         `json:"packs_deleted"`
	Complete   bool        `json:"complete"`
}

func journalDir(tenant string) string {
	return JournalPrefix + hex.EncodeToString([]byte(tenant)) + "/"
}

// PurgeTenant deletes every cold object of tenant's namespaces (see the
// type's doc for how they are found and why a rerun finishes an
// interrupted purge). It returns an error when any namespace is left
// incomplete; the journal then still names it.
func (l *Lifecycle) PurgeTenant(ctx context.Context, actor, tenant string, progress Progress) (PurgeSummary, error) {
	sum := PurgeSummary{Tenant: tenant}
	if tenant == "" || len(tenant) > maxTenantLen {
		return sum, fmt.Errorf("%w: %q (1..%d bytes)", ErrBadTenant, tenant, maxTenantLen)
	}
	release, err := l.acquire()
	if err != nil {
		return sum, err
	}
	defer release()
	l.audit(actor, "purge_start", slog.String("tenant", tenant))
	if l.Drop != nil {
		ds, err := l.Drop(ctx, tenant)
		sum.Node = ds
		if err != nil {
			l.audit(actor, "purge_failed", slog.String("tenant", tenant), slog.String("reason", err.Error()))
			return sum, fmt.Errorf("gpucache/admin: drop tenant %q from this node: %w", tenant, err)
		}
		progress("tenant %q: dropped %d DRAM blocks (%d busy), %d remembered, %d batched, %d queued packs from the write-behind",
			tenant, ds.DRAMBlocks, ds.DRAMBusy, ds.Remembered, ds.Batched, ds.Packs)
	}
	todo, err := l.purgeSet(ctx, tenant)
	if err != nil {
		l.audit(actor, "purge_failed", slog.String("tenant", tenant), slog.String("reason", err.Error()))
		return sum, err
	}
	sum.Namespaces = len(todo)
	progress("tenant %q: %d namespaces to purge", tenant, len(todo))
	var errs []error
	for i, d := range todo {
		rep, err := lifecycle.Purge(ctx, l.Store, d)
		sum.Pointers += rep.DeletedPointers
		sum.Manifests += rep.DeletedManifests
		sum.Packs += rep.DeletedPacks
		if err == nil && rep.Complete {
			err = l.Store.Delete(ctx, journalDir(tenant)+d.String())
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("namespace %s: %w", d, err))
			progress("namespace %s (%d/%d): incomplete: %v", d, i+1, len(todo), err)
			if ctx.Err() != nil {
				break
			}
			continue
		}
		progress("namespace %s (%d/%d): deleted %d pointers, %d manifests, %d packs",
			d, i+1, len(todo), rep.DeletedPointers, rep.DeletedManifests, rep.DeletedPacks)
	}
	err = errors.Join(errs...)
	sum.Complete = err == nil
	attrs := []slog.Attr{slog.String("tenant", tenant), slog.Int("namespaces", sum.Namespaces),
		slog.Int("dram_blocks", sum.Node.DRAMBlocks), slog.Int("write_behind_packs", sum.Node.Packs),
		slog.Int("pointers", sum.Pointers), slog.Int("manifests", sum.Manifests), slog.Int("packs", sum.Packs)}
	if err != nil {
		l.audit(actor, "purge_incomplete", append(attrs, slog.String("reason", err.Error()))...)
	} else {
		l.audit(actor, "purge_done", attrs...)
	}
	return sum, err
}

// purgeSet returns the tenant's namespaces: those a manifest names and
// those an earlier run journalled, after journalling every new one.
func (l *Lifecycle) purgeSet(ctx context.Context, tenant string) ([]identity.NamespaceDigest, error) {
	dir := journalDir(tenant)
	set := make(map[identity.NamespaceDigest]bool)
	err := l.Store.List(ctx, dir, func(oi cold.ObjectInfo) error {
		var d identity.NamespaceDigest
		s := strings.TrimPrefix(oi.Key, dir)
		if len(s) == hex.EncodedLen(len(d)) {
			if _, err := hex.Decode(d[:], []byte(s)); err == nil {
				set[d] = true
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("gpucache/admin: list purge journal: %w", err)
	}
	nss, err := l.namespaces(ctx)
	if err != nil {
		return nil, err
	}
	for _, n := range nss {
		if n.known && n.ns.Tenant == tenant && !set[n.digest] {
			if err := l.Store.Put(ctx, dir+n.digest.String(), []byte(tenant), cold.PutOptions{}); err != nil {
				return nil, fmt.Errorf("gpucache/admin: journal namespace %s: %w", n.digest, err)
			}
			set[n.digest] = true
		}
	}
	out := make([]identity.NamespaceDigest, 0, len(set))
	for d := range set {
		out = append(out, d)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out, nil
}

// ExpireSummary is what Expire did.
type ExpireSummary struct {
	Namespaces int `json:"namespaces"`
	Pointers   int `json:"pointers_expired"`
	Manifests  int `json:"manifests_reclaimed"`
	Packs      int `json:"packs_reclaimed"`
	Errors     int `json:"errors"`
}

// Expire applies retention: in every namespace (or tenant's only), it
// deletes pointers last written before olderThan and reclaims what they
// no longer reference (lifecycle.Expire). Rerunning it is harmless.
func (l *Lifecycle) Expire(ctx context.Context, actor, tenant string, olderThan time.Time, progress Progress) (ExpireSummary, error) {
	var sum ExpireSummary
	release, err := l.acquire()
	if err != nil {
		return sum, err
	}
	defer release()
	l.audit(actor, "expire_start", slog.String("tenant", tenant), slog.Time("older_than", olderThan))
	nss, err := l.namespaces(ctx)
	if err != nil {
		return sum, err
	}
	var errs []error
	for _, n := range nss {
		if tenant != "" && (!n.known || n.ns.Tenant != tenant) {
			continue
		}
		sum.Namespaces++
		rep, err := lifecycle.Expire(ctx, l.Store, n.digest, olderThan, lifecycle.Options{Grace: l.Grace})
		sum.Pointers += rep.PointersExpired
		sum.Manifests += rep.Reclaim.DeletedManifests
		sum.Packs += rep.Reclaim.DeletedPacks
		sum.Errors += rep.Errors + rep.Reclaim.Errors
		if err != nil {
			errs = append(errs, fmt.Errorf("namespace %s: %w", n.digest, err))
			if ctx.Err() != nil {
				break
			}
		}
		progress("namespace %s: expired %d pointers, reclaimed %d manifests, %d packs",
			n.digest, rep.PointersExpired, rep.Reclaim.DeletedManifests, rep.Reclaim.DeletedPacks)
	}
	err = errors.Join(errs...)
	l.audit(actor, "expire_done", slog.String("tenant", tenant), slog.Int("pointers", sum.Pointers),
		slog.Int("manifests", sum.Manifests), slog.Int("packs", sum.Packs), slog.Bool("ok", err == nil))
	return sum, err
}

// BackfillSummary is what Backfill delivered.
type BackfillSummary struct {
	Namespaces int   `json:"namespaces"`
	Blocks     int   `json:"blocks"` // published by Deliver
	Present    int   `json:"present"`
	BytesRead  int64 `json:"bytes_read"`
	// Skipped: blocks not delivered because a pointer, manifest or
	// payload failed its checks (checksum and seal included), was a
	// legacy manifest's, or was gone.
	Skipped int `json:"skipped"`
	// Rejected: blocks Deliver refused for their identity (never
	// published).
	Rejected int `json:"rejected"`
	// Refused: blocks Deliver could not publish (the tenant's DRAM
	// quota, the hot tier full, a fill in progress).
	Refused   int  `json:"refused"`
	Exhausted bool `json:"budget_exhausted"`
}

// Backfill reads tenant's cold blocks (every tenant's when "") into
// Deliver, reading at most budget bytes from the store in all. Namespaces
// no manifest names are skipped (a block's tenant must be known to charge
// it). Delivering a block twice is harmless (the hot tier keeps the first
// copy), so a rerun is safe.
func (l *Lifecycle) Backfill(ctx context.Context, actor, tenant string, budget int64, progress Progress) (BackfillSummary, error) {
	var sum BackfillSummary
	if l.Deliver == nil {
		return sum, ErrNoBackfill
	}
	release, err := l.acquire()
	if err != nil {
		return sum, err
	}
	defer release()
	l.audit(actor, "backfill_start", slog.String("tenant", tenant), slog.Int64("budget", budget))
	nss, err := l.namespaces(ctx)
	if err != nil {
		return sum, err
	}
	left := budget
	for _, n := range nss {
		if !n.known || (tenant != "" && n.ns.Tenant != tenant) {
			continue
		}
		if left <= 0 {
			sum.Exhausted = true
			break
		}
		sum.Namespaces++
		var blocks, present int
		rep, err := lifecycle.BackfillWith(ctx, l.Store, n.digest, left, lifecycle.BackfillOptions{Verifier: l.Verifier, Crypt: l.Crypt}, func(r pack.Range, p []byte) error {
			published, err := l.Deliver(ctx, n.digest, r, p)
			switch {
			case ctx.Err() != nil:
				return ctx.Err()
			case errors.Is(err, ErrBackfillIdentity):
				sum.Rejected++
			case err != nil:
				sum.Refused++
			case published:
				blocks++
			default:
				present++
			}
			return nil
		})
		left -= rep.BytesRead
		sum.BytesRead += rep.BytesRead
		sum.Blocks += blocks
		sum.Present += present
		sum.Skipped += rep.Legacy + rep.Corrupt + rep.Missing
		sum.Exhausted = sum.Exhausted || rep.Exhausted
		progress("namespace %s: %d blocks published, %d already cached, %d bytes read", n.digest, blocks, present, rep.BytesRead)
		if err != nil {
			l.audit(actor, "backfill_failed", slog.String("tenant", tenant), slog.String("reason", err.Error()))
			return sum, fmt.Errorf("namespace %s: %w", n.digest, err)
		}
	}
	l.audit(actor, "backfill_done", slog.String("tenant", tenant), slog.Int("blocks", sum.Blocks),
		slog.Int("present", sum.Present), slog.Int("skipped", sum.Skipped), slog.Int("rejected", sum.Rejected),
		slog.Int("refused", sum.Refused), slog.Int64("bytes_read", sum.BytesRead))
	return sum, nil
}
