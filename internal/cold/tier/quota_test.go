package tier

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/gpucache/gpucache/api/identity"
	"github.com/gpucache/gpucache/internal/cold"
	"github.com/gpucache/gpucache/internal/cold/pack"
	"github.com/gpucache/gpucache/internal/testfix"
)

// quotaBlock is one block written behind by writeBehind.
type quotaBlock struct {
	ns  identity.Namespace
	d   identity.NamespaceDigest
	key identity.BlockKey
}

// quotaWrite stores n blocks of tenant's namespace, one pack each (the
// tier has PackBlocks 1): remembered, evicted from DRAM, flushed.
func quotaWrite(t *testing.T, tr *Tier, tenant string, first, n int) []quotaBlock {
	t.Helper()
	ns := testfix.TinyNamespace(tenant)
	d, _ := ns.Digest()
	var out []quotaBlock
	for i := first; i < first+n; i++ {
		tokens := make([]uint32, 16)
		for j := range tokens {
			tokens[j] = uint32(i*16 + j)
		}
		ids, err := identity.Identities(ns, tokens)
		if err != nil {
			t.Fatal(err)
		}
		id := ids[0]
		key, _ := id.Key()
		tr.Remember(id)
		tr.Evicted(d, key, id.Parent, 0, payloadOf(key, 4<<10))
		if rep := tr.Flush(context.Background(), true); rep.Err != nil {
			t.Fatal(rep.Err)
		}
		out = append(out, quotaBlock{ns: ns, d: d, key: key})
	}
	return out
}

// refills counts the blocks that refill byte-identical.
func refills(t *testing.T, tr *Tier, blocks []quotaBlock) int {
	t.Helper()
	n := 0
	for _, b := range blocks {
		dst := make([]byte, 4<<10)
		got, res, _ := tr.Refill(context.Background(), b.ns, b.key, dst)
		if res.Hit && got == len(dst) && bytes.Equal(dst, payloadOf(b.key, 4<<10)) {
			n++
		}
	}
	return n
}

// objectsOf counts a namespace's stored objects.
func objectsOf(t *testing.T, st cold.Store, d identity.NamespaceDigest) int {
	t.Helper()
	n := 0
	for _, p := range pack.NamespacePrefixes(d) {
		if err := st.List(context.Background(), p, func(cold.ObjectInfo) error { n++; return nil }); err != nil {
			t.Fatal(err)
		}
	}
	return n
}

// quotaRun is the paired scenario: b writes 3 packs, a writes 3, then (with
// quota set) a's cold quota becomes 2.5 packs and a writes 3 more.
type quotaRun struct {
	aRefills, bRefills int // blocks that still refill
	aObjects, bObjects int // stored objects per namespace
	a, b               ColdTenant
}

func runColdQuota(t *testing.T, st cold.Store, quota bool) quotaRun {
	t.Helper()
	tr := newTier(t, st, func(c *Config) { c.PackBlocks = 1; c.ReclaimInterval = -1 })
	bBlocks := quotaWrite(t, tr, "b", 0, 3)
	aBlocks := quotaWrite(t, tr, "a", 100, 3)
	group := tr.TenantColdUsage("a").Bytes / 3
	if group <= 0 {
		t.Fatalf("tenant a's cold bytes %d after 3 packs", group*3)
	}
	if quota {
		if err := tr.SetColdQuotas(map[string]int64{"a": 2*group + group/2}); err != nil {
			t.Fatal(err)
		}
	}
	aBlocks = append(aBlocks, quotaWrite(t, tr, "a", 200, 3)...)
	return quotaRun{
		aRefills: refills(t, tr, aBlocks), bRefills: refills(t, tr, bBlocks),
		aObjects: objectsOf(t, st, aBlocks[0].d), bObjects: objectsOf(t, st, bBlocks[0].d),
		a: tr.TenantColdUsage("a"), b: tr.TenantColdUsage("b"),
	}
}

