package hot

import (
	"bytes"
	"context"
	"errors"
	"reflect"
	"testing"
	"testing/synctest"
	"time"
)

func TestRoundTrip(t *testing.T) {
	s := newTestStore(t, testConfig(8*mib))
	misused := catchMisuse(s)
	ns := nsOf(1)
	sizes := []int{0, 1, 100, 16 * kib, 16*kib + 1, 100_000, 1 * mib}
	var cached, reserved uint64
	for i, size := range sizes {
		id := uint64(i + 1)
		r, err := s.ReserveBlock(ns, key(id), Key{}, BlockMeta{Tokens: 16}, size)
		if err != nil {
			t.Fatalf("Reserve %d bytes: %v", size, err)
		}
		if len(r.Buf) != size || cap(r.Buf) != size {
			t.Fatalf("Buf len %d cap %d, want %d", len(r.Buf), cap(r.Buf), size)
		}
		if _, ok := s.Acquire(ns, key(id)); ok {
			t.Fatalf("in-flight block %d readable", id)
		}
		fillPayload(r.Buf, id)
		s.Commit(r)
		cached += uint64(size)
		reserved += uint64(s.cl.size(s.cl.classOf(size)))
		mustInvariants(t, s)
	}
	for i, size := range sizes {
		id := uint64(i + 1)
		v, ok := s.Acquire(ns, key(id))
		if !ok {
			t.Fatalf("block %d missing", id)
		}
		if len(v.Bytes) != size || cap(v.Bytes) != size || string(v.Bytes) != string(payload(id, size)) {
			t.Fatalf("block %d: bytes differ", id)
		}
		s.Release(v)
		s.Release(v) // a repeated Release is ignored (and reported in the invariants build)
		misused.expect(t, errReleasedTwice, 1)
	}
	mustInvariants(t, s)
	st := s.Stats()
	want := Stats{
		Hits: uint64(len(sizes)), Misses: uint64(len(sizes)), Puts: uint64(len(sizes)),
		Blocks: uint64(len(sizes)), BytesCached: cached, BytesReserved: reserved,
		BytesMapped: st.BytesMapped, CapacityBytes: 8 * mib, Slabs: st.Slabs,
	}
	if st != want {
		t.Fatalf("Stats = %+v\nwant %+v", st, want)
	}
	if st.BytesMapped == 0 || st.BytesMapped > 8*mib {
		t.Fatalf("BytesMapped = %d", st.BytesMapped)
	}
}

func TestZeroSizePayload(t *testing.T) {
	s := newTestStore(t, testConfig(2*mib))
	ns := nsOf(1)
	r, err := s.ReserveBlock(ns, key(1), Key{}, BlockMeta{Tokens: 0}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Buf) != 0 || cap(r.Buf) != 0 {
		t.Fatalf("Buf len %d cap %d", len(r.Buf), cap(r.Buf))
	}
	s.Commit(r)
	v, ok := s.Acquire(ns, key(1))
	if !ok || len(v.Bytes) != 0 {
		t.Fatalf("Acquire = %v, %d bytes", ok, len(v.Bytes))
	}
	s.Release(v)
	if st := s.Stats(); st.Blocks != 1 || st.BytesCached != 0 || st.BytesReserved != 16*kib {
		t.Fatalf("Stats = %+v", st)
	}
	mustInvariants(t, s)
}

