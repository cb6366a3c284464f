package hot

import (
	"fmt"
	"runtime"
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

// benchStore is a 256 MiB store with the default classes (16 KiB..64 MiB)
// and slabs.
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
				r, err := s.ReserveBlock(ns, key(id), Key{}, BlockMeta{Tokens: 16}, size)
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

// largeSizes are LMCache chunk sizes (ADR 0015): 256 tokens of Llama-3-8B
// in fp16 is 32 MiB; 64 MiB is the default largest class.
var largeSizes = []int{32 << 20, 64 << 20}

// reportHeap adds the Go heap in use after the loop, less the benchmark's
// own payload buffer (own bytes), in MiB: the cached payload lives in slabs,
// so it stays flat whatever the block size.
func reportHeap(b *testing.B, own int) {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	b.ReportMetric(float64(int64(ms.HeapInuse)-int64(own))/(1<<20), "heap-MiB")
}

// BenchmarkLargePut measures a PUT of a large block into a full store of
// 256 MiB with the default classes (16 KiB..64 MiB) and slabs: Reserve
// (evicting the oldest block of the class), copy the payload into the
// slot, Commit.
func BenchmarkLargePut(b *testing.B) {
	for _, size := range largeSizes {
		b.Run(sizeName(size), func(b *testing.B) {
			s := benchStore(b)
			ns := nsOf(1)
			src := payload(7, size)
			id := uint64(1)
			for int64(id)*int64(size) < 2*s.cfg.CapacityBytes {
				put(b, s, ns, id, 0, size)
				id++
			}
			b.SetBytes(int64(size))
			for b.Loop() {
				r, err := s.ReserveBlock(ns, key(id), Key{}, BlockMeta{Tokens: 256}, size)
				if err != nil {
					b.Fatal(err)
				}
				copy(r.Buf, src)
				s.Commit(r)
				id++
			}
			reportHeap(b, size)
		})
	}
}

// BenchmarkLargeGet measures a GET of a cached large block: Acquire, copy
// the bytes out (as a socket write would read them), Release.
func BenchmarkLargeGet(b *testing.B) {
	for _, size := range largeSizes {
		b.Run(sizeName(size), func(b *testing.B) {
			s := benchStore(b)
			ns := nsOf(1)
			n := uint64(s.cfg.CapacityBytes / int64(size) / 2)
			for id := uint64(1); id <= n; id++ {
				put(b, s, ns, id, 0, size)
			}
			dst := make([]byte, size)
			b.SetBytes(int64(size))
			i := uint64(0)
			for b.Loop() {
				v, ok := s.Acquire(ns, key(1+i%n))
				if !ok {
					b.Fatal("miss")
				}
				copy(dst, v.Bytes)
				s.Release(v)
				i++
			}
			reportHeap(b, size)
		})
	}
}
