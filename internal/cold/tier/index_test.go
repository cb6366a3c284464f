package tier

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gpucache/gpucache/api/identity"
	"github.com/gpucache/gpucache/internal/cold"
	"github.com/gpucache/gpucache/internal/cold/pack"
	"github.com/gpucache/gpucache/internal/testfix"
)

var bg = context.Background()

// idxBlock is one block written behind in the index tests.
type idxBlock struct {
	id  identity.CacheIdentity
	key identity.BlockKey
}

// mixedBlocks returns n chained token blocks and n opaque-key blocks of ns.
func mixedBlocks(t testing.TB, ns identity.Namespace, n int) []idxBlock {
	t.Helper()
	d, _ := ns.Digest()
	toks := make([]uint32, n*int(ns.Layout.BlockTokens))
	for i := range toks {
		toks[i] = uint32(7 + i)
	}
	ids, err := identity.Identities(ns, toks)
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		ids = append(ids, identity.CacheIdentity{Namespace: ns, Opaque: fmt.Appendf(nil, "model@00000000@0@%064x", i)})
	}
	out := make([]idxBlock, len(ids))
	for i, id := range ids {
		out[i] = idxBlock{id: id, key: id.KeyIn(d)}
	}
	return out
}

// batchBlocks remembers and evicts the blocks into the tier's batches.
func batchBlocks(tr *Tier, d identity.NamespaceDigest, bs []idxBlock) {
	for _, b := range bs {
		tr.RememberKeyed(b.id, d, b.key)
		tr.Evicted(d, b.key, b.id.Parent, b.id.ValidLength, payloadOf(b.key, 1024))
	}
}

func flushAll(t testing.TB, tr *Tier) {
	t.Helper()
	if rep := tr.Flush(bg, true); rep.Err != nil || rep.Failed != 0 || rep.Remaining != 0 {
		t.Fatalf("flush: %+v", rep)
	}
}

// writtenBehind returns a tier over store that has written n blocks of
// each kind of tenant "acme" behind (batched and flushed), with their
// namespace and its digest.
func writtenBehind(t testing.TB, store cold.Store, n int) (*Tier, identity.Namespace, identity.NamespaceDigest, []idxBlock) {
	t.Helper()
	ns := testfix.TinyNamespace("acme")
	d, _ := ns.Digest()
	bs := mixedBlocks(t, ns, n)
	tr := newTier(t, store, nil)
	batchBlocks(tr, d, bs)
	flushAll(t, tr)
	return tr, ns, d, bs
}

func wantRefill(t testing.TB, tr *Tier, ns identity.Namespace, b idxBlock, hit bool) {
	t.Helper()
	dst := make([]byte, 2048)
	n, res, err := tr.Refill(bg, ns, b.key, dst)
	if res.Hit != hit {
		t.Fatalf("refill of %s: %v %v, want hit %v", b.key, res, err, hit)
	}
	if hit && !bytes.Equal(dst[:n], payloadOf(b.key, 1024)) {
		t.Fatalf("refill of %s: wrong bytes", b.key)
	}
	if !hit && n != 0 {
		t.Fatalf("miss with n = %d", n)
	}
	// The server's path: the payload is read into a buffer allocated once
	// its length is known (RefillInto). Deletes hide blocks from it too.
	var into []byte
	n, res, err = tr.RefillInto(bg, ns, b.key, func(n int) ([]byte, bool) { into = make([]byte, n); return into, true })
	if res.Hit != hit {
		t.Fatalf("RefillInto of %s: %v %v, want hit %v", b.key, res, err, hit)
	}
	if hit && !bytes.Equal(into[:n], payloadOf(b.key, 1024)) {
		t.Fatalf("RefillInto of %s: wrong bytes", b.key)
	}
	if !hit && n != 0 {
		t.Fatalf("RefillInto miss with n = %d", n)
	}
}

