package lifecycle

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/gpucache/gpucache/api/identity"
	"github.com/gpucache/gpucache/internal/cold"
	"github.com/gpucache/gpucache/internal/cold/pack"
)

var ctx = context.Background()

func TestReclaimNeverDeletesReferencedPack(t *testing.T) {
	st := newFake()
	ns := testNamespace("acme")
	nsd := digest(t, ns)
	a := buildPack(t, ns, 3, 100, 64)
	st.publish(t, a)
	// D: pack and manifest written, pointers not yet (publication in flight).
	d := buildPack(t, ns, 2, 900, 64)
	st.setNow(t0.Add(47*time.Hour + 30*time.Minute))
	st.put(t, d.Object.Key, d.Object.Body)
	st.put(t, d.Manifest.Key, d.Manifest.Body)
	st.setNow(t0.Add(48 * time.Hour))

	rep, err := Reclaim(ctx, st, nsd, st.opts())
	if err != nil {
		t.Fatal(err)
	}
	if rep.Deleted != 0 || len(st.deletes) != 0 {
		t.Fatalf("deleted %d (%v), want none", rep.Deleted, st.deletes)
	}
	// A's manifest (pointers), A's pack and D's pack (visible manifests).
	if rep.KeptReferenced != 3 || rep.KeptYoung != 1 {
		t.Fatalf("report %+v, want 3 referenced, 1 young", rep)
	}
	if rep.Scanned != 2+2+3 {
		t.Fatalf("scanned %d, want 7", rep.Scanned)
	}
	for _, k := range []string{a.Object.Key, a.Manifest.Key, d.Object.Key, d.Manifest.Key} {
		if !st.has(k) {
			t.Fatalf("%s was deleted", k)
		}
	}
}

func TestReclaimDeletesUnreferencedAfterGrace(t *testing.T) {
	st := newFake()
	ns := testNamespace("acme")
	nsd := digest(t, ns)
	a := buildPack(t, ns, 3, 100, 64)
	b := buildPack(t, ns, 2, 200, 64)
	e := buildPack(t, ns, 1, 300, 64)
	f := buildPack(t, ns, 1, 400, 64)
	st.publish(t, a)
	st.put(t, b.Object.Key, b.Object.Body) // B: pointers gone
	st.put(t, b.Manifest.Key, b.Manifest.Body)
	st.put(t, e.Object.Key, e.Object.Body) // E: orphan pack
	st.setNow(t0.Add(48*time.Hour - 10*time.Minute))
	st.put(t, f.Object.Key, f.Object.Body) // F: young orphan pack
	st.setNow(t0.Add(48 * time.Hour))

	rep, err := Reclaim(ctx, st, nsd, st.opts())
	if err != nil {
		t.Fatal(err)
	}
	if rep.DeletedManifests != 1 || rep.DeletedPacks != 2 || rep.Deleted != 3 {
		t.Fatalf("report %+v, want 1 manifest and 2 packs deleted", rep)
	}
	if rep.KeptYoung != 1 || rep.KeptReferenced != 2 || rep.Errors != 0 || rep.DeleteUnverified != 0 {
		t.Fatalf("report %+v", rep)
	}
	for _, k := range []string{b.Manifest.Key, b.Object.Key, e.Object.Key} {
		if st.has(k) {
			t.Fatalf("%s survived", k)
		}
	}
	for _, k := range []string{a.Object.Key, a.Manifest.Key, f.Object.Key} {
		if !st.has(k) {
			t.Fatalf("%s was deleted", k)
		}
	}
	// Manifests before packs.
	if kindOf(st.deletes[0]) != "manifest" || st.deletes[0] != b.Manifest.Key {
		t.Fatalf("delete order %v: manifest must go first", st.deletes)
	}
	// A second pass finds nothing more to do.
	st.deletes = nil
	rep, err = Reclaim(ctx, st, nsd, st.opts())
	if err != nil || rep.Deleted != 0 || len(st.deletes) != 0 {
		t.Fatalf("second pass: %+v %v %v", rep, err, st.deletes)
	}
}