func TestReserveAbort(t *testing.T) {
	s := newTestStore(t, testConfig(2*mib))
	misused := catchMisuse(s)
	ns := nsOf(1)
	r1, err := s.ReserveBlock(ns, key(1), Key{}, BlockMeta{Tokens: 16}, 20*kib)
	if err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.InFlight != 1 || st.BytesReserved != 32*kib || st.Blocks != 0 {
		t.Fatalf("Stats = %+v", st)
	}
	if _, err := s.ReserveBlock(ns, key(1), Key{}, BlockMeta{Tokens: 16}, 10); !errors.Is(err, ErrExists) {
		t.Fatalf("Reserve in-flight key: %v, want ErrExists", err)
	}
	s.Abort(r1)
	mustInvariants(t, s)
	if st := s.Stats(); st.InFlight != 0 || st.BytesReserved != 0 || st.Blocks != 0 || st.Puts != 0 {
		t.Fatalf("Stats after Abort = %+v", st)
	}
	if _, ok := s.Acquire(ns, key(1)); ok {
		t.Fatal("aborted block readable")
	}
	// The slot and the entry are reused; the stale reservation is ignored.
	r2, err := s.ReserveBlock(ns, key(2), Key{}, BlockMeta{Tokens: 16}, 20*kib)
	if err != nil {
		t.Fatal(err)
	}
	if r2.ref.idx != r1.ref.idx || r2.ref.gen == r1.ref.gen {
		t.Fatalf("refs %+v, %+v: want the entry reused with a new generation", r1.ref, r2.ref)
	}
	s.Commit(r1)
	s.Abort(r1)
	misused.expect(t, errSettledTwice, 2) // r1 was aborted
	mustInvariants(t, s)
	if st := s.Stats(); st.InFlight != 1 || st.Puts != 0 {
		t.Fatalf("stale Commit/Abort changed state: %+v", st)
	}
	fillPayload(r2.Buf, 2)
	s.Commit(r2)
	s.Commit(r2) // double Commit is ignored
	s.Abort(r2)  // Abort after Commit is ignored
	misused.expect(t, errSettledTwice, 2)
	if !has(t, s, ns, 2, 20*kib) {
		t.Fatal("block 2 missing")
	}
	// The aborted key can be reserved again.
	put(t, s, ns, 1, 0, 10)
	mustInvariants(t, s)
	if st := s.Stats(); st.Puts != 2 || st.Blocks != 2 || st.InFlight != 0 {
		t.Fatalf("Stats = %+v", st)
	}
	s.Commit(Reservation{}) // zero reservation is ignored
	s.Release(View{})
	misused.expect(t, errSettledTwice, 0)
}

func TestReserveRejects(t *testing.T) {
	s := newTestStore(t, testConfig(2*mib))
	ns := nsOf(1)
	put(t, s, ns, 1, 0, 100)
	if _, err := s.ReserveBlock(ns, key(1), Key{}, BlockMeta{Tokens: 16}, 100); !errors.Is(err, ErrExists) {
		t.Fatalf("existing key: %v", err)
	}
	if _, err := s.ReserveBlock(nsOf(2), key(1), Key{}, BlockMeta{Tokens: 16}, 100); !errors.Is(err, ErrExists) {
		t.Fatalf("existing key, other namespace: %v", err)
	}
	if _, err := s.ReserveBlock(ns, key(2), Key{}, BlockMeta{Tokens: 16}, s.MaxPayload()+1); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("too large: %v", err)
	}
	if _, err := s.ReserveBlock(ns, key(2), Key{}, BlockMeta{Tokens: 16}, -1); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("negative size: %v", err)
	}
	if s.MaxPayload() != 1*mib {
		t.Fatalf("MaxPayload = %d", s.MaxPayload())
	}
	if st := s.Stats(); st.PutRejects != 4 || st.Puts != 1 {
		t.Fatalf("Stats = %+v", st)
	}
	mustInvariants(t, s)
}

func TestIdentityMismatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newTestStore(t, testConfig(2*mib))
		nsA, nsB := nsOf(1), nsOf(2)
		put(t, s, nsA, 1, 0, 1000)
		v, ok := s.Acquire(nsB, key(1))
		if ok || v.Bytes != nil {
			t.Fatalf("foreign namespace read: ok %v, %d bytes", ok, len(v.Bytes))
		}
		hits, id, _ := s.Lookup(nsB, []Key{key(1)}, 0, true)
		if hits != 0 || id != 0 {
			t.Fatalf("foreign Lookup: hits %d lease %d", hits, id)
		}
		if deleted, busy := s.Delete(nsB, key(1)); deleted || busy {
			t.Fatalf("foreign Delete = %v, %v", deleted, busy)
		}
		st := s.Stats()
		if st.Hits != 0 || st.Misses != 1 || st.IdentityMismatches != 1 || st.LookupMismatches != 1 ||
			st.LeasesGranted != 0 || st.Pinned != 0 || st.Blocks != 1 {
			t.Fatalf("Stats = %+v", st)
		}
		if !has(t, s, nsA, 1, 1000) {
			t.Fatal("block lost")
		}
		// A plain miss counts no mismatch.
		if _, ok := s.Acquire(nsA, key(99)); ok {
			t.Fatal("absent key hit")
		}
		if st := s.Stats(); st.Misses != 2 || st.IdentityMismatches != 1 || st.Hits != 1 {
			t.Fatalf("Stats = %+v", st)
		}
		mustInvariants(t, s)
	})
}

