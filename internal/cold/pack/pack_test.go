package pack

import (
	"bytes"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/gpucache/gpucache/api/identity"
	"github.com/gpucache/gpucache/internal/cold"
)

func TestBuildRoundTrip(t *testing.T) {
	ns := testNamespace("acme")
	nsd, _ := ns.Digest()
	ids := chain(t, ns, 5, 100)
	blocks := blocksOf(ids, 1000)
	p := mustBuild(t, ns, blocks)

	again := mustBuild(t, ns, blocks)
	if !bytes.Equal(p.Object.Body, again.Object.Body) || !bytes.Equal(p.Manifest.Body, again.Manifest.Body) || p.Manifest.Key != again.Manifest.Key {
		t.Fatal("Build is not deterministic")
	}

	if gotNS, sum, err := ParsePackKey(p.Object.Key); err != nil || gotNS != nsd || sum != Sum(p.Object.Body) {
		t.Fatalf("pack key %q: ns %v sum %v err %v", p.Object.Key, gotNS, sum, err)
	}
	m, err := OpenManifest(p.Manifest.Key, p.Manifest.Body)
	if err != nil {
		t.Fatal(err)
	}
	if m.Namespace != ns || m.PackKey != p.Object.Key || m.PackSize != uint64(len(p.Object.Body)) {
		t.Fatalf("manifest header %+v", m)
	}
	if d, _ := m.NamespaceDigest(); d != nsd {
		t.Fatalf("NamespaceDigest %v", d)
	}
	h, err := DecodeHeader(p.Object.Body)
	if err != nil || h.Namespace != nsd || h.Blocks != 5 || h.PayloadLen != uint64(len(p.Object.Body)-HeaderLen) {
		t.Fatalf("header %+v, %v", h, err)
	}
	if !bytes.Equal(h.Encode(), p.Object.Body[:HeaderLen]) {
		t.Fatal("header does not re-encode")
	}
	for i, b := range blocks {
		k, _ := b.Identity.Key()
		r, ok := m.Find(k)
		if !ok {
			t.Fatalf("block %d not found", i)
		}
		c, _ := b.Identity.Canonical()
		if !bytes.Equal(r.Canonical, c) {
			t.Fatalf("block %d canonical identity differs", i)
		}
		if !slices.Equal(r.Identity.Tokens, b.Identity.Tokens) || r.Identity.Position != b.Identity.Position {
			t.Fatalf("block %d identity differs", i)
		}
		if got := p.Object.Body[r.Offset : r.Offset+r.Length]; !bytes.Equal(got, b.Payload) {
			t.Fatalf("block %d payload differs", i)
		}
		ptr, err := DecodePointer(p.Pointers[i].Body)
		if err != nil {
			t.Fatal(err)
		}
		if ptr.Key() != p.Pointers[i].Key || ptr.Block != k || ptr.ManifestKey != p.Manifest.Key || ptr.Manifest != Sum(p.Manifest.Body) || ptr.ManifestSize != uint64(len(p.Manifest.Body)) {
			t.Fatalf("pointer %d: %+v", i, ptr)
		}
		if again, _ := ptr.Encode(); !bytes.Equal(again, p.Pointers[i].Body) {
			t.Fatalf("pointer %d does not re-encode", i)
		}
	}
	if _, ok := m.Find(identity.BlockKey{1}); ok {
		t.Fatal("found a key that is not in the pack")
	}
	// A manifest built by hand (no decode index) finds by linear search.
	hand := &Manifest{Ranges: m.Ranges}
	if _, ok := hand.Find(m.Ranges[3].Key); !ok {
		t.Fatal("linear Find failed")
	}
	enc, err := m.Encode()
	if err != nil || !bytes.Equal(enc, p.Manifest.Body) {
		t.Fatalf("decoded manifest does not re-encode: %v", err)
	}
	// Build copied the payloads.
	blocks[0].Payload[0] ^= 0xff
	if err := Verify(p); err != nil {
		t.Fatalf("pack aliases the caller's payload: %v", err)
	}
	if got, want := p.Size(), len(p.Object.Body)+len(p.Manifest.Body)+5*PointerLen; got != want {
		t.Fatalf("Size %d, want %d", got, want)
	}
}

