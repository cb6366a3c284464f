package placement

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/gpucache/gpucache/api/identity"
)

var update = flag.Bool("update", false, "rewrite testdata/placement_golden.json")

const gib = 1 << 30

func mem(id, domain string, capGiB uint64) Member {
	return Member{ID: MemberID(id), Addr: id + ":7400", FaultDomain: domain, ProtoVersion: 1, CapacityBytes: capGiB * gib}
}

func mustView(t testing.TB, epoch uint64, ms ...Member) View {
	t.Helper()
	v, err := NewView(epoch, ms)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func equalMembers(n int, domains int) []Member {
	ms := make([]Member, n)
	for i := range ms {
		ms[i] = mem(fmt.Sprintf("node-%02d", i), fmt.Sprintf("rack-%d", i%domains), 64)
	}
	return ms
}

func randomKeys(n int, seed uint64) []identity.BlockKey {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	keys := make([]identity.BlockKey, n)
	for i := range keys {
		for j := 0; j < 32; j += 8 {
			v := r.Uint64()
			for b := 0; b < 8; b++ {
				keys[i][j+b] = byte(v >> (8 * b))
			}
		}
	}
	return keys
}

// --- golden vectors -------------------------------------------------------

type goldenMember struct {
	ID            string `json:"id"`
	Addr          string `json:"addr"`
	FaultDomain   string `json:"fault_domain"`
	ProtoVersion  uint8  `json:"proto_version"`
	CapacityBytes uint64 `json:"capacity_bytes"`
	Draining      bool   `json:"draining"`
	Seed          string `json:"seed_fnv1a64"`
}

type goldenCase struct {
	Key    string            `json:"key"`
	Word   string            `json:"key_word_le64"`
	Hashes map[string]string `json:"mix64_k_xor_seed"`
	Owner  string            `json:"owner"`
}

type goldenFile struct {
	Contract string         `json:"contract"`
	Epoch    uint64         `json:"epoch"`
	Members  []goldenMember `json:"members"`
	Cases    []goldenCase   `json:"cases"`
}

func goldenView(t testing.TB) View {
	d := mem("dpu-c", "zone-b", 128)
	d.Draining = true
	return mustView(t, 7,
		mem("node-a", "zone-a", 64), mem("node-b", "zone-a", 128), mem("gpu-host-1", "zone-b", 256),
		d, mem("x", "zone-c", 32), mem("node-é", "zone-c", 64))
}

func computeGolden(t testing.TB) goldenFile {
	v := goldenView(t)
	g := goldenFile{
		Contract: "weighted rendezvous: seed=FNV-1a64(id); k=LE64(key[0:8]); h=splitmix64fin(k^seed); u=(float64(h>>12)+0.5)/2^52; score=-(capacity/2^30)/ln(u); owner=max score among non-draining, ties to smaller id",
		Epoch:    v.Epoch(),
	}
	for _, m := range v.Members() {
		g.Members = append(g.Members, goldenMember{string(m.ID), m.Addr, m.FaultDomain, m.ProtoVersion, m.CapacityBytes, m.Draining,
			fmt.Sprintf("%016x", MemberSeed(m.ID))})
	}
	for i := 0; i < 32; i++ {
		key := identity.BlockKey(sha256.Sum256([]byte(fmt.Sprintf("gpucache-placement-golden-%d", i))))
		c := goldenCase{Key: hex.EncodeToString(key[:]), Word: fmt.Sprintf("%016x", keyWord(key)), Hashes: map[string]string{}}
		for _, m := range v.Members() {
			c.Hashes[string(m.ID)] = fmt.Sprintf("%016x", mix64(keyWord(key)^MemberSeed(m.ID)))
		}
		o, _ := Owner(v, key)
		c.Owner = string(o.ID)
		g.Cases = append(g.Cases, c)
	}
	return g
}

func TestPlacementGolden(t *testing.T) {
	path := filepath.Join("testdata", "placement_golden.json")
	got := computeGolden(t)
	if *update {
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		enc.SetIndent("", "  ")
		if err := enc.Encode(got); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var want goldenFile
	if err := json.Unmarshal(b, &want); err != nil {
		t.Fatal(err)
	}
	// Rebuild the view from the file, so the file alone specifies the vectors.
	var ms []Member
	for _, gm := range want.Members {
		ms = append(ms, Member{MemberID(gm.ID), gm.Addr, gm.FaultDomain, gm.ProtoVersion, gm.CapacityBytes, gm.Draining})
		if s := fmt.Sprintf("%016x", MemberSeed(MemberID(gm.ID))); s != gm.Seed {
			t.Errorf("seed(%q) = %s, golden %s", gm.ID, s, gm.Seed)
		}
	}
	v := mustView(t, want.Epoch, ms...)
	if len(want.Cases) != 32 {
		t.Fatalf("golden has %d cases", len(want.Cases))
	}
	owners := map[string]int{}
	for _, c := range want.Cases {
		kb, err := hex.DecodeString(c.Key)
		if err != nil || len(kb) != 32 {
			t.Fatalf("bad key %q", c.Key)
		}
		key := identity.BlockKey(kb)
		if w := fmt.Sprintf("%016x", keyWord(key)); w != c.Word {
			t.Errorf("key word %s, golden %s", w, c.Word)
		}
		for id, h := range c.Hashes {
			if got := fmt.Sprintf("%016x", mix64(keyWord(key)^MemberSeed(MemberID(id)))); got != h {
				t.Errorf("key %s member %s: hash %s, golden %s", c.Key[:8], id, got, h)
			}
		}
		o, ok := Owner(v, key)
		if !ok || string(o.ID) != c.Owner {
			t.Errorf("key %s: owner %q, golden %q", c.Key[:8], o.ID, c.Owner)
		}
		owners[c.Owner]++
	}
	if owners["dpu-c"] != 0 {
		t.Errorf("draining member owns %d golden keys", owners["dpu-c"])
	}
	if len(owners) < 3 {
		t.Errorf("golden vectors exercise only %d owners: %v", len(owners), owners)
	}
}

func TestHashPrimitives(t *testing.T) {
	if s := MemberSeed(""); s != 0xcbf29ce484222325 {
		t.Fatalf("FNV-1a of empty = %x", s)
	}
	if s := MemberSeed("a"); s != 0xaf63dc4c8601ec8c { // published FNV-1a 64 vector
		t.Fatalf("FNV-1a of \"a\" = %x", s)
	}
	// SplitMix64: the first output for state 0 is mix64(0x9e3779b97f4a7c15).
	if h := mix64(0x9e3779b97f4a7c15); h != 0xe220a8397b1dcdaf {
		t.Fatalf("mix64 = %x", h)
	}
	// u stays strictly inside (0,1) at the extremes, so scores are finite.
	for _, h := range []uint64{0, math.MaxUint64} {
		u := (float64(h>>12) + 0.5) * 0x1p-52
		if !(u > 0 && u < 1) {
			t.Fatalf("u(%x) = %v", h, u)
		}
	}
}

// --- balance ---------------------------------------------------------------

func checkBalance(t *testing.T, v View, keys []identity.BlockKey) {
	t.Helper()
	counts := map[MemberID]int{}
	for _, k := range keys {
		o, _ := Owner(v, k)
		counts[o.ID]++
	}
	var total float64
	for _, m := range v.Members() {
		total += m.Weight()
	}
	for _, m := range v.Members() {
		want := m.Weight() / total
		got := float64(counts[m.ID]) / float64(len(keys))
		if math.Abs(got-want) > 0.03*want {
			t.Errorf("%s: share %.4f, weight share %.4f (off %.2f%%)", m.ID, got, want, 100*(got-want)/want)
		}
	}
}

func TestBalance(t *testing.T) {
	keys := randomKeys(100_000, 1)
	t.Run("equal8", func(t *testing.T) { checkBalance(t, mustView(t, 1, equalMembers(8, 4)...), keys) })
	t.Run("equal3", func(t *testing.T) { checkBalance(t, mustView(t, 1, equalMembers(3, 3)...), keys) })
	t.Run("unequal", func(t *testing.T) {
		checkBalance(t, mustView(t, 1, mem("a", "r1", 64), mem("b", "r1", 64), mem("c", "r2", 128), mem("d", "r3", 256)), keys)
	})
	t.Run("unequal5", func(t *testing.T) {
		checkBalance(t, mustView(t, 1, mem("a", "r1", 100), mem("b", "r2", 200), mem("c", "r3", 300), mem("d", "r1", 400), mem("e", "r2", 500)), keys)
	})
}

// --- minimal disruption -----------------------------------------------------

func owners(v View, keys []identity.BlockKey) []MemberID {
	out := make([]MemberID, len(keys))
	for i, k := range keys {
		o, _ := Owner(v, k)
		out[i] = o.ID
	}
	return out
}

func TestMinimalDisruption(t *testing.T) {
	keys := randomKeys(100_000, 2)
	for _, tc := range []struct {
		name  string
		base  []Member
		added Member
	}{
		{"equal", equalMembers(10, 3), mem("node-new", "rack-9", 64)},
		{"weighted", []Member{mem("a", "r1", 64), mem("b", "r2", 128), mem("c", "r3", 256)}, mem("z", "r4", 192)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := mustView(t, 1, tc.base...)
			after := mustView(t, 2, append(slices.Clone(tc.base), tc.added)...)
			ob, oa := owners(before, keys), owners(after, keys)
			moved := 0
			for i := range keys {
				if ob[i] != oa[i] {
					moved++
					if oa[i] != tc.added.ID {
						t.Fatalf("key %d moved %s -> %s, not to the new member", i, ob[i], oa[i])
					}
				}
			}
			var total float64
			for _, m := range tc.base {
				total += m.Weight()
			}
			want := tc.added.Weight() / (total + tc.added.Weight()) // 1/(n+1) for equal weights
			got := float64(moved) / float64(len(keys))
			if math.Abs(got-want) > 0.03*want {
				t.Errorf("moved %.4f of keys, want ~%.4f", got, want)
			}

			// Removing the member again restores every owner; removing (or
			// draining) an old member moves only its keys.
			if !slices.Equal(owners(before, keys), ob) {
				t.Fatal("placement not deterministic")
			}
			victim := tc.base[0]
			rest := mustView(t, 3, tc.base[1:]...)
			drained := slices.Clone(tc.base)
			drained[0].Draining = true
			dv := mustView(t, 3, drained...)
			or, od := owners(rest, keys), owners(dv, keys)
			for i := range keys {
				if ob[i] != victim.ID && (or[i] != ob[i] || od[i] != ob[i]) {
					t.Fatalf("key %d owned by %s moved when %s left", i, ob[i], victim.ID)
				}
				if or[i] == victim.ID || od[i] == victim.ID {
					t.Fatalf("key %d still owned by removed/draining %s", i, victim.ID)
				}
				if or[i] != od[i] {
					t.Fatalf("key %d: leave and drain disagree (%s vs %s)", i, or[i], od[i])
				}
			}
		})
	}
}

// --- Route ------------------------------------------------------------------

func TestRoute(t *testing.T) {
	v := mustView(t, 1, equalMembers(16, 4)...)
	keys := randomKeys(1024, 4)
	r := Route(v, keys)
	seen := make([]bool, len(keys))
	for id, idx := range r {
		if !slices.IsSorted(idx) {
			t.Fatalf("%s: indexes not ascending", id)
		}
		for _, i := range idx {
			if seen[i] {
				t.Fatalf("key %d routed twice", i)
			}
			seen[i] = true
			if o, _ := Owner(v, keys[i]); o.ID != id {
				t.Fatalf("key %d routed to %s, owner %s", i, id, o.ID)
			}
		}
	}
	if slices.Contains(seen, false) {
		t.Fatal("a key was not routed")
	}
	if len(Route(View{}, keys)) != 0 {
		t.Fatal("empty view routes keys")
	}
	if _, ok := Owner(View{}, keys[0]); ok {
		t.Fatal("empty view has an owner")
	}
	allDrain := mustView(t, 1, Member{ID: "a", Addr: "a:1", FaultDomain: "d", CapacityBytes: 1, Draining: true})
	if _, ok := Owner(allDrain, keys[0]); ok || len(Route(allDrain, keys)) != 0 {
		t.Fatal("an all-draining view owns keys")
	}
}

// --- benchmarks ---------------------------------------------------------------

func BenchmarkOwner(b *testing.B) {
	for _, n := range []int{3, 16, 64} {
		b.Run(fmt.Sprintf("members=%d", n), func(b *testing.B) {
			ms := equalMembers(n, 4)
			for i := range ms {
				ms[i].CapacityBytes = uint64(32+i) * gib // weighted
			}
			v := mustView(b, 1, ms...)
			keys := randomKeys(1024, 5)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				Owner(v, keys[i&1023])
			}
		})
	}
}

func BenchmarkRoute(b *testing.B) {
	for _, n := range []int{3, 16, 64} {
		b.Run(fmt.Sprintf("members=%d/keys=1024", n), func(b *testing.B) {
			v := mustView(b, 1, equalMembers(n, 4)...)
			keys := randomKeys(1024, 6)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				Route(v, keys)
			}
		})
	}
}