// TestTenantAtColdQuotaEvictsOnlyItsOwnOldestPacks is the paired test: the
// same writes without and with tenant a's cold quota. Without it nothing is
// deleted; with it a's own oldest packs go (a stays under its quota, its 2
// newest blocks refill) and every one of b's objects and blocks is intact.
func TestTenantAtColdQuotaEvictsOnlyItsOwnOldestPacks(t *testing.T) {
	without := runColdQuota(t, cold.NewMem(), false)
	if without.aRefills != 6 || without.bRefills != 3 || without.aObjects != 6*3 || without.bObjects != 3*3 {
		t.Fatalf("without a quota: %+v, want all 6 of a's and 3 of b's blocks, 3 objects each", without)
	}
	if without.a.Evictions != 0 || without.a.Dropped != 0 {
		t.Fatalf("without a quota a evicted or dropped: %+v", without.a)
	}

	with := runColdQuota(t, cold.NewMem(), true)
	if with.bRefills != 3 || with.bObjects != 3*3 || with.b.Bytes != without.b.Bytes || with.b.Evictions != 0 {
		t.Fatalf("with a's quota, b lost something: %+v (without: %+v)", with, without)
	}
	if with.a.Bytes > with.a.Quota {
		t.Fatalf("a holds %d cold bytes, quota %d", with.a.Bytes, with.a.Quota)
	}
	if with.aRefills != 2 || with.aObjects != 2*3 || with.a.Evictions != 4 || with.a.Dropped != 0 {
		t.Fatalf("with a's quota: a refills %d blocks, %d objects, usage %+v; want its 2 newest, 6 objects, 4 evictions",
			with.aRefills, with.aObjects, with.a)
	}
}

// TestColdQuotaDropsWhatItCannotMakeRoomFor: a pack larger than the quota
// itself is not written and nothing of the tenant's is evicted for it.
func TestColdQuotaDropsWhatItCannotMakeRoomFor(t *testing.T) {
	st := cold.NewMem()
	tr := newTier(t, st, func(c *Config) { c.PackBlocks = 1; c.ReclaimInterval = -1 })
	blocks := quotaWrite(t, tr, "a", 0, 2)
	if err := tr.SetColdQuotas(map[string]int64{"a": 1 << 10}); err != nil {
		t.Fatal(err)
	}
	quotaWrite(t, tr, "a", 10, 1)
	u := tr.TenantColdUsage("a")
	if u.Dropped != 1 || u.Evictions != 0 || refills(t, tr, blocks) != 2 {
		t.Fatalf("usage %+v, refills %d: want the new block dropped and both old ones kept", u, refills(t, tr, blocks))
	}
	if err := tr.SetColdQuotas(map[string]int64{"a": -1}); err == nil {
		t.Fatal("a negative quota was accepted")
	}
}

// TestColdUsageIsFoundAtStart: a new tier over a store another tier wrote
// counts each tenant's bytes from the listing, the same as the writer did,
// and evicts the found packs for a quota.
func TestColdUsageIsFoundAtStart(t *testing.T) {
	st := cold.NewMem()
	w := newTier(t, st, func(c *Config) { c.PackBlocks = 1; c.ReclaimInterval = -1 })
	quotaWrite(t, w, "a", 0, 3)
	quotaWrite(t, w, "b", 10, 2)
	wantA, wantB := w.TenantColdUsage("a").Bytes, w.TenantColdUsage("b").Bytes

	r := newTier(t, st, func(c *Config) { c.PackBlocks = 1; c.ReclaimInterval = -1 })
	if err := r.LoadColdUsage(context.Background()); err != nil {
		t.Fatal(err)
	}
	if a, b := r.TenantColdUsage("a").Bytes, r.TenantColdUsage("b").Bytes; a != wantA || b != wantB {
		t.Fatalf("found a=%d b=%d, writer counted a=%d b=%d", a, b, wantA, wantB)
	}
	if u := r.ColdUsage(); !u.Ready || u.Groups != 5 {
		t.Fatalf("ledger %+v, want ready with 5 packs", u)
	}
	// Listing again (or a publish of a known pack) counts nothing twice.
	if err := r.LoadColdUsage(context.Background()); err != nil {
		t.Fatal(err)
	}
	if a := r.TenantColdUsage("a").Bytes; a != wantA {
		t.Fatalf("a second listing changed a's bytes to %d, want %d", a, wantA)
	}
	if err := r.SetColdQuotas(map[string]int64{"a": wantA}); err != nil {
		t.Fatal(err)
	}
	quotaWrite(t, r, "a", 20, 1)
	if u := r.TenantColdUsage("a"); u.Evictions != 1 || u.Bytes > wantA {
		t.Fatalf("a after one more pack at quota: %+v", u)
	}
	if b := r.TenantColdUsage("b"); b.Bytes != wantB {
		t.Fatalf("b's bytes changed: %+v", b)
	}
}

