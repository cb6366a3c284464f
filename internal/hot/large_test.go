package hot

import (
	"errors"
	"fmt"
	"testing"
)

// largeConfig is a store with LMCache-sized classes: 16 KiB..64 MiB, of
// capacity bytes in slabs of slab bytes.
func largeConfig(capacity int64, slab int) Config {
	return Config{
		CapacityBytes: capacity,
		MinClass:      16 * kib,
		MaxClass:      64 * mib,
		SlabBytes:     slab,
		Prefault:      PrefaultNone,
	}
}

// TestLargeBlocksReclaimSmallSlabs: a store filled to capacity with small
// blocks must still take 32 MiB and 64 MiB blocks (ADR 0015: an LMCache
// chunk is 32 MiB for Llama-3-8B) by evicting small blocks and handing
// their slabs over (ADR 0003), and small blocks must fit again after the
// large ones. It runs with the default 64 MiB slab (a large class gets
// one- or two-slot slabs of the same size as a small class's) and with
// 1 MiB slabs, where one 64 MiB slot needs the memory of 64 small slabs.
func TestLargeBlocksReclaimSmallSlabs(t *testing.T) {
	for _, slab := range []int{64 * mib, 4 * mib, 1 * mib} {
		t.Run(fmt.Sprintf("slab=%dMiB", slab/mib), func(t *testing.T) {
			const capacity = 128 * mib
			s := newTestStore(t, largeConfig(capacity, slab))
			ns := nsOf(1)
			id := uint64(0)
			putSmall := func(n, size int) []uint64 {
				var ids []uint64
				for range n {
					id++
					put(t, s, ns, id, 0, size)
					ids = append(ids, id)
				}
				return ids
			}
			// Fill to capacity with two small classes, then some more so
			// that the store evicts within them.
			small := putSmall(capacity/(64*kib)/2, 64*kib)
			small = append(small, putSmall(capacity/(256*kib)/2+8, 256*kib)...)
			st := s.Stats()
			if st.BytesMapped != capacity || st.Evictions == 0 {
				t.Fatalf("after the small fill: %d bytes mapped, %d evictions; want %d mapped and some evictions", st.BytesMapped, st.Evictions, capacity)
			}
			mustInvariants(t, s)

			// Large blocks: every one must find room by reclaiming slabs.
			var large []uint64
			var largeSizes []int
			for i, size := range []int{32 * mib, 64 * mib, 32 * mib, 64 * mib, 48 * mib} {
				id++
				if err := tryPut(s, ns, id, 0, size); err != nil {
					t.Fatalf("large put %d (%d MiB) into a store of evictable small blocks: %v", i, size>>20, err)
				}
				large = append(large, id)
				largeSizes = append(largeSizes, size)
				mustInvariants(t, s)
			}
			// The newest large blocks are cached with their bytes; the
			// mapped memory never exceeds the capacity.
			last := len(large) - 1
			if !has(t, s, ns, large[last], largeSizes[last]) || !has(t, s, ns, large[last-1], largeSizes[last-1]) {
				t.Fatal("the newest large blocks are not cached")
			}
			st = s.Stats()
			if st.BytesMapped > capacity || st.BytesReserved > capacity || st.BytesCached < 64*mib+48*mib {
				t.Fatalf("after the large puts: mapped %d, reserved %d, cached %d", st.BytesMapped, st.BytesReserved, st.BytesCached)
			}
			if st.SlabReclaims == 0 {
				t.Fatal("no slab changed class")
			}

			// Small blocks again: they reclaim the large slabs in turn.
			again := putSmall(capacity/(64*kib), 64*kib)
			for _, i := range again[len(again)-16:] {
				if !has(t, s, ns, i, 64*kib) {
					t.Fatalf("small block %d stored after the large ones is missing", i)
				}
			}
			st = s.Stats()
			if st.BytesCached < capacity/2 {
				t.Fatalf("after the second small fill only %d bytes cached of %d", st.BytesCached, capacity)
			}
			mustInvariants(t, s)
			_ = small
		})
	}
}

// TestLargeBlockNoSpaceOnlyWhenPinned: a 64 MiB put fails with ErrNoSpace
// only when the blocks in the way are pinned, and succeeds once they are
// released.
func TestLargeBlockNoSpaceOnlyWhenPinned(t *testing.T) {
	const capacity = 64 * mib
	s := newTestStore(t, largeConfig(capacity, 4*mib))
	ns := nsOf(1)
	for id := uint64(1); id <= 16; id++ {
		put(t, s, ns, id, 0, 4*mib)
	}
	v, ok := s.Acquire(ns, key(3))
	if !ok {
		t.Fatal("block 3 missing")
	}
	if err := tryPut(s, ns, 100, 0, 64*mib); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("64 MiB put with a pinned block in the way: %v, want ErrNoSpace", err)
	}
	mustInvariants(t, s)
	s.Release(v)
	if err := tryPut(s, ns, 101, 0, 64*mib); err != nil {
		t.Fatalf("64 MiB put once nothing is pinned: %v", err)
	}
	if !has(t, s, ns, 101, 64*mib) {
		t.Fatal("64 MiB block not readable")
	}
	mustInvariants(t, s)
}