// Blocks the tier publishes are present at once; a tier restarted over
// the same directory finds them by listing; another tenant never does.
func TestPresentAfterPublishAndRestart(t *testing.T) {
	dir := t.TempDir()
	store, err := cold.NewFS(dir)
	if err != nil {
		t.Fatal(err)
	}
	ns := testfix.TinyNamespace("acme")
	d, _ := ns.Digest()
	other, _ := testfix.TinyNamespace("other").Digest()
	bs := mixedBlocks(t, ns, 4)

	tr := newTier(t, store, nil)
	for _, b := range bs {
		if tr.Present(d, b.key) {
			t.Fatal("present before it was written")
		}
	}
	batchBlocks(tr, d, bs)
	for _, b := range bs {
		if tr.Present(d, b.key) {
			t.Fatal("present while only batched: a refill would miss")
		}
	}
	flushAll(t, tr)
	for _, b := range bs {
		if !tr.Present(d, b.key) {
			t.Fatalf("block %s absent right after its pointer was published", b.key)
		}
		if tr.Present(other, b.key) {
			t.Fatal("another tenant's namespace answers present")
		}
	}
	if st := tr.Stats(); st.IndexEntries != int64(len(bs)) {
		t.Fatalf("IndexEntries = %d, want %d", st.IndexEntries, len(bs))
	}
	tr.Close()

	// Restart: a new store handle and tier over the same directory.
	store2, err := cold.NewFS(dir)
	if err != nil {
		t.Fatal(err)
	}
	tr2 := newTier(t, store2, nil)
	if tr2.Present(d, bs[0].key) || tr2.Stats().IndexReady {
		t.Fatal("a fresh tier answers present before listing")
	}
	if err := tr2.LoadIndex(bg); err != nil {
		t.Fatal(err)
	}
	st := tr2.Stats()
	if !st.IndexReady || st.IndexEntries != int64(len(bs)) || st.IndexListed != uint64(len(bs)) {
		t.Fatalf("after listing: %+v", st)
	}
	for _, b := range bs {
		if !tr2.Present(d, b.key) || tr2.Present(other, b.key) {
			t.Fatalf("block %s: present %v, other tenant %v", b.key, tr2.Present(d, b.key), tr2.Present(other, b.key))
		}
		wantRefill(t, tr2, ns, b, true)
	}
}

// Past IndexMax nothing grows: publishing and listing stop adding, count
// it, and the blocks left out answer absent (GET still refills them).
func TestIndexBound(t *testing.T) {
	store := cold.NewMem()
	ns := testfix.TinyNamespace("acme")
	d, _ := ns.Digest()
	bs := mixedBlocks(t, ns, 4) // 8 blocks
	tr := newTier(t, store, func(c *Config) { c.IndexMax = 3 })
	batchBlocks(tr, d, bs)
	flushAll(t, tr)
	st := tr.Stats()
	if st.IndexEntries != 3 || st.IndexMax != 3 || st.IndexFull != uint64(len(bs)-3) {
		t.Fatalf("after publishing %d blocks with IndexMax 3: entries %d max %d full %d", len(bs), st.IndexEntries, st.IndexMax, st.IndexFull)
	}
	present := 0
	for _, b := range bs {
		if tr.Present(d, b.key) {
			present++
		}
		wantRefill(t, tr, ns, b, true)
	}
	if present != 3 {
		t.Fatalf("%d blocks present, want 3", present)
	}

	tr2 := newTier(t, store, func(c *Config) { c.IndexMax = 3 })
	if err := tr2.LoadIndex(bg); err != nil {
		t.Fatal(err)
	}
	if st := tr2.Stats(); st.IndexEntries != 3 || st.IndexFull != 1 || !st.IndexReady || st.IndexListed != 4 {
		t.Fatalf("listing into a bounded index: %+v", st)
	}
	if _, err := New(Config{Store: store, IndexMax: -1}); err == nil {
		t.Fatal("negative IndexMax accepted")
	}
}