// TestReclaimDeletesAreSubtracted: deletes made through the ledger's store
// (reclaim's) take the group's bytes off its tenant.
func TestReclaimDeletesAreSubtracted(t *testing.T) {
	st := cold.NewMem()
	tr := newTier(t, st, func(c *Config) { c.PackBlocks = 1; c.ReclaimInterval = -1 })
	quotaWrite(t, tr, "a", 0, 1)
	ls := ledgerStore{Store: st, l: tr.ledger}
	var keys []string
	d, _ := testfix.TinyNamespace("a").Digest()
	for _, p := range pack.NamespacePrefixes(d) {
		if err := st.List(context.Background(), p, func(oi cold.ObjectInfo) error { keys = append(keys, oi.Key); return nil }); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range keys {
		if err := ls.Delete(context.Background(), k); err != nil && !errors.Is(err, cold.ErrNotFound) {
			t.Fatal(err)
		}
	}
	if u := tr.TenantColdUsage("a"); u.Bytes != 0 {
		t.Fatalf("a holds %d bytes after its pack, manifest and pointer were deleted", u.Bytes)
	}
}

// TestReclaimForgetsWhatAnotherNodeDeleted: packs and manifests deleted
// behind the node's back (another node's reclaim of a shared bucket) leave
// the ledger at the node's next reclaim pass, so its records do not pile up
// until the ledger's bound; what is still stored stays counted.
func TestReclaimForgetsWhatAnotherNodeDeleted(t *testing.T) {
	st := cold.NewMem()
	tr := newTier(t, st, func(c *Config) { c.PackBlocks = 1; c.ReclaimInterval = -1 })
	quotaWrite(t, tr, "a", 0, 2)
	quotaWrite(t, tr, "b", 100, 1)
	before, bBytes := tr.ColdUsage().Groups, tr.TenantColdUsage("b").Bytes
	if before != 3 || bBytes <= 0 {
		t.Fatalf("tracked %d groups, b %d bytes; want 3 and some", before, bBytes)
	}
	d, _ := testfix.TinyNamespace("a").Digest()
	pfx := pack.NamespacePrefixes(d)
	var gone []string
	for _, p := range pfx[:2] { // a's packs and manifests, not its pointers
		if err := st.List(context.Background(), p, func(oi cold.ObjectInfo) error { gone = append(gone, oi.Key); return nil }); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range gone {
		if err := st.Delete(context.Background(), k); err != nil { // behind the ledger's back
			t.Fatal(err)
		}
	}
	if len(gone) != 4 || tr.ColdUsage().Groups != 3 {
		t.Fatalf("deleted %d objects; ledger still tracks %d groups before the pass", len(gone), tr.ColdUsage().Groups)
	}
	tr.Reclaim(context.Background())
	if u := tr.ColdUsage(); u.Groups != 1 {
		t.Fatalf("after reclaim the ledger tracks %d groups, want 1 (b's)", u.Groups)
	}
	if a := tr.TenantColdUsage("a"); a.Bytes != 0 {
		t.Fatalf("a still counts %d bytes after its packs and manifests went", a.Bytes)
	}
	if b := tr.TenantColdUsage("b"); b.Bytes != bBytes {
		t.Fatalf("b counts %d bytes, want %d (nothing of b was deleted)", b.Bytes, bBytes)
	}
	if len(tr.ledger.byPack) != 1 {
		t.Fatalf("%d packs still tracked, want 1", len(tr.ledger.byPack))
	}
}