func TestBuildRejects(t *testing.T) {
	ns := testNamespace("acme")
	ids := chain(t, ns, 3, 1)
	other := chain(t, testNamespace("globex"), 1, 1)
	bad := ids[1]
	bad.ValidLength = 0
	cases := map[string][]Block{
		"no blocks":         nil,
		"empty payload":     {{Identity: ids[0], Payload: nil}},
		"duplicate key":     {{Identity: ids[0], Payload: []byte{1}}, {Identity: ids[0], Payload: []byte{2}}},
		"another namespace": {{Identity: ids[0], Payload: []byte{1}}, {Identity: other[0], Payload: []byte{2}}},
		"invalid identity":  {{Identity: bad, Payload: []byte{1}}},
	}
	for _, name := range slices.Sorted(maps.Keys(cases)) {
		t.Run(name, func(t *testing.T) {
			if _, err := Build(ns, cases[name]); !errors.Is(err, ErrInvalid) {
				t.Fatalf("err %v, want ErrInvalid", err)
			}
		})
	}
	if _, err := Build(identity.Namespace{}, blocksOf(ids, 8)); !errors.Is(err, ErrInvalid) {
		t.Fatalf("invalid namespace: %v", err)
	}
	many := make([]Block, MaxRanges+1)
	if _, err := Build(ns, many); !errors.Is(err, ErrInvalid) {
		t.Fatalf("too many blocks: %v", err)
	}
}

// memObjects is the smallest possible object store: enough to replay write
// orders. Put with ifNoneMatch keeps the first bytes, like cold.Store.
type memObjects map[string][]byte

func (s memObjects) put(o Object, ifNoneMatch bool) {
	if _, ok := s[o.Key]; ok && ifNoneMatch {
		return
	}
	s[o.Key] = append([]byte(nil), o.Body...)
}

func (s memObjects) publish(p *Pack) {
	s.put(p.Object, true)
	s.put(p.Manifest, true)
	for _, o := range p.Pointers {
		s.put(o, false)
	}
}

