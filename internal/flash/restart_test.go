package flash

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/gpucache/gpucache/api/identity"
	"github.com/gpucache/gpucache/internal/lower"
	"github.com/gpucache/gpucache/internal/lower/lowertest"
	"github.com/gpucache/gpucache/internal/testfix"
)

// copyDir copies the files of src into a fresh directory: a snapshot of
// the disk as a kill -9 would leave it (the tier still running).
func copyDir(t testing.TB, src string) string {
	t.Helper()
	dst := t.TempDir()
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

// TestRestartServesEveryBlock: blocks written, the tier closed and opened
// again: every block is byte-identical, the tenants' bytes are rebuilt,
// and an eviction of a block already on flash costs no write.
func TestRestartServesEveryBlock(t *testing.T) {
	for _, mode := range []string{DirectAuto, DirectOff} {
		t.Run(mode, func(t *testing.T) {
			cfg := testConfig(t)
			cfg.Direct = mode
			tr := openTier(t, cfg)
			bs := append(blocks(t, "acme", "m1", 30, 4096, 100_000, 300_000, 1),
				blocks(t, "beta", "m2", 10, 70_000)...)
			put(t, tr, bs...)
			closeTier(t, tr)
			var acme int64
			for _, b := range bs[:30] {
				acme += int64(len(b.Payload))
			}

			tr = openTier(t, cfg)
			mustRead(t, tr, bs...)
			for _, b := range bs {
				if !tr.Present(b.Digest, b.Key) {
					t.Fatalf("block %s/%d not present", b.ID.Tenant, b.ID.Position)
				}
			}
			if got := stat(t, tr, "flash_blocks"); got != uint64(len(bs)) {
				t.Fatalf("flash_blocks = %d, want %d", got, len(bs))
			}
			if got := stat(t, tr, "tenant_flash_bytes"); got != uint64(acme) {
				t.Fatalf("tenant_flash_bytes = %d, want %d", got, acme)
			}
			// The namespace's tenant is learned from the records: an
			// eviction needs no Stored, and one of a block on flash is
			// taken without a write.
			b := bs[3]
			if !tr.Evicted(b.Digest, b.Key, b.ID.Parent, 4, b.Payload) {
				t.Fatal("eviction of a block on flash declined")
			}
			more := blocks(t, "acme", "m1", 31, 4096)[30]
			if !tr.Evicted(more.Digest, more.Key, more.ID.Parent, 4, more.Payload) {
				t.Fatal("eviction in a namespace learned from records declined")
			}
			flush(t, tr)
			if stat(t, tr, "flash_already_held") != 1 || stat(t, tr, "flash_blocks_written") != 1 {
				t.Fatalf("already held %d, written %d", stat(t, tr, "flash_already_held"), stat(t, tr, "flash_blocks_written"))
			}
			closeTier(t, tr)
		})
	}
}

// TestRestartAfterKill: what Flush returned for survives a kill -9 (the
// files copied while the tier runs); the highest segment is not appended
// to after the restart.
func TestRestartAfterKill(t *testing.T) {
	cfg := testConfig(t)
	tr := openTier(t, cfg)
	bs := blocks(t, "acme", "m1", 12, 200_000)
	put(t, tr, bs...)
	flush(t, tr)
	if _, err := tr.Delete(context.Background(), bs[4].ID.Namespace, bs[4].Digest, bs[4].Key); err != nil {
		t.Fatal(err)
	}
	flush(t, tr)
	high, _ := location(t, tr, bs[11])

	cfg.Dir = copyDir(t, cfg.Dir)
	tr2 := openTier(t, cfg)
	mustRead(t, tr2, bs[:4]...)
	mustRead(t, tr2, bs[5:]...)
	mustMiss(t, tr2, bs[4])
	extra := blocks(t, "acme", "m1", 13, 200_000)[12]
	put(t, tr2, extra)
	flush(t, tr2)
	if s, _ := location(t, tr2, extra); s.seq <= high.seq {
		t.Fatalf("wrote into segment %d after a restart; the highest was %d", s.seq, high.seq)
	}
}

// TestTombstonesSurviveARestart: a deleted block, and an opaque-key block
// stored again (its old value dropped), do not come back.
func TestTombstonesSurviveARestart(t *testing.T) {
	ctx := context.Background()
	cfg := testConfig(t)
	tr := openTier(t, cfg)
	bs := blocks(t, "acme", "m1", 6, 50_000)
	put(t, tr, bs...)
	op := opaqueBlock(t, "acme", "chunk-1", 9000, 1)
	put(t, tr, op)
	flush(t, tr)
	for _, i := range []int{1, 4} {
		if known, err := tr.Delete(ctx, bs[i].ID.Namespace, bs[i].Digest, bs[i].Key); !known || err != nil {
			t.Fatalf("delete %d: %v %v", i, known, err)
		}
	}
	// The opaque key is stored again with a new value: the old one goes.
	op2 := op
	op2.Payload = testfix.Payload(12000, 2)
	tr.Stored(op2.ID, op2.Digest, op2.Key)
	if tr.Present(op.Digest, op.Key) {
		t.Fatal("an opaque key stored again still present with its old value")
	}
	closeTier(t, tr)

	tr = openTier(t, cfg)
	mustMiss(t, tr, bs[1], bs[4], op)
	mustRead(t, tr, bs[0], bs[2], bs[3], bs[5])
	if !tr.Evicted(op2.Digest, op2.Key, op2.ID.Parent, 0, op2.Payload) {
		t.Fatal("new value declined")
	}
	closeTier(t, tr)

	tr = openTier(t, cfg)
	mustRead(t, tr, op2)
	mustMiss(t, tr, bs[1], bs[4])
	if stat(t, tr, "flash_blocks") != 5 {
		t.Fatalf("flash_blocks = %d", stat(t, tr, "flash_blocks"))
	}
}

// opaqueBlock is an opaque-key block of tenant.
func opaqueBlock(t testing.TB, tenant, name string, size int, seed byte) lowertest.Block {
	t.Helper()
	ns := testfix.RawNamespace(tenant, "m1")
	ns.Layout.BlockTokens = 4
	d, err := ns.Digest()
	if err != nil {
		t.Fatal(err)
	}
	id := identity.CacheIdentity{Namespace: ns, Opaque: []byte(name)}
	key, err := id.Key()
	if err != nil {
		t.Fatal(err)
	}
	return lowertest.Block{ID: id, Digest: d, Key: key, Payload: testfix.Payload(size, seed)}
}

// TestServedOnlyUnderItsOwnIdentity: a block's key under another
// namespace's digest is never present or served.
func TestServedOnlyUnderItsOwnIdentity(t *testing.T) {
	tr := openTier(t, testConfig(t))
	a := blocks(t, "acme", "m1", 4, 8192)
	b := blocks(t, "beta", "m1", 4, 8192)
	put(t, tr, a...)
	flush(t, tr)
	for i := range a {
		if tr.Present(b[i].Digest, a[i].Key) {
			t.Fatal("present under another digest")
		}
		if _, err := lower.ReadAll(context.Background(), tr, b[i].ID.Namespace, b[i].Digest, a[i].Key); err == nil {
			t.Fatal("served under another digest")
		}
	}
}