func TestReclaimVerifiesDeletes(t *testing.T) {
	st := newFake()
	ns := testNamespace("acme")
	nsd := digest(t, ns)
	b := buildPack(t, ns, 2, 200, 64)
	st.put(t, b.Object.Key, b.Object.Body)
	st.put(t, b.Manifest.Key, b.Manifest.Body)
	st.sticky[b.Object.Key] = true // Delete "succeeds", object stays
	st.setNow(t0.Add(48 * time.Hour))

	rep, err := Reclaim(ctx, st, nsd, st.opts())
	if err != nil {
		t.Fatal(err)
	}
	if rep.DeletedManifests != 1 || rep.DeletedPacks != 0 || rep.Deleted != 1 {
		t.Fatalf("report %+v: the sticky pack must not count as deleted", rep)
	}
	if rep.DeleteUnverified != 1 || !slices.Equal(rep.Unverified, []string{b.Object.Key}) {
		t.Fatalf("unverified %d %v, want the pack key", rep.DeleteUnverified, rep.Unverified)
	}
	n := 0
	for _, k := range st.deletes {
		if k == b.Object.Key {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("pack delete issued %d times, want exactly 1 (no blind retry)", n)
	}

	// A Head failure after the delete is an error, not a success.
	st2 := newFake()
	st2.put(t, b.Object.Key, b.Object.Body)
	st2.setNow(t0.Add(48 * time.Hour))
	deleted := false
	st2.SetFault(func(_ context.Context, op, key string) error {
		if op == cold.OpDelete {
			deleted = true
		}
		if op == cold.OpHead && deleted {
			return cold.ErrUnavailable
		}
		return nil
	})
	rep, err = Reclaim(ctx, st2, nsd, st2.opts())
	if err != nil {
		t.Fatal(err)
	}
	if rep.DeletedPacks != 0 || rep.Errors != 1 || !errors.Is(rep.FirstError, cold.ErrUnavailable) {
		t.Fatalf("report %+v, want one unverifiable delete as an error", rep)
	}
}

func TestReclaimKeepsPacksOfUndecodableManifests(t *testing.T) {
	ns := testNamespace("acme")
	nsd := digest(t, ns)
	b := buildPack(t, ns, 2, 200, 64)
	e := buildPack(t, ns, 1, 300, 64)

	t.Run("corrupt", func(t *testing.T) {
		st := newFake()
		bad := bytes.Clone(b.Manifest.Body)
		bad[len(bad)/2] ^= 0xff
		st.put(t, b.Object.Key, b.Object.Body)
		st.put(t, b.Manifest.Key, bad)
		st.put(t, e.Object.Key, e.Object.Body)
		st.setNow(t0.Add(48 * time.Hour))
		rep, err := Reclaim(ctx, st, nsd, st.opts())
		if err != nil {
			t.Fatal(err)
		}
		if rep.Deleted != 0 || len(st.deletes) != 0 || rep.KeptPinned != 2 || rep.Undecodable != 1 {
			t.Fatalf("report %+v deletes %v: packs must be pinned", rep, st.deletes)
		}
		for _, k := range []string{b.Object.Key, b.Manifest.Key, e.Object.Key} {
			if !st.has(k) {
				t.Fatalf("%s was deleted", k)
			}
		}
	})
	t.Run("unreadable", func(t *testing.T) {
		st := newFake()
		st.put(t, b.Object.Key, b.Object.Body)
		st.put(t, b.Manifest.Key, b.Manifest.Body)
		st.put(t, e.Object.Key, e.Object.Body)
		st.setNow(t0.Add(48 * time.Hour))
		st.SetFault(func(_ context.Context, op, key string) error {
			if op == cold.OpRangeGet && key == b.Manifest.Key {
				return cold.ErrUnavailable
			}
			return nil
		})
		rep, err := Reclaim(ctx, st, nsd, st.opts())
		if err != nil {
			t.Fatal(err)
		}
		if len(st.deletes) != 0 || rep.KeptPinned != 2 || rep.Errors == 0 {
			t.Fatalf("report %+v deletes %v", rep, st.deletes)
		}
	})
	t.Run("corrupt pointer pins manifests", func(t *testing.T) {
		st := newFake()
		st.put(t, b.Object.Key, b.Object.Body)
		st.put(t, b.Manifest.Key, b.Manifest.Body)
		bad := bytes.Clone(b.Pointers[0].Body)
		bad[0] = 'X'
		st.put(t, b.Pointers[0].Key, bad)
		st.setNow(t0.Add(48 * time.Hour))
		rep, err := Reclaim(ctx, st, nsd, st.opts())
		if err != nil {
			t.Fatal(err)
		}
		if len(st.deletes) != 0 || rep.Undecodable != 1 || !st.has(b.Manifest.Key) || !st.has(b.Object.Key) {
			t.Fatalf("report %+v deletes %v", rep, st.deletes)
		}
	})
	t.Run("list failure deletes nothing", func(t *testing.T) {
		st := newFake()
		st.put(t, e.Object.Key, e.Object.Body)
		st.setNow(t0.Add(48 * time.Hour))
		st.SetFault(func(_ context.Context, op, key string) error {
			if op == cold.OpList && kindOf(key) == "manifest" {
				return cold.ErrUnavailable
			}
			return nil
		})
		if _, err := Reclaim(ctx, st, nsd, st.opts()); !errors.Is(err, cold.ErrUnavailable) {
			t.Fatalf("err %v, want ErrUnavailable", err)
		}
		if len(st.deletes) != 0 {
			t.Fatalf("deleted %v", st.deletes)
		}
	})
}

func TestExpireThenReclaim(t *testing.T) {
	st := newFake()
	ns := testNamespace("acme")
	nsd := digest(t, ns)
	a := buildPack(t, ns, 3, 100, 64)
	b := buildPack(t, ns, 2, 200, 64)
	st.publish(t, a)
	st.setNow(t0.Add(10 * time.Hour))
	st.publish(t, b)
	st.setNow(t0.Add(48 * time.Hour))

	rep, err := Expire(ctx, st, nsd, t0.Add(5*time.Hour), st.opts())
	if err != nil {
		t.Fatal(err)
	}
	if rep.PointersScanned != 5 || rep.PointersExpired != 3 || rep.PointersKept != 2 || rep.Errors != 0 {
		t.Fatalf("report %+v", rep)
	}
	if rep.Reclaim.DeletedManifests != 1 || rep.Reclaim.DeletedPacks != 1 {
		t.Fatalf("reclaim %+v, want A's manifest and pack", rep.Reclaim)
	}
	// Pointers went first, then manifest, then pack.
	var kinds []string
	for _, k := range st.deletes {
		kinds = append(kinds, kindOf(k))
	}
	want := []string{"pointer", "pointer", "pointer", "manifest", "pack"}
	if !slices.Equal(kinds, want) {
		t.Fatalf("delete kinds %v, want %v", kinds, want)
	}
	inv, err := List(ctx, st, nsd)
	if err != nil {
		t.Fatal(err)
	}
	if inv.Packs.Count != 1 || inv.Manifests.Count != 1 || inv.Pointers.Count != 2 {
		t.Fatalf("inventory %+v, want only B", inv)
	}
	// A's blocks are now misses; B's still read back.
	bKeys := map[string]bool{}
	for _, o := range b.Pointers {
		bKeys[o.Key] = true
	}
	var got int
	br, err := BackfillWith(ctx, st, nsd, 1<<20, BackfillOptions{}, func(r pack.Range, _ []byte) error {
		if !bKeys[pack.PointerKey(nsd, r.Key)] {
			t.Errorf("block %s is not B's", r.Key)
		}
		got++
		return nil
	})
	if err != nil || got != 2 || br.Blocks != 2 {
		t.Fatalf("backfill %+v %v: got %d blocks, want B's 2", br, err, got)
	}
}

func TestExpireKeepsRewrittenPointer(t *testing.T) {
	st := newFake()
	ns := testNamespace("acme")
	nsd := digest(t, ns)
	a := buildPack(t, ns, 1, 100, 64)
	st.publish(t, a)
	st.setNow(t0.Add(48 * time.Hour))
	// The pointer is rewritten between Expire's listing and its Head.
	st.SetFault(func(_ context.Context, op, key string) error {
		if op == cold.OpHead && key == a.Pointers[0].Key {
			st.mu.Lock()
			st.mod[key] = st.now
			st.mu.Unlock()
		}
		return nil
	})
	rep, err := Expire(ctx, st, nsd, t0.Add(time.Hour), st.opts())
	if err != nil {
		t.Fatal(err)
	}
	if rep.PointersExpired != 0 || rep.PointersKept != 1 || !st.has(a.Pointers[0].Key) || !st.has(a.Object.Key) {
		t.Fatalf("report %+v: a rewritten pointer must survive", rep)
	}
}

func TestPurgeOrderPointersFirst(t *testing.T) {
	st := newFake()
	ns1 := testNamespace("acme")
	ns2 := testNamespace("globex")
	d1, d2 := digest(t, ns1), digest(t, ns2)
	a := buildPack(t, ns1, 3, 100, 64)
	b := buildPack(t, ns1, 2, 200, 64)
	c := buildPack(t, ns2, 2, 100, 64)
	st.publish(t, a)
	st.publish(t, b)
	st.publish(t, c)

	rep, err := Purge(ctx, st, d1)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Complete || rep.DeletedPointers != 5 || rep.DeletedManifests != 2 || rep.DeletedPacks != 2 {
		t.Fatalf("report %+v", rep)
	}
	rank := map[string]int{"pointer": 0, "manifest": 1, "pack": 2}
	for i := 1; i < len(st.deletes); i++ {
		if rank[kindOf(st.deletes[i])] < rank[kindOf(st.deletes[i-1])] {
			t.Fatalf("delete order %v: pointers, then manifests, then packs", st.deletes)
		}
	}
	if inv, _ := List(ctx, st, d1); inv.Total().Count != 0 {
		t.Fatalf("ns1 left %+v", inv)
	}
	if inv, _ := List(ctx, st, d2); inv.Total().Count != 4 {
		t.Fatalf("other tenant touched: %+v", inv)
	}

	// A pointer that will not go stops the purge before any manifest.
	st.deletes = nil
	st.sticky[c.Pointers[1].Key] = true
	rep, err = Purge(ctx, st, d2)
	if !errors.Is(err, ErrIncomplete) || rep.Complete {
		t.Fatalf("err %v report %+v, want ErrIncomplete", err, rep)
	}
	if rep.DeleteUnverified != 1 || rep.DeletedManifests != 0 || !st.has(c.Manifest.Key) {
		t.Fatalf("report %+v: manifest deleted while a pointer stayed", rep)
	}
	for _, k := range st.deletes {
		if kindOf(k) != "pointer" {
			t.Fatalf("deleted %s while a pointer stayed", k)
		}
	}
	if n := slices.Index(st.deletes, c.Pointers[1].Key); n < 0 || slices.Index(st.deletes[n+1:], c.Pointers[1].Key) >= 0 {
		t.Fatalf("sticky pointer deleted other than once: %v", st.deletes)
	}
}

func TestListInventory(t *testing.T) {
	st := newFake()
	ns := testNamespace("acme")
	nsd := digest(t, ns)
	a := buildPack(t, ns, 3, 100, 64)
	b := buildPack(t, ns, 2, 200, 1000)
	st.publish(t, a)
	st.publish(t, b)
	st.put(t, pack.NamespacePrefixes(nsd)[2]+"junk", []byte("xyz"))
	st.publish(t, buildPack(t, testNamespace("globex"), 1, 1, 8))

	inv, err := List(ctx, st, nsd)
	if err != nil {
		t.Fatal(err)
	}
	want := Inventory{
		Namespace: nsd,
		Packs:     KindStats{2, int64(len(a.Object.Body) + len(b.Object.Body))},
		Manifests: KindStats{2, int64(len(a.Manifest.Body) + len(b.Manifest.Body))},
		Pointers:  KindStats{5, 5 * int64(pack.PointerLen)},
		Other:     KindStats{1, 3},
	}
	if inv != want {
		t.Fatalf("inventory\n got %+v\nwant %+v", inv, want)
	}
	if tot := inv.Total(); tot.Count != 10 {
		t.Fatalf("total %+v", tot)
	}
	if c := st.Calls(); c[cold.OpRangeGet] != 0 {
		t.Fatalf("List read %d objects, want none", c[cold.OpRangeGet])
	}
}

func TestLegacyManifestsLeftAlone(t *testing.T) {
	st := newFake()
	ns := testNamespace("acme")
	nsd := digest(t, ns)
	a := buildPack(t, ns, 2, 100, 64)
	e := buildPack(t, ns, 1, 300, 64)
	st.publish(t, a)
	st.put(t, e.Object.Key, e.Object.Body) // orphan pack
	legacy := binary.LittleEndian.AppendUint16([]byte("GCMF"), 2)
	legacy = append(legacy, "opaque v2 body naming who knows what"...)
	lkey := pack.ManifestKey(nsd, pack.Sum(legacy))
	st.put(t, lkey, legacy)
	st.setNow(t0.Add(48 * time.Hour))
	st.ResetCalls()

	rep, err := Reclaim(ctx, st, nsd, st.opts())
	if err != nil {
		t.Fatal(err)
	}
	if rep.Legacy != 1 || rep.Undecodable != 0 {
		t.Fatalf("report %+v, want 1 legacy", rep)
	}
	if c := st.Calls(); c[cold.OpPut] != 0 {
		t.Fatalf("reclaim wrote %d objects", c[cold.OpPut])
	}
	if len(st.deletes) != 0 || rep.KeptPinned != 1 {
		t.Fatalf("report %+v deletes %v: legacy manifest pins packs, is itself kept", rep, st.deletes)
	}
	buf := make([]byte, len(legacy))
	if err := st.RangeGet(ctx, lkey, 0, buf); err != nil || !bytes.Equal(buf, legacy) {
		t.Fatalf("legacy manifest changed: %v", err)
	}
	// Expire also leaves it; Backfill serves it as a clean legacy miss.
	_, blk, err := pack.ParsePointerKey(e.Pointers[0].Key)
	if err != nil {
		t.Fatal(err)
	}
	ptr := pack.Pointer{Namespace: nsd, Block: blk, ManifestKey: lkey, Manifest: pack.Sum(legacy), ManifestSize: uint64(len(legacy))}
	body, err := ptr.Encode()
	if err != nil {
		t.Fatal(err)
	}
	st.put(t, ptr.Key(), body)
	st.deletes = nil
	xr, err := Expire(ctx, st, nsd, t0.Add(-time.Hour), st.opts())
	if err != nil || xr.Reclaim.Legacy != 1 || len(st.deletes) != 0 || !st.has(lkey) {
		t.Fatalf("expire %+v %v deletes %v", xr, err, st.deletes)
	}
	br, err := BackfillWith(ctx, st, nsd, 1<<20, BackfillOptions{}, func(pack.Range, []byte) error { return nil })
	if err != nil || br.Legacy != 1 || br.Blocks != 2 || br.Corrupt != 0 {
		t.Fatalf("backfill %+v %v, want A's 2 blocks and 1 legacy miss", br, err)
	}
}

func TestBackfillRespectsBudget(t *testing.T) {
	st := newFake()
	ns := testNamespace("acme")
	nsd := digest(t, ns)
	a := buildPack(t, ns, 3, 100, 100)
	b := buildPack(t, ns, 2, 200, 300)
	st.publish(t, a)
	st.publish(t, b)
	want := map[identity.BlockKey][]byte{}
	for _, p := range []*pack.Pack{a, b} {
		m, err := pack.OpenManifest(p.Manifest.Key, p.Manifest.Body)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range m.Ranges {
			want[r.Key] = p.Object.Body[r.Offset : r.Offset+r.Length]
		}
	}

	run := func(budget int64) BackfillReport {
		t.Helper()
		st.mu.Lock()
		st.readBytes = 0
		st.mu.Unlock()
		rep, err := BackfillWith(ctx, st, nsd, budget, BackfillOptions{}, func(r pack.Range, pl []byte) error {
			if !bytes.Equal(pl, want[r.Key]) {
				t.Errorf("block %s: wrong payload", r.Key)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		st.mu.Lock()
		read := st.readBytes
		st.mu.Unlock()
		if read != rep.BytesRead || read > budget {
			t.Fatalf("budget %d: store saw %d bytes, report %d", budget, read, rep.BytesRead)
		}
		return rep
	}

	full := run(1 << 30)
	if full.Blocks != 5 || full.Exhausted || full.Corrupt+full.Missing+full.Legacy != 0 {
		t.Fatalf("unbounded run %+v, want 5 blocks", full)
	}
	// Each manifest is downloaded once.
	wantBytes := int64(5*pack.PointerLen + len(a.Manifest.Body) + len(b.Manifest.Body) + 3*100 + 3 + 2*300 + 1)
	if full.BytesRead != wantBytes {
		t.Fatalf("read %d bytes, want %d", full.BytesRead, wantBytes)
	}
	if r := run(full.BytesRead); r.Blocks != 5 {
		t.Fatalf("exact budget: %+v", r)
	}
	if r := run(full.BytesRead - 1); r.Blocks != 4 || !r.Exhausted {
		t.Fatalf("budget one short: %+v, want 4 blocks and exhausted", r)
	}
	if r := run(0); r.Blocks != 0 || r.BytesRead != 0 || !r.Exhausted {
		t.Fatalf("zero budget: %+v", r)
	}
	prev := 0
	for budget := int64(1); budget <= full.BytesRead; budget += 97 {
		r := run(budget)
		if r.Blocks < prev {
			t.Fatalf("budget %d delivered %d blocks, fewer than a smaller budget (%d)", budget, r.Blocks, prev)
		}
		prev = r.Blocks
	}

	// A payload that fails its checksum is skipped, not delivered.
	bad := bytes.Clone(a.Object.Body)
	bad[len(bad)-1] ^= 1
	st.put(t, a.Object.Key, bad)
	r := run(1 << 30)
	if r.Blocks != 4 || r.Corrupt != 1 {
		t.Fatalf("corrupt payload: %+v, want 4 blocks and 1 corrupt", r)
	}
}

func TestReclaimRechecksBeforeDelete(t *testing.T) {
	st := newFake()
	ns := testNamespace("acme")
	nsd := digest(t, ns)
	b := buildPack(t, ns, 2, 200, 64)
	st.put(t, b.Object.Key, b.Object.Body)
	st.put(t, b.Manifest.Key, b.Manifest.Body)
	st.setNow(t0.Add(48 * time.Hour))
	// A delayed retry writes B's pointer after the first scan of pointers.
	lists := 0
	st.SetFault(func(_ context.Context, op, key string) error {
		if op == cold.OpList && kindOf(key) == "pointer" {
			lists++
			if lists == 2 {
				if err := st.Mem.Put(ctx, b.Pointers[0].Key, b.Pointers[0].Body, cold.PutOptions{}); err != nil {
					return err
				}
				st.mu.Lock()
				st.mod[b.Pointers[0].Key] = st.now
				st.mu.Unlock()
			}
		}
		return nil
	})
	rep, err := Reclaim(ctx, st, nsd, st.opts())
	if err != nil {
		t.Fatal(err)
	}
	if len(st.deletes) != 0 || rep.KeptReferenced != 2 || !st.has(b.Manifest.Key) || !st.has(b.Object.Key) {
		t.Fatalf("report %+v deletes %v: the re-check must see the new pointer", rep, st.deletes)
	}
}