// Seed row "Retry ordering under one namespace": distinct packs use distinct
// content-addressed keys, and a delayed older retry cannot overwrite the
// later pack.
func TestDistinctPacksHaveDistinctKeys(t *testing.T) {
	ns := testNamespace("acme")
	ids := chain(t, ns, 6, 1)

	// Same blocks, same bytes: same keys (a retry is idempotent).
	a1 := mustBuild(t, ns, blocksOf(ids[:3], 64))
	a2 := mustBuild(t, ns, blocksOf(ids[:3], 64))
	if a1.Object.Key != a2.Object.Key || a1.Manifest.Key != a2.Manifest.Key {
		t.Fatal("identical packs got different keys")
	}

	// Distinct packs of one namespace: all keys distinct.
	older := mustBuild(t, ns, blocksOf(ids[:3], 64))
	later := mustBuild(t, ns, blocksOf(ids[3:], 64))
	// The same blocks recomputed with different bytes: also distinct.
	recomputed := blocksOf(ids[:3], 64)
	recomputed[1].Payload[0] ^= 1
	laterSame := mustBuild(t, ns, recomputed)
	// One more block changes the manifest even where payloads repeat.
	bigger := mustBuild(t, ns, blocksOf(ids[:4], 64))
	keys := map[string]string{}
	for name, p := range map[string]*Pack{"older": older, "later": later, "laterSame": laterSame, "bigger": bigger} {
		for _, k := range []string{p.Object.Key, p.Manifest.Key} {
			if prev, dup := keys[k]; dup {
				t.Fatalf("%s and %s share key %s", prev, name, k)
			}
			keys[k] = name
		}
	}

	// Equal bytes are one object whatever they hold: the same payloads under
	// other identities share the pack object (rewriting it changes nothing)
	// but not the manifest, which binds the identities.
	relabelled := blocksOf(ids[3:], 64)
	for i := range relabelled {
		relabelled[i].Payload = blocksOf(ids[:3], 64)[i].Payload
	}
	twin := mustBuild(t, ns, relabelled)
	if twin.Object.Key != older.Object.Key || twin.Manifest.Key == older.Manifest.Key {
		t.Fatal("content addressing: equal objects must share a key, distinct manifests must not")
	}

	// Interleave: the later packs publish, then a delayed retry of the older
	// pack replays its whole write sequence.
	s := memObjects{}
	s.publish(later)
	s.publish(laterSame)
	before := maps.Clone(s)
	s.publish(older)
	for _, p := range []*Pack{later, laterSame} {
		for _, o := range []Object{p.Object, p.Manifest} {
			if !bytes.Equal(s[o.Key], before[o.Key]) {
				t.Fatalf("delayed retry changed %s", o.Key)
			}
		}
	}
	// Whatever the pointers now name, each manifest still binds its blocks to
	// their own checksummed ranges.
	for _, p := range []*Pack{older, later, laterSame} {
		m, err := OpenManifest(p.Manifest.Key, s[p.Manifest.Key])
		if err != nil {
			t.Fatal(err)
		}
		obj := s[m.PackKey]
		for _, r := range m.Ranges {
			if Sum(obj[r.Offset:r.Offset+r.Length]) != r.Sum {
				t.Fatalf("pack %s range %s no longer matches", m.PackKey, r.Key)
			}
		}
	}
}

