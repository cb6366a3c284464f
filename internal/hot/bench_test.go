package hot

import (
	"fmt"
	"testing"
)

const benchSlab = 64 << 20

var prefaultModes = []Prefault{PrefaultNone, PrefaultPopulate, PrefaultHugePage}

// BenchmarkSlabFill maps a 64 MiB slab with each prefault mode, copies
// 64 MiB into it and unmaps it: the cost of filling fresh slab memory,
// page faults included. "warm-*" copy into memory already faulted in.
func BenchmarkSlabFill(b *testing.B) {
	src := payload(1, benchSlab)
	for _, mode := range prefaultModes {
		b.Run(string(mode), func(b *testing.B) {
			b.SetBytes(benchSlab)
			for b.Loop() {
				mem, err := mapSlab(benchSlab, mode)
				if err != nil {
					b.Fatal(err)
				}
				copy(mem, src)
				if err := unmapSlab(mem); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	// Copies into slabs already faulted in (4 KiB pages, then huge pages).
	for _, mode := range []Prefault{PrefaultPopulate, PrefaultHugePage} {
		b.Run("warm-"+string(mode), func(b *testing.B) {
			mem, err := mapSlab(benchSlab, mode)
			if err != nil {
				b.Fatal(err)
			}
			defer unmapSlab(mem)
			b.SetBytes(benchSlab)
			for b.Loop() {
				copy(mem, src)
			}
		})
	}
}

// BenchmarkSlabMap maps (and prefaults) a 64 MiB slab and unmaps it without
// copying: the upfront cost a prefault mode moves to slab creation.
func BenchmarkSlabMap(b *testing.B) {
	for _, mode := range prefaultModes {
		b.Run(string(mode), func(b *testing.B) {
			b.SetBytes(benchSlab)
			for b.Loop() {
				mem, err := mapSlab(benchSlab, mode)
				if err != nil {
					b.Fatal(err)
				}
				if err := unmapSlab(mem); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

var benchSizes = []int{64 << 10, 256 << 10, 1 << 20}

func sizeName(n int) string {
	if n >= 1<<20 {
		return fmt.Sprintf("%dMiB", n>>20)
	}
	return fmt.Sprintf("%dKiB", n>>10)
}

// benchStore is a 256 MiB store with the default classes and slabs.
func benchStore(b *testing.B) *Store {
	b.Helper()
	return newTestStore(b, Config{CapacityBytes: 256 << 20})
}

// BenchmarkReserveCommit measures a Put in steady state: Reserve, copy the
// payload into the slot, Commit, with the store full so that every Put
// evicts.
func BenchmarkReserveCommit(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(sizeName(size), func(b *testing.B) {
			s := benchStore(b)
			ns := nsOf(1)
			src := payload(7, size)
			id := uint64(1)
			for int64(id)*int64(size) < 2*s.cfg.CapacityBytes { // fill, then some
				put(b, s, ns, id, 0, size)
				id++
			}
			b.SetBytes(int64(size))
			for b.Loop() {
				r, err := s.Reserve(ns, key(id), Key{}, 16, size)
				if err != nil {
					b.Fatal(err)
				}
				copy(r.Buf, src)
				s.Commit(r)
				id++
			}
		})
	}
}

// BenchmarkAcquireRelease measures a hot hit: Acquire (pin, LRU touch) and
// Release of a cached block, without copying its bytes.
func BenchmarkAcquireRelease(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(sizeName(size), func(b *testing.B) {
			s := benchStore(b)
			ns := nsOf(1)
			const n = 64
			for id := uint64(1); id <= n; id++ {
				put(b, s, ns, id, 0, size)
			}
			i := uint64(0)
			for b.Loop() {
				v, ok := s.Acquire(ns, key(1+i%n))
				if !ok {
					b.Fatal("miss")
				}
				s.Release(v)
				i++
			}
		})
	}
}