// Delete hides a published block: absent, a refill misses (even with its
// pointer cached by an earlier refill), the pointer object is gone so a
// restarted tier misses too, and the pack and manifest stay for reclaim.
func TestDeleteHidesPublishedBlock(t *testing.T) {
	dir := t.TempDir()
	store, err := cold.NewFS(dir)
	if err != nil {
		t.Fatal(err)
	}
	tr, ns, d, bs := writtenBehind(t, store, 2)
	for _, b := range bs {
		wantRefill(t, tr, ns, b, true) // caches the pointer
	}
	// Delete one token block and one opaque block.
	gone := []idxBlock{bs[1], bs[3]}
	for _, b := range gone {
		known, err := tr.Delete(bg, ns, d, b.key)
		if err != nil || !known {
			t.Fatalf("Delete: known %v err %v", known, err)
		}
		if tr.Present(d, b.key) {
			t.Fatal("present after Delete")
		}
		wantRefill(t, tr, ns, b, false)
		if _, err := store.Head(bg, pack.PointerKey(d, b.key)); !errors.Is(err, cold.ErrNotFound) {
			t.Fatalf("pointer after Delete: %v", err)
		}
	}
	for _, b := range []idxBlock{bs[0], bs[2]} {
		if !tr.Present(d, b.key) {
			t.Fatal("a block not deleted is absent")
		}
		wantRefill(t, tr, ns, b, true)
	}
	var manifests int
	if err := store.List(bg, "manifests/", func(cold.ObjectInfo) error { manifests++; return nil }); err != nil || manifests != 1 {
		t.Fatalf("manifests after Delete: %d, %v", manifests, err)
	}
	if st := tr.Stats(); st.Deletes != 2 || st.DeleteErrors != 0 {
		t.Fatalf("stats: %+v", st)
	}
	tr.Close()

	tr2 := newTier(t, store, nil)
	if err := tr2.LoadIndex(bg); err != nil {
		t.Fatal(err)
	}
	for _, b := range gone {
		if tr2.Present(d, b.key) {
			t.Fatal("a deleted block is present after a restart")
		}
		wantRefill(t, tr2, ns, b, false)
	}
	wantRefill(t, tr2, ns, bs[0], true)
}

// switchStore fails every call while down is set, as an unreachable S3.
type switchStore struct {
	cold.Store
	down atomic.Bool
}

func (s *switchStore) err() error {
	if s.down.Load() {
		return fmt.Errorf("test outage: %w", cold.ErrUnavailable)
	}
	return nil
}

func (s *switchStore) Put(ctx context.Context, key string, body []byte, opts cold.PutOptions) error {
	if err := s.err(); err != nil {
		return err
	}
	return s.Store.Put(ctx, key, body, opts)
}

func (s *switchStore) Delete(ctx context.Context, key string) error {
	if err := s.err(); err != nil {
		return err
	}
	return s.Store.Delete(ctx, key)
}

// A Delete racing the write-behind: a block batched, or packed and queued
// on a sink that cannot write yet, is not resurrected by a later flush;
// the blocks around it are written.
func TestDeletePendingWriteBehindNotResurrected(t *testing.T) {
	ns := testfix.TinyNamespace("acme")
	d, _ := ns.Digest()
	for _, stage := range []string{"batched", "queued"} {
		t.Run(stage, func(t *testing.T) {
			store := &switchStore{Store: cold.NewMem()}
			tr := newTier(t, store, nil)
			bs := mixedBlocks(t, ns, 2)
			batchBlocks(tr, d, bs)
			if stage == "queued" {
				store.down.Store(true)
				if rep := tr.Flush(bg, true); rep.Completed != 0 || rep.Remaining == 0 {
					t.Fatalf("flush while down: %+v", rep)
				}
				store.down.Store(false)
			}
			for _, b := range []idxBlock{bs[0], bs[2]} {
				if _, err := tr.Delete(bg, ns, d, b.key); err != nil {
					t.Fatal(err)
				}
			}
			flushAll(t, tr)
			for i, b := range bs {
				deleted := i == 0 || i == 2
				if _, err := store.Head(bg, pack.PointerKey(d, b.key)); errors.Is(err, cold.ErrNotFound) != deleted {
					t.Fatalf("block %d (deleted %v): pointer Head %v", i, deleted, err)
				}
				if tr.Present(d, b.key) == deleted {
					t.Fatalf("block %d (deleted %v): present %v", i, deleted, !deleted)
				}
				wantRefill(t, tr, ns, b, !deleted)
			}
			if st := tr.Stats(); st.HeldBytes != 0 || st.PendingBytes != 0 {
				t.Fatalf("budget bytes still held after the flush: %+v", st)
			}
		})
	}
}

