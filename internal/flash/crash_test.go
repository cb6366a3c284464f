package flash

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/gpucache/gpucache/internal/lower"
	"github.com/gpucache/gpucache/internal/lower/lowertest"
)

// diskRecord is a record of a pristine segment file, as the model of the
// crash test sees it.
type diskRecord struct {
	seq      uint64
	off, end int64
	h        recHeader
}

// damage is one mutation of a segment file: cut it at cut (when cut >= 0)
// and/or flip the byte at flip (when flip >= 0).
type damage struct {
	name string
	cut  int64
	flip int64
	mask byte
}

// survivors applies the crash contract to the pristine records of one
// damaged file: which records a restart finds, and which of those hold a
// payload that no longer verifies.
func survivors(recs []diskRecord, d damage, size int64) (kept []diskRecord, bad map[int64]bool) {
	bad = map[int64]bool{}
	if d.cut >= 0 && d.cut < segHeaderSize {
		return nil, bad
	}
	if d.flip >= 0 && d.flip < shCRC+4 {
		return nil, bad // the segment header does not verify
	}
	for _, r := range recs {
		if d.cut >= 0 && r.end > d.cut {
			break // torn: this and the rest are gone
		}
		if d.flip >= r.off && d.flip < r.off+recHeaderUsed {
			break // a header that does not verify ends the scan
		}
		if d.flip >= r.off+recHeaderSize && d.flip < r.off+recHeaderSize+r.h.length {
			bad[r.off] = true
		}
		kept = append(kept, r)
	}
	return kept, bad
}

// TestCrashTornTailsAndFlippedBytes writes blocks and tombstones, then
// many times cuts a segment file at a random offset and/or flips a
// random byte (deterministic seed), opens the damaged copy and checks
// every block against a model of the crash contract: a record written
// whole that verifies is served byte for byte, every other one is
// absent, and nothing is served under another identity.
func TestCrashTornTailsAndFlippedBytes(t *testing.T) {
	ctx := context.Background()
	cfg := testConfig(t)
	cfg.SegmentBytes = 1 * mib
	tr := openTier(t, cfg)
	all := append(blocks(t, "acme", "m1", 30, 4096, 60_000, 150_000, 9000),
		blocks(t, "beta", "m22", 30, 30_000, 5000, 200_000)...)
	put(t, tr, all[:40]...)
	flush(t, tr)
	for _, i := range []int{2, 7, 33, 36} {
		if _, err := tr.Delete(ctx, all[i].ID.Namespace, all[i].Digest, all[i].Key); err != nil {
			t.Fatal(err)
		}
	}
	put(t, tr, all[40:]...)
	closeTier(t, tr)

	// The pristine files and their records, in log order.
	pristine := map[string][]byte{}
	recs := map[string][]diskRecord{}
	var names []string
	ents, _ := os.ReadDir(cfg.Dir)
	for _, e := range ents {
		seq, ok := parseSegName(e.Name())
		if !ok {
			continue
		}
		b, err := os.ReadFile(filepath.Join(cfg.Dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		pristine[e.Name()] = b
		names = append(names, e.Name())
		_, err = scanSegment(bytes.NewReader(b), int64(len(b)), seq, func(h *recHeader, off int64) {
			recs[e.Name()] = append(recs[e.Name()], diskRecord{seq: seq, off: off, end: off + h.extent(), h: *h})
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	slices.Sort(names)
	if len(names) < 4 {
		t.Fatalf("only %d segments", len(names))
	}

	rng := rand.New(rand.NewPCG(28, 4096))
	const trials = 150
	for trial := range trials {
		var ds []damage
		nd := 1 + trial%3/2 // one file, sometimes two
		for range nd {
			name := names[rng.IntN(len(names))]
			size := int64(len(pristine[name]))
			d := damage{name: name, cut: -1, flip: -1, mask: byte(1 + rng.IntN(255))}
			switch trial % 3 {
			case 0:
				d.cut = rng.Int64N(size + 1)
			case 1:
				d.flip = rng.Int64N(size)
			default:
				d.cut = rng.Int64N(size + 1)
				if d.cut > 0 {
					d.flip = rng.Int64N(d.cut)
				}
			}
			if trial%10 == 3 { // aim at a record header now and then
				rs := recs[name]
				r := rs[rng.IntN(len(rs))]
				d.cut, d.flip = -1, r.off+rng.Int64N(recHeaderUsed)
			}
			ds = append(ds, d)
		}
		t.Run(fmt.Sprint(trial), func(t *testing.T) {
			crashTrial(t, cfg, names, pristine, recs, ds, all)
		})
	}
}

func crashTrial(t *testing.T, cfg Config, names []string, pristine map[string][]byte, recs map[string][]diskRecord,
	ds []damage, all []lowertest.Block) {
	dir := t.TempDir()
	damaged := map[string]damage{}
	for _, d := range ds {
		damaged[d.name] = d
	}
	// The model: replay the surviving records in log order.
	want := map[blockID]bool{} // true: served; false: indexed but its payload is bad
	for _, name := range names {
		b := bytes.Clone(pristine[name])
		kept, bad := recs[name], map[int64]bool{}
		if d, ok := damaged[name]; ok {
			kept, bad = survivors(recs[name], d, int64(len(b)))
			if d.flip >= 0 && d.flip < int64(len(b)) {
				b[d.flip] ^= d.mask
			}
			if d.cut >= 0 {
				b = b[:d.cut]
			}
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
		for _, r := range kept {
			id := blockID{r.h.digest, r.h.key}
			if r.h.kind == kindTombstone {
				delete(want, id)
			} else {
				want[id] = !bad[r.off]
			}
		}
	}
	c := cfg
	c.Dir = dir
	tr, err := Open(c)
	if err != nil {
		t.Fatalf("open after damage %+v: %v", ds, err)
	}
	defer tr.Close()
	for _, b := range all {
		id := blockID{b.Digest, b.Key}
		served := read(t, tr, b) // fails the test on wrong bytes
		if ok := want[id]; served != ok {
			t.Fatalf("damage %+v: block %s/%d served %v, the contract says %v", ds, b.ID.Tenant, b.ID.Position, served, ok)
		}
	}
	// Nothing under another identity: each key under the other tenant's
	// namespace misses.
	other := map[string]lowertest.Block{"acme": all[len(all)-1], "beta": all[0]}
	for _, b := range all {
		o := other[b.ID.Tenant]
		if got, err := lower.ReadAll(context.Background(), tr, o.ID.Namespace, o.Digest, b.Key); err == nil {
			t.Fatalf("block %s/%d served %d bytes under another namespace", b.ID.Tenant, b.ID.Position, len(got))
		}
	}
}
