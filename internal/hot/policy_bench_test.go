package hot

import (
	"runtime"
	"testing"

	"github.com/gpucache/gpucache/internal/policy"
)

// policyBenchBlocks is the resident set of BenchmarkPolicyAccess: 1 Mi
// blocks.
const policyBenchBlocks = 1 << 20

// BenchmarkPolicyAccess measures one access of a full store holding 1 Mi
// resident blocks, per hot_policy (builtin: no Config.Policy), the
// payload kept to 64 bytes so that the index, the entries and the policy
// are what is measured:
//
//   - hit: Acquire and Release of a resident block, in a scattered order
//     (the policy's Touch);
//   - miss: a PUT of a new block, which evicts one (Admit, Insert, the
//     victim scan, Remove).
//
// Blocks are written as a prefix trace writes them: chains of 16, each
// block naming its parent, at positions 0..15, 512 tokens. Keys are
// unique, so the adaptive policy samples them into its shadows.
// heap-B/block is the Go heap after the fill (and a GC) per resident
// block: the store's index and entries, plus the policy's state.
func BenchmarkPolicyAccess(b *testing.B) {
	for _, name := range []string{"builtin", "prefix", policy.CostName, policy.AdaptiveName} {
		for _, op := range []string{"hit", "miss"} {
			b.Run(name+"/"+op, func(b *testing.B) {
				s := policyBenchStore(b, name)
				ns := nsOf(1)
				var ms runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&ms)
				// The Go heap per resident block (the slabs are not on it):
				// the store's index and entries, and the policy's state.
				heap := float64(ms.HeapAlloc) / policyBenchBlocks
				b.ReportAllocs()
				defer func() { b.ReportMetric(heap, "heap-B/block") }()
				if op == "hit" {
					i := uint64(0)
					for b.Loop() {
						id := 1 + (i*2654435761)%policyBenchBlocks
						v, ok := s.Acquire(ns, key(id))
						if !ok {
							b.Fatalf("block %d not resident", id)
						}
						s.Release(v)
						i++
					}
					return
				}
				id := uint64(policyBenchBlocks + 1)
				for b.Loop() {
					if err := policyBenchPut(s, ns, id); err != nil {
						b.Fatal(err)
					}
					id++
				}
			})
		}
	}
}

// policyBenchStore returns a store of exactly policyBenchBlocks 64-byte
// slots under the named policy, filled.
func policyBenchStore(b *testing.B, name string) *Store {
	b.Helper()
	cfg := Config{CapacityBytes: policyBenchBlocks * 64, MinClass: 64, MaxClass: 64, SlabBytes: 16 << 20, Prefault: PrefaultNone}
	if name != "builtin" {
		p, err := policy.New(name)
		if err != nil {
			b.Fatal(err)
		}
		cfg.Policy = p
	}
	s := newTestStore(b, cfg)
	ns := nsOf(1)
	for id := uint64(1); id <= policyBenchBlocks; id++ {
		if err := policyBenchPut(s, ns, id); err != nil {
			b.Fatal(err)
		}
	}
	if st := s.Stats(); st.Evictions != 0 {
		b.Fatalf("%d evictions while filling: the store does not hold %d blocks", st.Evictions, policyBenchBlocks)
	}
	return s
}

// policyBenchPut writes block id (1-based) of a chain of 16.
func policyBenchPut(s *Store, ns Namespace, id uint64) error {
	pos := (id - 1) % 16
	var parent Key
	if pos != 0 {
		parent = key(id - 1)
	}
	r, err := s.ReserveBlock(ns, key(id), parent, BlockMeta{Tokens: 512, Position: uint32(pos)}, 64)
	if err != nil {
		return err
	}
	r.Buf[0] = byte(id)
	s.Commit(r)
	return nil
}