// Seed row "Forged or mismatched queued pack": an inconsistent key,
// manifest/object pairing, identity digest, range or payload checksum is
// rejected before any store write.
func TestForgedPackRejectedBeforeWrite(t *testing.T) {
	ns := testNamespace("acme")
	nsd, _ := ns.Digest()
	ids := chain(t, ns, 3, 1)
	good := mustBuild(t, ns, blocksOf(ids, 100))
	other := mustBuild(t, ns, blocksOf(chain(t, ns, 3, 500), 100))
	evil := mustBuild(t, testNamespace("evil"), blocksOf(chain(t, testNamespace("evil"), 3, 1), 100))

	// forge returns a consistent copy (manifest decoded for editing) that a
	// case then breaks.
	forge := func(edit func(p *Pack, m *Manifest, obj []byte) []byte) *Pack {
		p := clonePack(good)
		m := mustDecode(t, p.Manifest.Body)
		obj := edit(p, m, p.Object.Body)
		reseal(t, p, m, obj)
		return p
	}
	cases := map[string]func() *Pack{
		"nil pack": func() *Pack { return nil },
		"object key is not its digest": func() *Pack {
			p := clonePack(good)
			p.Object.Key = PackKey(nsd, Sum([]byte("something else")))
			return p
		},
		"object key of another namespace": func() *Pack {
			p := clonePack(good)
			evilNS, _ := testNamespace("evil").Digest()
			p.Object.Key = PackKey(evilNS, Sum(p.Object.Body))
			return p
		},
		"manifest key is not its digest": func() *Pack {
			p := clonePack(good)
			p.Manifest.Key = other.Manifest.Key
			return p
		},
		"manifest paired with another object": func() *Pack {
			p := clonePack(good)
			p.Object = other.Object
			return p
		},
		"object paired with another manifest": func() *Pack {
			p := clonePack(good)
			p.Manifest = other.Manifest
			return p
		},
		"pack of another tenant": func() *Pack {
			p := clonePack(evil)
			p.Namespace = ns
			return p
		},
		"payload byte flipped (keys resealed)": func() *Pack {
			return forge(func(_ *Pack, _ *Manifest, obj []byte) []byte {
				obj[HeaderLen+150] ^= 1
				return obj
			})
		},
		"payload byte flipped": func() *Pack {
			p := clonePack(good)
			p.Object.Body[HeaderLen+5] ^= 1
			return p
		},
		"range key is not KeyFor of its identity": func() *Pack {
			return forge(func(_ *Pack, m *Manifest, obj []byte) []byte {
				m.Ranges[1].Key = m.Ranges[2].Key
				return obj
			})
		},
		"identity of another tenant": func() *Pack {
			return forge(func(_ *Pack, m *Manifest, obj []byte) []byte {
				e := chain(t, testNamespace("evil"), 1, 1)[0]
				m.Ranges[0].Identity, m.Ranges[0].Canonical = e, nil
				m.Ranges[0].Key, _ = e.Key()
				return obj
			})
		},
		"overlapping ranges": func() *Pack {
			return forge(func(_ *Pack, m *Manifest, obj []byte) []byte {
				m.Ranges[1].Offset -= 10
				m.Ranges[1].Length += 10
				return obj
			})
		},
		"range past the object": func() *Pack {
			return forge(func(_ *Pack, m *Manifest, obj []byte) []byte {
				m.Ranges[2].Length++
				return obj
			})
		},
		"header block count": func() *Pack {
			return forge(func(_ *Pack, _ *Manifest, obj []byte) []byte {
				obj[40]++
				return obj
			})
		},
		"header namespace": func() *Pack {
			return forge(func(_ *Pack, _ *Manifest, obj []byte) []byte {
				obj[8] ^= 1
				return obj
			})
		},
		"header magic": func() *Pack {
			return forge(func(_ *Pack, _ *Manifest, obj []byte) []byte {
				obj[0] = 'X'
				return obj
			})
		},
		"manifest pack size": func() *Pack {
			p := forge(func(_ *Pack, _ *Manifest, obj []byte) []byte { return obj })
			m := mustDecode(t, p.Manifest.Body)
			p.Object.Body = append(p.Object.Body, 0)
			p.Object.Key = PackKey(nsd, Sum(p.Object.Body))
			m.PackKey = p.Object.Key
			m.PackDigest = Sum(p.Object.Body)
			mb, _ := m.Encode()
			p.Manifest = Object{Key: ManifestKey(nsd, Sum(mb)), Body: mb}
			return p
		},
		"missing pointer": func() *Pack {
			p := clonePack(good)
			p.Pointers = p.Pointers[:2]
			return p
		},
		"extra pointer": func() *Pack {
			p := clonePack(good)
			p.Pointers = append(p.Pointers, p.Pointers[0])
			return p
		},
		"pointer naming another manifest": func() *Pack {
			p := clonePack(good)
			p.Pointers[1] = Object{Key: p.Pointers[1].Key, Body: other.Pointers[1].Body}
			return p
		},
		"pointer under another block's key": func() *Pack {
			p := clonePack(good)
			p.Pointers[0].Key, p.Pointers[1].Key = p.Pointers[1].Key, p.Pointers[0].Key
			return p
		},
		"pointer with a wrong manifest size": func() *Pack {
			p := clonePack(good)
			ptr, _ := DecodePointer(p.Pointers[0].Body)
			ptr.ManifestSize++
			p.Pointers[0].Body, _ = ptr.Encode()
			return p
		},
		"pointer body garbage": func() *Pack {
			p := clonePack(good)
			p.Pointers[2].Body = []byte("GCPT")
			return p
		},
		"empty manifest": func() *Pack {
			p := clonePack(good)
			p.Manifest.Body = nil
			return p
		},
		"invalid namespace": func() *Pack {
			p := clonePack(good)
			p.Namespace.Tenant = ""
			return p
		},
	}
	// why pins the check that catches each forgery.
	why := map[string]string{
		"nil pack":                                "nil pack",
		"object key is not its digest":            "object key",
		"object key of another namespace":         "object key",
		"manifest key is not its digest":          "manifest key",
		"manifest paired with another object":     "manifest names pack",
		"object paired with another manifest":     "manifest names pack",
		"pack of another tenant":                  "manifest namespace is not the pack's namespace",
		"payload byte flipped (keys resealed)":    "range 1: payload checksum mismatch",
		"payload byte flipped":                    "object key",
		"range key is not KeyFor of its identity": "is not the key of its identity",
		"identity of another tenant":              "range 0: identity of namespace",
		"overlapping ranges":                      "overlaps",
		"range past the object":                   "past the pack",
		"header block count":                      "does not match the manifest",
		"header namespace":                        "does not match the manifest",
		"header magic":                            "pack: bad magic",
		"manifest pack size":                      "manifest pack size",
		"missing pointer":                         "2 pointers for 3 ranges",
		"extra pointer":                           "4 pointers for 3 ranges",
		"pointer naming another manifest":         "pointer 1 does not name",
		"pointer under another block's key":       "pointer 0 key",
		"pointer body garbage":                    "pointer is 4 bytes",
		"pointer with a wrong manifest size":      "pointer 0 does not name",
		"empty manifest":                          "truncated in magic",
		"invalid namespace":                       "field tenant is empty",
	}
	if len(why) != len(cases) {
		t.Fatalf("%d reasons for %d cases", len(why), len(cases))
	}
	for _, name := range slices.Sorted(maps.Keys(cases)) {
		t.Run(name, func(t *testing.T) {
			p := cases[name]()
			err := Verify(p)
			if !errors.Is(err, ErrRejected) || !errors.Is(err, cold.ErrCorrupt) {
				t.Fatalf("Verify = %v, want ErrRejected and ErrCorrupt", err)
			}
			if !strings.Contains(err.Error(), why[name]) {
				t.Fatalf("Verify = %v, want the reason %q", err, why[name])
			}
		})
	}
	if err := Verify(good); err != nil {
		t.Fatalf("the original was damaged: %v", err)
	}
}

