package lifecycle

import (
	"bytes"
	"context"
	"slices"
	"testing"
	"time"

	"github.com/gpucache/gpucache/api/identity"
	"github.com/gpucache/gpucache/internal/cold/pack"
	"github.com/gpucache/gpucache/internal/security/seal"
)

// A sealed manifest is never read unchecked: BackfillWith without a
// Verifier skips sealed packs; with a keyring it delivers only blocks whose
// seal verifies and skips unsealed, forged and expired ones.
func TestBackfillSealPolicy(t *testing.T) {
	ctx := context.Background()
	now := t0
	clk := func() time.Time { return now }
	kr := seal.New(clk)
	if err := kr.Add("k1", bytes.Repeat([]byte{1}, 32), t0); err != nil {
		t.Fatal(err)
	}
	other := seal.New(clk)
	if err := other.Add("k1", bytes.Repeat([]byte{2}, 32), t0); err != nil {
		t.Fatal(err)
	}
	ns := testNamespace("acme")
	nsd := digest(t, ns)
	build := func(seed uint32, s pack.Sealer) *pack.Pack {
		toks := make([]uint32, 2*int(ns.Layout.BlockTokens))
		for i := range toks {
			toks[i] = seed + uint32(i)
		}
		ids, err := identity.Identities(ns, toks)
		if err != nil {
			t.Fatal(err)
		}
		blocks := make([]pack.Block, len(ids))
		for i, id := range ids {
			blocks[i] = pack.Block{Identity: id, Payload: bytes.Repeat([]byte{byte(seed + uint32(i))}, 64)}
		}
		p, err := pack.BuildWith(ns, blocks, pack.Options{Sealer: s})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	st := newFake()
	sealed, unsealed, forged := build(100, kr), build(200, nil), build(300, other)
	for _, p := range []*pack.Pack{sealed, unsealed, forged} {
		st.publish(t, p)
	}
	keysOf := func(p *pack.Pack) []string {
		var ks []string
		for _, o := range p.Pointers {
			ks = append(ks, o.Key)
		}
		return ks
	}
	run := func(v pack.SealVerifier) ([]string, BackfillReport) {
		t.Helper()
		var got []string
		rep, err := BackfillWith(ctx, st, nsd, 1<<20, BackfillOptions{Verifier: v}, func(r pack.Range, pl []byte) error {
			got = append(got, pack.PointerKey(nsd, r.Key))
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		slices.Sort(got)
		return got, rep
	}
	sorted := func(ks []string) []string { slices.Sort(ks); return ks }

	got, rep := run(nil)
	if !slices.Equal(got, sorted(keysOf(unsealed))) || rep.Corrupt != 4 || rep.SealRejected != 4 {
		t.Fatalf("no keyring: %v %+v", got, rep)
	}
	var got2 []string
	rep2, err := BackfillWith(ctx, st, nsd, 1<<20, BackfillOptions{}, func(r pack.Range, _ []byte) error {
		got2 = append(got2, pack.PointerKey(nsd, r.Key))
		return nil
	})
	if err != nil || !slices.Equal(sorted(got2), got) || rep2 != rep {
		t.Fatalf("BackfillWith without options differs from a nil Verifier: %v %+v", err, rep2)
	}
	got, rep = run(kr)
	if !slices.Equal(got, sorted(keysOf(sealed))) || rep.Corrupt != 4 || rep.SealRejected != 4 {
		t.Fatalf("keyring: %v %+v", got, rep)
	}
	// k1 expires: nothing verifies.
	if err := kr.Rotate("k2", bytes.Repeat([]byte{3}, 32), time.Minute); err != nil {
		t.Fatal(err)
	}
	now = now.Add(time.Minute)
	got, rep = run(kr)
	if len(got) != 0 || rep.SealRejected != 6 {
		t.Fatalf("expired: %v %+v", got, rep)
	}
}