// A block stored again after its Delete and written behind again is
// present and refills.
func TestRewriteAfterDelete(t *testing.T) {
	store := cold.NewMem()
	tr, ns, d, bs := writtenBehind(t, store, 1)
	for _, b := range bs {
		if _, err := tr.Delete(bg, ns, d, b.key); err != nil {
			t.Fatal(err)
		}
	}
	batchBlocks(tr, d, bs)
	flushAll(t, tr)
	for _, b := range bs {
		if !tr.Present(d, b.key) {
			t.Fatal("absent after it was written again")
		}
		wantRefill(t, tr, ns, b, true)
	}
}

// A Delete the store cannot take is reported; the block is absent and
// hidden from refills meanwhile, and a retry once the store answers
// removes the pointer.
func TestDeleteStoreUnreachable(t *testing.T) {
	store := &switchStore{Store: cold.NewMem()}
	tr, ns, d, bs := writtenBehind(t, store, 1)
	store.down.Store(true)
	_, err := tr.Delete(bg, ns, d, bs[0].key)
	if !errors.Is(err, cold.ErrUnavailable) {
		t.Fatalf("Delete while the store is down = %v, want ErrUnavailable", err)
	}
	if tr.Present(d, bs[0].key) {
		t.Fatal("present after a failed Delete")
	}
	store.down.Store(false)
	wantRefill(t, tr, ns, bs[0], false) // hidden
	if st := tr.Stats(); st.DeleteErrors != 1 || st.Hidden != 1 {
		t.Fatalf("stats: %+v", st)
	}
	if _, err := tr.Delete(bg, ns, d, bs[0].key); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Head(bg, pack.PointerKey(d, bs[0].key)); !errors.Is(err, cold.ErrNotFound) {
		t.Fatalf("pointer after the retried Delete: %v", err)
	}
}

// A refill that finds no pointer drops a stale entry.
func TestRefillMissDropsStaleEntry(t *testing.T) {
	store := cold.NewMem()
	tr, ns, d, bs := writtenBehind(t, store, 1)
	// Removed behind the tier's back (another node, an operator).
	if err := store.Delete(bg, pack.PointerKey(d, bs[0].key)); err != nil {
		t.Fatal(err)
	}
	if !tr.Present(d, bs[0].key) {
		t.Fatal("absent before any refill")
	}
	wantRefill(t, tr, ns, bs[0], false)
	if tr.Present(d, bs[0].key) {
		t.Fatal("still present after a refill found no pointer")
	}
}