// TestSumsChecked: Build names each object's digest (Object.Sum). Verify
// ignores it unless the caller says it checked it (SumsChecked): a body
// changed after Build is caught by its own hash. With SumsChecked a set
// Sum replaces the hash, and one that disagrees with the key is still
// rejected.
func TestSumsChecked(t *testing.T) {
	ns := testNamespace("acme")
	p := mustBuild(t, ns, blocksOf(chain(t, ns, 3, 1), 100))
	if p.Object.Sum != Sum(p.Object.Body) || p.Manifest.Sum != Sum(p.Manifest.Body) {
		t.Fatal("Build did not name the objects' digests")
	}
	checked := clonePack(p)
	checked.Object.Sum, checked.Manifest.Sum = p.Object.Sum, p.Manifest.Sum
	checked.SumsChecked = true
	if err := Verify(checked); err != nil {
		t.Fatalf("checked sums: %v", err)
	}

	// A body byte changed after Build, Sum left as Build set it.
	tampered := clonePack(p)
	tampered.Object.Sum = p.Object.Sum
	tampered.Object.Body[len(tampered.Object.Body)-1] ^= 1
	if err := Verify(tampered); !errors.Is(err, ErrRejected) || !strings.Contains(err.Error(), "object key") {
		t.Fatalf("a body changed after Build, sums not checked: %v", err)
	}

	// A caller that claims checked sums but passes a wrong one.
	lying := clonePack(p)
	lying.Object.Sum, lying.SumsChecked = Sum([]byte("another body")), true
	if err := Verify(lying); !errors.Is(err, ErrRejected) || !strings.Contains(err.Error(), "object key") {
		t.Fatalf("a wrong checked sum: %v", err)
	}
}