func TestDelete(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newTestStore(t, testConfig(2*mib))
		ns := nsOf(1)
		put(t, s, ns, 1, 0, 100)
		put(t, s, ns, 2, 0, 100)
		put(t, s, ns, 3, 0, 100)
		r, err := s.ReserveBlock(ns, key(4), Key{}, BlockMeta{Tokens: 16}, 100)
		if err != nil {
			t.Fatal(err)
		}
		v, _ := s.Acquire(ns, key(2))
		_, lid, _ := s.Lookup(ns, []Key{key(3)}, time.Second, true)

		for _, tc := range []struct {
			id            uint64
			deleted, busy bool
		}{
			{2, false, true}, // pinned
			{3, false, true}, // leased
			{4, false, true}, // in flight
			{9, false, false},
			{1, true, false},
			{1, false, false},
		} {
			if d, b := s.Delete(ns, key(tc.id)); d != tc.deleted || b != tc.busy {
				t.Fatalf("Delete(%d) = %v, %v; want %v, %v", tc.id, d, b, tc.deleted, tc.busy)
			}
		}
		s.Release(v)
		s.ReleaseLease(lid)
		s.Abort(r)
		for _, id := range []uint64{2, 3} {
			if d, _ := s.Delete(ns, key(id)); !d {
				t.Fatalf("Delete(%d) after unpin failed", id)
			}
		}
		if st := s.Stats(); st.Deletes != 3 || st.Blocks != 0 || st.Pinned != 0 || st.BytesReserved != 0 {
			t.Fatalf("Stats = %+v", st)
		}
		mustInvariants(t, s)
	})
}

func TestClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, err := New(testConfig(2 * mib))
		if err != nil {
			t.Fatal(err)
		}
		misused := catchMisuse(s)
		ns := nsOf(1)
		put(t, s, ns, 1, 0, 100)
		r, err := s.ReserveBlock(ns, key(2), Key{}, BlockMeta{Tokens: 16}, 100)
		if err != nil {
			t.Fatal(err)
		}
		v, _ := s.Acquire(ns, key(1))
		s.Release(v)
		_, lid, _ := s.Lookup(ns, []Key{key(1)}, 0, true)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		for _, size := range []int{100, 2 * mib} {
			if _, err := s.ReserveBlock(ns, key(3), Key{}, BlockMeta{Tokens: 16}, size); !errors.Is(err, ErrClosed) {
				t.Fatalf("Reserve(%d) after Close: %v", size, err)
			}
		}
		if _, ok := s.Acquire(ns, key(1)); ok {
			t.Fatal("Acquire after Close hit")
		}
		if hits, id, _ := s.Lookup(ns, []Key{key(1)}, 0, true); hits != 0 || id != 0 {
			t.Fatal("Lookup after Close hit")
		}
		if d, b := s.Delete(ns, key(1)); d || b {
			t.Fatal("Delete after Close")
		}
		if s.ReleaseLease(lid) || s.ExpireLeases() != 0 {
			t.Fatal("lease calls after Close")
		}
		s.Commit(r)
		s.Abort(r) // after the Commit: reported in the invariants build
		misused.expect(t, errSettledTwice, 1)
		s.Release(v) // released before Close: reported in the invariants build
		misused.expect(t, errReleasedTwice, 1)
		if st := s.Stats(); st.BytesMapped != 0 || st.Blocks != 0 || st.LeasesActive != 0 || st.Puts != 1 {
			t.Fatalf("Stats after Close = %+v", st)
		}
		if err := s.Close(); !errors.Is(err, ErrClosed) {
			t.Fatalf("second Close: %v", err)
		}
		mustInvariants(t, s)
	})
}