// TestIndexEntryBytes checks IndexEntryBytes against the heap one entry
// takes, growth slack included.
func TestIndexEntryBytes(t *testing.T) {
	for _, n := range []int{1 << 16, 1<<17 + 1<<15, 1 << 18} {
		x := newPresenceIndex(n)
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		var d identity.NamespaceDigest
		for i := range n {
			var k identity.BlockKey
			k[0], k[1], k[2] = byte(i), byte(i>>8), byte(i>>16)
			x.add(x.fp(d, k))
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		per := float64(after.HeapAlloc-before.HeapAlloc) / float64(n)
		t.Logf("%d entries: %.1f heap bytes per entry", n, per)
		if per > IndexEntryBytes {
			t.Fatalf("%d entries: %.1f heap bytes per entry, IndexEntryBytes says %d", n, per, IndexEntryBytes)
		}
		runtime.KeepAlive(x)
	}
}

func (s *switchStore) List(ctx context.Context, prefix string, fn func(cold.ObjectInfo) error) error {
	if err := s.err(); err != nil {
		return err
	}
	return s.Store.List(ctx, prefix, fn)
}

// RunIndex retries a listing that failed (1s, doubling) and, with
// IndexRescan, lists again to find pointers another writer published.
func TestRunIndexRetriesAndRescans(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := cold.NewMem()
		ns := testfix.TinyNamespace("acme")
		d, _ := ns.Digest()
		bs := mixedBlocks(t, ns, 1)
		// Another node's tier writes the blocks to the shared store.
		writer := newTier(t, mem, nil)
		batchBlocks(writer, d, bs[:1])
		flushAll(t, writer)

		store := &switchStore{Store: mem}
		store.down.Store(true)
		tr := newTier(t, store, func(c *Config) { c.IndexRescan = time.Minute })
		ctx, cancel := context.WithCancel(bg)
		done := make(chan struct{})
		go func() { defer close(done); tr.RunIndex(ctx) }()
		synctest.Wait()
		if st := tr.Stats(); st.IndexReady || st.IndexLoadErrors != 1 {
			t.Fatalf("with the store down: %+v", st)
		}
		store.down.Store(false)
		time.Sleep(time.Second) // the retry is due (fake clock)
		synctest.Wait()
		if st := tr.Stats(); !st.IndexReady || !tr.Present(d, bs[0].key) {
			t.Fatalf("after the retry: %+v", st)
		}
		batchBlocks(writer, d, bs[1:])
		flushAll(t, writer)
		if tr.Present(d, bs[1].key) {
			t.Fatal("present before the rescan")
		}
		time.Sleep(time.Minute)
		synctest.Wait()
		if !tr.Present(d, bs[1].key) || tr.Stats().IndexLoads != 2 {
			t.Fatalf("after the rescan: present %v, %+v", tr.Present(d, bs[1].key), tr.Stats())
		}
		cancel()
		<-done
	})
}

// Pointers deleted through AccountedStore (the admin lifecycle's purge and
// expiry) leave the presence index at once: LOOKUP stops counting them
// without waiting for a rescan or a GET that misses. Other blocks stay
// present.
func TestAccountedDeleteDropsIndexEntries(t *testing.T) {
	store := cold.NewMem()
	ns, other := testfix.TinyNamespace("acme"), testfix.TinyNamespace("beta")
	d, _ := ns.Digest()
	od, _ := other.Digest()
	bs, obs := mixedBlocks(t, ns, 2), mixedBlocks(t, other, 2)
	tr := newTier(t, store, nil)
	batchBlocks(tr, d, bs)
	batchBlocks(tr, od, obs)
	flushAll(t, tr)
	acc := tr.AccountedStore()
	for _, b := range bs {
		if !tr.Present(d, b.key) {
			t.Fatal("published block absent")
		}
		if err := acc.Delete(bg, pack.PointerKey(d, b.key)); err != nil {
			t.Fatal(err)
		}
		if tr.Present(d, b.key) {
			t.Fatal("a block whose pointer was deleted through AccountedStore still answers present")
		}
	}
	for _, b := range obs {
		if !tr.Present(od, b.key) {
			t.Fatal("another namespace's block lost its entry")
		}
	}
	if st := tr.Stats(); st.IndexEntries != int64(len(obs)) {
		t.Fatalf("index entries %d, want %d", st.IndexEntries, len(obs))
	}
}
