package hot

import (
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// The stress key space: chains of 10 blocks, each chain in one of three
// namespaces, block sizes spread over five size classes.
const (
	stressKeys  = 400
	stressChain = 10
)

var stressSizes = [...]int{100, 20 * kib, 70 * kib, 200 * kib, 600 * kib}

func stressSize(id uint64) int { return stressSizes[id%uint64(len(stressSizes))] }

func stressNS(id uint64) Namespace { return nsOf((id-1)/stressChain%3 + 1) }

func stressParent(id uint64) uint64 {
	if (id-1)%stressChain == 0 {
		return 0
	}
	return id - 1
}

// checkBytes verifies a read block: exact length, id in the first 8 bytes,
// and the pattern at the end.
func checkBytes(b []byte, id uint64) error {
	size := stressSize(id)
	if len(b) != size {
		return errors.New("length differs")
	}
	if size >= 8 && binary.LittleEndian.Uint64(b) != id {
		return errors.New("first 8 bytes encode another key")
	}
	if last := len(b) - 1; last >= 8 && b[last] != byte(id*131+uint64(last)*7) {
		return errors.New("tail differs")
	}
	return nil
}

// runStress runs the stress workers (4 × 2500 operations) on a store of
// cfg in a testing/synctest bubble (each operation sleeps a millisecond of
// the bubble's fake clock, so leases expire as the workers go), checks the
// invariants before and after every lease has expired, and returns the
// store's stats.
func runStress(t *testing.T, cfg Config, seed uint64) Stats {
	t.Helper()
	var st Stats
	synctest.Test(t, func(t *testing.T) {
		s := newTestStore(t, cfg)
		const workers, ops = 4, 2500
		var wg sync.WaitGroup
		var noSpace atomic.Int64
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := stressWorker(s, rand.New(rand.NewPCG(seed, uint64(w))), ops, &noSpace); err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
		mustInvariants(t, s)
		time.Sleep(time.Hour) // every lease expires
		s.ExpireLeases()
		mustInvariants(t, s)
		st = s.Stats()
		t.Logf("ErrNoSpace %d; %+v", noSpace.Load(), st)
	})
	return st
}

func TestConcurrentStress(t *testing.T) {
	cfg := testConfig(8 * mib)
	cfg.MaxLeases = 64
	st := runStress(t, cfg, 42)
	if st.Pinned != 0 || st.LeasesActive != 0 || st.InFlight != 0 {
		t.Fatalf("Stats after stress = %+v", st)
	}
	if st.Puts == 0 || st.Hits == 0 || st.Evictions == 0 || st.LeasesGranted == 0 || st.IdentityMismatches == 0 {
		t.Fatalf("stress did not exercise the store: %+v", st)
	}
}

func stressWorker(s *Store, rng *rand.Rand, ops int, noSpace *atomic.Int64) error {
	for op := range ops {
		time.Sleep(time.Millisecond) // the bubble's fake clock
		id := 1 + rng.Uint64N(stressKeys)
		ns := stressNS(id)
		switch r := rng.IntN(100); {
		case r < 35: // put
			var parent Key
			if p := stressParent(id); p != 0 {
				parent = key(p)
			}
			res, err := s.ReserveBlock(ns, key(id), parent, BlockMeta{Tokens: 16, Tenant: stressTenant(id)}, stressSize(id))
			if errors.Is(err, ErrNoSpace) || errors.Is(err, ErrTenantQuota) {
				noSpace.Add(1)
				continue
			}
			if errors.Is(err, ErrExists) || errors.Is(err, ErrNotAdmitted) {
				continue
			}
			if err != nil {
				return err
			}
			fillPayload(res.Buf, id)
			if rng.IntN(10) == 0 {
				s.Abort(res)
			} else {
				s.Commit(res)
			}
		case r < 65: // read
			v, ok := s.Acquire(ns, key(id))
			if !ok {
				continue
			}
			err := checkBytes(v.Bytes, id)
			s.Release(v)
			if err != nil {
				return err
			}
		case r < 70: // read under a foreign namespace
			if v, ok := s.Acquire(nsOf(99), key(id)); ok || v.Bytes != nil {
				return errors.New("foreign namespace read returned bytes")
			}
		case r < 85: // lookup a chain prefix, with a lease, then read it
			first := id - (id-1)%stressChain
			keys := make([]Key, 0, stressChain)
			for k := first; k <= id; k++ {
				keys = append(keys, key(k))
			}
			hits, lid, _ := s.LookupFor(stressTenant(id), ns, keys, 2*time.Second, rng.IntN(4) != 0)
			if lid == 0 {
				continue
			}
			for k := first; k < first+uint64(hits); k++ {
				v, ok := s.Acquire(ns, key(k))
				if !ok {
					// Only an expired (and reclaimed) lease may lose a
					// block; a live one must still be releasable.
					if s.ReleaseLease(lid) {
						return errors.New("leased block missing under a live lease")
					}
					break
				}
				err := checkBytes(v.Bytes, k)
				s.Release(v)
				if err != nil {
					return err
				}
			}
			if rng.IntN(3) != 0 {
				s.ReleaseLease(lid)
			}
		case r < 95:
			s.Delete(ns, key(id))
		default:
			s.ExpireLeases()
			if op%8 == 0 {
				if err := s.checkInvariants(); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// stressTenant is the tenant that writes and leases key id: one of two
// tenants, or nobody (not charged), by id.
func stressTenant(id uint64) string {
	return [...]string{"", "t1", "t2"}[id%3]
}

// TestCloseDuringReserve closes the store while writers are reserving and
// mapping slabs; every writer ends with ErrClosed and nothing leaks or is
// unmapped twice. (The writers never touch Buf: writing into a slot while
// Close runs breaks Close's contract.)
func TestCloseDuringReserve(t *testing.T) {
	s, err := New(testConfig(16 * mib))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	started := make(chan struct{}, 2)
	for w := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := uint64(0); ; i++ {
				r, err := s.ReserveBlock(nsOf(1), key(uint64(w)<<32|i), Key{}, BlockMeta{Tokens: 16}, stressSize(i))
				if errors.Is(err, ErrClosed) {
					return
				}
				if err != nil {
					t.Error(err)
					return
				}
				s.Commit(r)
				if i == 8 {
					started <- struct{}{}
				}
			}
		}()
	}
	<-started
	<-started
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if st := s.Stats(); st.BytesMapped != 0 || st.Blocks != 0 {
		t.Fatalf("Stats after Close = %+v", st)
	}
}