func TestPrefaultModes(t *testing.T) {
	for _, mode := range []Prefault{PrefaultPopulate, PrefaultHugePage, PrefaultNone} {
		t.Run(string(mode), func(t *testing.T) {
			cfg := testConfig(4 * mib)
			cfg.SlabBytes = 2 * mib
			cfg.Prefault = mode
			s := newTestStore(t, cfg)
			for id := uint64(1); id <= 8; id++ {
				put(t, s, nsOf(1), id, 0, 300*kib)
			}
			for id := uint64(1); id <= 8; id++ {
				if !has(t, s, nsOf(1), id, 300*kib) {
					t.Fatalf("block %d missing", id)
				}
			}
			mustInvariants(t, s)
		})
	}
}

func TestConfig(t *testing.T) {
	d := Config{}.WithDefaults()
	if d.CapacityBytes != 1<<30 || d.MinClass != 16*kib || d.MaxClass != 64*mib || d.SlabBytes != 64*mib ||
		d.Prefault != PrefaultPopulate || d.DefaultLeaseTTL != 5*time.Second || d.MaxLeaseTTL != 30*time.Second ||
		d.MaxLeases != 65536 || d.EvictScan != 1024 {
		t.Fatalf("defaults = %+v", d)
	}
	if small := (Config{CapacityBytes: 8 * mib}).WithDefaults(); small.SlabBytes != 8*mib || small.MaxClass != 8*mib {
		t.Fatalf("small store SlabBytes = %d, MaxClass = %d, want 8 MiB each", small.SlabBytes, small.MaxClass)
	}
	if odd := (Config{CapacityBytes: 48 * mib}).WithDefaults(); odd.MaxClass != 32*mib || odd.Validate() != nil {
		t.Fatalf("48 MiB store MaxClass = %d (%v), want 32 MiB", odd.MaxClass, odd.Validate())
	}
	total, ok := memTotal()
	if !ok {
		t.Fatal("cannot read MemTotal")
	}
	good := testConfig(8 * mib)
	for name, mut := range map[string]func(*Config){
		"min not pow2":      func(c *Config) { c.MinClass = 3000 },
		"max not pow2":      func(c *Config) { c.MaxClass = 3 * mib },
		"min > max":         func(c *Config) { c.MinClass, c.MaxClass = 2*mib, 1*mib },
		"tiny min":          func(c *Config) { c.MinClass = 8 },
		"capacity < max":    func(c *Config) { c.MaxClass, c.CapacityBytes = 16*mib, 8*mib },
		"capacity < slab":   func(c *Config) { c.SlabBytes = 16 * mib },
		"capacity > memory": func(c *Config) { c.CapacityBytes = total + 1<<30 },
		"negative capacity": func(c *Config) { c.CapacityBytes = -1 },
		"slab not pages":    func(c *Config) { c.SlabBytes = 1*mib + 1 },
		"slab < min":        func(c *Config) { c.SlabBytes = 4 * kib; c.MinClass = 16 * kib },
		"prefault":          func(c *Config) { c.Prefault = "eager" },
		"ttl order":         func(c *Config) { c.DefaultLeaseTTL, c.MaxLeaseTTL = time.Minute, time.Second },
		"negative leases":   func(c *Config) { c.MaxLeases = -1 },
	} {
		cfg := good
		mut(&cfg)
		if _, err := New(cfg); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: New = %v, want ErrConfig", name, err)
		}
	}
	s, err := New(good)
	if err != nil {
		t.Fatal(err)
	}
	_ = s.Close()
}

// hasPointers reports whether values of t contain Go pointers the GC would
// scan (pointers, slices, strings, maps, interfaces, channels, funcs).
func hasPointers(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
		reflect.Float32, reflect.Float64, reflect.Complex64, reflect.Complex128:
		return false
	case reflect.Array:
		return t.Len() > 0 && hasPointers(t.Elem())
	case reflect.Struct:
		for i := range t.NumField() {
			if hasPointers(t.Field(i).Type) {
				return true
			}
		}
		return false
	default:
		return true
	}
}

// TestEntryHasNoPointers pins down the GC contract: the index (entries,
// key map, child-count map, free lists) is made of pointer-free types, so
// its backing arrays are noscan however many blocks are cached.
func TestEntryHasNoPointers(t *testing.T) {
	s := newTestStore(t, testConfig(2*mib))
	for _, typ := range []reflect.Type{
		reflect.TypeFor[entry](),
		reflect.TypeOf(s.mu.entries).Elem(),
		reflect.TypeOf(s.mu.index).Key(), reflect.TypeOf(s.mu.index).Elem(),
		reflect.TypeOf(s.mu.kids).Key(), reflect.TypeOf(s.mu.kids).Elem(),
		reflect.TypeOf(s.mu.freeEntries).Elem(),
		reflect.TypeOf(s.mu.meta).Elem(),
		reflect.TypeOf(s.mu.deadlines).Elem(),
		reflect.TypeFor[ref](),
	} {
		if hasPointers(typ) {
			t.Errorf("%v contains pointers", typ)
		}
	}
	// The walker itself must see pointers where they are.
	for _, typ := range []reflect.Type{reflect.TypeFor[View](), reflect.TypeFor[slab](), reflect.TypeFor[leaseRec]()} {
		if !hasPointers(typ) {
			t.Errorf("walker missed the pointers of %v", typ)
		}
	}
}

func TestTags(t *testing.T) {
	s, err := New(Config{CapacityBytes: 1 << 20, MinClass: 16 << 10, MaxClass: 64 << 10, SlabBytes: 256 << 10, TagSize: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var ns Namespace
	for i := range 40 { // more blocks than fit: entries are reused, tags must not leak across them
		key := Key{byte(i), 1}
		r, err := s.ReserveBlock(ns, key, Key{}, BlockMeta{Tokens: 1}, 16<<10)
		if err != nil {
			t.Fatal(err)
		}
		if i%2 == 0 && !s.SetTag(r, []byte{byte(i), 2, 3}) {
			t.Fatal("SetTag refused")
		}
		s.Commit(r)
		v, ok := s.Acquire(ns, key)
		if !ok {
			t.Fatal("miss")
		}
		want := make([]byte, 8)
		if i%2 == 0 {
			want[0], want[1], want[2] = byte(i), 2, 3
		}
		if got := s.Tag(v, nil); !bytes.Equal(got, want) {
			t.Fatalf("block %d tag %x, want %x", i, got, want)
		}
		s.Release(v)
		if s.SetTag(r, []byte{1}) {
			t.Fatal("SetTag after Commit accepted")
		}
	}
	plain, _ := New(Config{CapacityBytes: 1 << 20, MinClass: 16 << 10, MaxClass: 64 << 10, SlabBytes: 256 << 10})
	defer plain.Close()
	r, _ := plain.ReserveBlock(ns, Key{9}, Key{}, BlockMeta{Tokens: 1}, 10)
	if plain.SetTag(r, []byte{1}) {
		t.Fatal("a store without tags took one")
	}
}

// TestDeleteWaitForReaders: DeleteWait deletes a block as soon as the
// last View of it is released (a server releases a GET's View just after
// writing it, so a DELETE right after the GET must not answer BUSY); a
// leased block is busy at once; the wait ends with ctx.
func TestDeleteWaitForReaders(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newTestStore(t, testConfig(4*mib))
		ns, k := nsOf(1), key(7)
		put(t, s, ns, 7, 0, 100)
		v, ok := s.Acquire(ns, k)
		if !ok {
			t.Fatal("not stored")
		}
		if deleted, busy := s.Delete(ns, k); deleted || !busy {
			t.Fatalf("Delete of a pinned block: %v %v, want busy", deleted, busy)
		}
		done := make(chan [2]bool)
		go func() {
			d, b := s.DeleteWait(context.Background(), ns, k)
			done <- [2]bool{d, b}
		}()
		s.Release(v)
		if r := <-done; !r[0] || r[1] {
			t.Fatalf("DeleteWait after the release: deleted %v busy %v", r[0], r[1])
		}
		if _, ok := s.Acquire(ns, k); ok {
			t.Fatal("the block is still there")
		}
		// A pinned block and a cancelled wait: busy, nothing removed.
		put(t, s, ns, 7, 0, 100)
		v, _ = s.Acquire(ns, k)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if d, b := s.DeleteWait(ctx, ns, k); d || !b {
			t.Fatalf("DeleteWait with an ended context: %v %v", d, b)
		}
		s.Release(v)
		// A leased block is busy at once, whatever the context.
		if _, id, _ := s.Lookup(ns, []Key{k}, time.Minute, true); id == 0 {
			t.Fatal("no lease")
		}
		if d, b := s.DeleteWait(context.Background(), ns, k); d || !b {
			t.Fatalf("DeleteWait of a leased block: %v %v", d, b)
		}
	})
}
