package replay

import (
	"fmt"
	"math"
	"strings"
	"testing"
)

// fullReq is a request whose blocks all hold BlockTokens tokens.
func fullReq(ids ...uint64) Request {
	return Request{InputLength: BlockTokens * len(ids), OutputLength: 1, HashIDs: ids}
}

// blocksFrac is the capacity fraction of n blocks out of unique, with half
// a block to spare so that floor(frac × unique) is n whatever the rounding.
func blocksFrac(n, unique int) float64 { return (float64(n) + 0.5) / float64(unique) }

// fullCost is the attention work of full blocks at the given positions.
func fullCost(pos ...uint32) float64 {
	var c float64
	for _, p := range pos {
		c += blockCost(p, BlockTokens)
	}
	return c
}

// check verifies the two tiers' bookkeeping.
func (t *twoTier) check() error {
	used := 0
	records := 0
	for slot := range t.segs {
		s := &t.segs[slot]
		inUse := t.order.pos[slot] >= 0
		if !inUse {
			if len(s.blocks) != 0 {
				return fmt.Errorf("free slot %d holds %d records", slot, len(s.blocks))
			}
			continue
		}
		used++
		if len(s.blocks) > t.segBlocks {
			return fmt.Errorf("slot %d holds %d records, more than %d", slot, len(s.blocks), t.segBlocks)
		}
		live := 0
		for _, d := range s.blocks {
			if t.seg[d] != int32(slot) {
				return fmt.Errorf("slot %d holds block %d, which names slot %d", slot, d, t.seg[d])
			}
			if !t.inDRAM[d] {
				live++
			}
		}
		if live != s.live {
			return fmt.Errorf("slot %d counts %d live records, holds %d", slot, s.live, live)
		}
		records += len(s.blocks)
		if i := t.order.pos[slot]; i > 0 && t.order.less(int32(slot), t.order.slots[(i-1)/2]) {
			return fmt.Errorf("slot %d is before its parent in the reclaim order", slot)
		}
	}
	if used+len(t.free) != len(t.segs) || used != len(t.order.slots) {
		return fmt.Errorf("%d slots in use, %d free, %d in order, of %d", used, len(t.free), len(t.order.slots), len(t.segs))
	}
	for d, s := range t.seg {
		if s >= 0 {
			records--
		}
		if t.flashed[d] != t.inCold[d] {
			return fmt.Errorf("block %d: flashed %v, evicted %v", d, t.flashed[d], t.inCold[d])
		}
		// Write-on-reclaim loses no evicted block: it is in DRAM, flash
		// or cold.
		if t.inCold[d] && !t.inDRAM[d] && s < 0 && !t.coldOnReclaim[d] {
			return fmt.Errorf("block %d evicted, in no tier under write-on-reclaim", d)
		}
	}
	if records != 0 {
		return fmt.Errorf("%d records more in the segments than blocks naming them", -records)
	}
	return nil
}

// simulateChecked runs simulateFlash and checks the tiers' bookkeeping at
// the end.
func simulateChecked(t *testing.T, reqs []Request, policyName string, cfg FlashConfig) FlashResult {
	t.Helper()
	res, tiers, err := simulateFlash(reqs, policyName, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := tiers.check(); err != nil {
		t.Fatalf("%s %+v: %v", policyName, cfg, err)
	}
	return res
}

// wantTier compares a TierHits with hit blocks at the given positions, all
// full blocks, out of total attention work.
func wantTier(t *testing.T, name string, got TierHits, blocks int64, total float64, pos ...uint32) {
	t.Helper()
	want := TierHits{HitBlocks: int64(len(pos)), HitRatio: float64(len(pos)) / float64(blocks),
		SavedTokens: int64(len(pos)) * BlockTokens, ComputeSaved: fullCost(pos...) / total}
	if got.HitBlocks != want.HitBlocks || got.SavedTokens != want.SavedTokens ||
		math.Abs(got.HitRatio-want.HitRatio) > 1e-12 || math.Abs(got.ComputeSaved-want.ComputeSaved) > 1e-12 {
		t.Errorf("%s: %+v, want %+v", name, got, want)
	}
}

// TestFlashTiersByHand replays a trace worked out by hand: LRU DRAM of 2
// blocks above a flash of one 2-block segment (so every reclaim order
// drops that segment). The comments give DRAM from least to most recent,
// the segment's records and the reclaims.
func TestFlashTiersByHand(t *testing.T) {
	reqs := []Request{
		fullReq(1),          // DRAM 1
		fullReq(2),          // DRAM 1 2
		fullReq(3),          // evict 1 → flash [1]
		fullReq(4),          // evict 2 → flash [1 2]
		fullReq(5),          // evict 3: reclaim [1 2], both live → cold writes 1 2; flash [3]. DRAM 4 5
		fullReq(4, 3, 1, 6), // hits: 4 DRAM, 3 flash, 1 cold; 6 never seen
		//                      DRAM 5 4 3 1 6 → evict 5: flash [3 5]; evict 4: reclaim [3 5]
		//                      (3 in DRAM, 5 live → cold write 5), flash [4]; evict 3: flash [4 3]. DRAM 1 6
		fullReq(1),    // DRAM hit. DRAM 6 1
		fullReq(5, 2), // cold hits 5, 2. DRAM 6 1 5 2 → evict 6: reclaim [4 3] (both live → cold
		//                writes 4 3), flash [6]; evict 1: flash [6 1] (rewritten). DRAM 5 2
		fullReq(1), // flash hit. DRAM 5 2 1 → evict 5: reclaim [6 1] (6 live → cold write 6), flash [5]. DRAM 2 1
		fullReq(7), // evict 2: flash [5 2]. DRAM 1 7
		fullReq(8), // evict 1: reclaim [5 2], both live but in cold already; flash [1]. DRAM 7 8
	}
	const unique, blocks = 8, 15
	total := fullCost(0, 0, 0, 0, 0, 0, 1, 2, 3, 0, 0, 1, 0, 0, 0)
	for _, order := range ReclaimOrders() {
		t.Run(order, func(t *testing.T) {
			r := simulateChecked(t, reqs, "lru", FlashConfig{DRAMFrac: blocksFrac(2, unique), FlashFrac: blocksFrac(2, unique), SegmentBlocks: 2, Reclaim: order})
			if r.DRAMCapacity != 2 || r.FlashCapacity != 2 || r.Segments != 1 || r.Blocks != blocks || r.Requests != len(reqs) || r.PromptTokens != blocks*BlockTokens {
				t.Fatalf("shape: %+v", r)
			}
			wantTier(t, "dram", r.DRAM, blocks, total, 0, 0)         // 4 in request 6, 1 in request 7
			wantTier(t, "flash", r.Flash, blocks, total, 1, 0)       // 3 in request 6, 1 in request 9
			wantTier(t, "cold", r.Cold, blocks, total, 2, 0, 1)      // 1 in request 6, 5 2 in request 8
			wantTier(t, "local", r.Local, blocks, total, 0, 0, 1, 0) // DRAM and flash
			wantTier(t, "total", r.Total, blocks, total, 0, 0, 1, 0, 2, 0, 1)
			// Writes 1 2 3 5 4 3 6 1 5 2 1; five reclaims of two records,
			// all live but 3 (request 6) and 1 (request 9).
			if r.FlashWrites != 11 || r.FlashReclaims != 5 || r.FlashDropped != 10 || r.FlashDroppedLive != 8 {
				t.Errorf("flash: %d writes, %d reclaims, %d dropped, %d live; want 11, 5, 10, 8", r.FlashWrites, r.FlashReclaims, r.FlashDropped, r.FlashDroppedLive)
			}
			// Through: 1 2 3 5 4 6, each once. On reclaim: 1 2, 5, 4 3, 6;
			// 5 and 2 dropped live again by the last reclaim are in cold.
			if r.ColdWritesThrough != 6 || r.ColdWritesReclaim != 6 {
				t.Errorf("cold writes: through %d, on reclaim %d; want 6, 6", r.ColdWritesThrough, r.ColdWritesReclaim)
			}
			// Flash ends with [1], written to cold by the first reclaim.
			if r.FlashUnbacked != 0 || r.FlashOnly != 0 {
				t.Errorf("end: %d unbacked, %d flash-only; want 0, 0", r.FlashUnbacked, r.FlashOnly)
			}
		})
	}
}

// TestFlashReclaimOrderByHand: LRU DRAM of 3 blocks above three 2-block
// segments. Segment A holds 1 2, B 3 4, C 5 6; 3 and 4 are read back into
// DRAM, so B has no live record. The next flash write needs a segment:
// oldest drops A (1 and 2, live: written to cold on reclaim), fewest-live
// drops B (its blocks are in DRAM). Then 1 2 are cold hits under oldest,
// flash hits under fewest-live.
func TestFlashReclaimOrderByHand(t *testing.T) {
	reqs := []Request{
		fullReq(1), fullReq(2), fullReq(3), // DRAM 1 2 3
		fullReq(4),    // evict 1 → A [1]
		fullReq(5),    // evict 2 → A [1 2]
		fullReq(6),    // evict 3 → B [3]
		fullReq(7),    // evict 4 → B [3 4]. DRAM 5 6 7
		fullReq(3, 4), // flash hits; B live 0. DRAM 5 6 7 3 4 → evict 5 6 → C [5 6]. DRAM 7 3 4
		fullReq(8),    // evict 7: every slot in use → reclaim (oldest: A; fewest-live: B), then [7]. DRAM 3 4 8
		fullReq(1, 2), // oldest: cold hits; fewest-live: flash hits. DRAM 3 4 8 1 2 → evict 3 4:
		// oldest: both are on B, nothing written;
		// fewest-live: [7 3], then reclaim A (1 2 in DRAM: live 0), [4]
	}
	const unique, blocks = 8, 12
	total := fullCost(0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 1)
	cfg := func(order string) FlashConfig {
		return FlashConfig{DRAMFrac: blocksFrac(3, unique), FlashFrac: blocksFrac(6, unique), SegmentBlocks: 2, Reclaim: order}
	}
	old := simulateChecked(t, reqs, "lru", cfg(ReclaimOldest))
	few := simulateChecked(t, reqs, "lru", cfg(ReclaimFewestLive))
	if old.Segments != 3 || old.FlashCapacity != 6 || old.DRAMCapacity != 3 {
		t.Fatalf("shape: %+v", old)
	}

	wantTier(t, "oldest dram", old.DRAM, blocks, total)
	wantTier(t, "oldest flash", old.Flash, blocks, total, 0, 1)
	wantTier(t, "oldest cold", old.Cold, blocks, total, 0, 1)
	wantTier(t, "fewest-live flash", few.Flash, blocks, total, 0, 1, 0, 1)
	wantTier(t, "fewest-live cold", few.Cold, blocks, total)
	if old.Total != few.Total {
		t.Errorf("totals differ: %+v, %+v", old.Total, few.Total)
	}

	// oldest: writes 1..7, one reclaim (A: 1 2 live).
	if old.FlashWrites != 7 || old.FlashReclaims != 1 || old.FlashDropped != 2 || old.FlashDroppedLive != 2 {
		t.Errorf("oldest flash: %+v", old)
	}
	// fewest-live: writes 1..7, 3 and 4 again; reclaims B then A, whose
	// blocks are all in DRAM when dropped.
	if few.FlashWrites != 9 || few.FlashReclaims != 2 || few.FlashDropped != 4 || few.FlashDroppedLive != 0 {
		t.Errorf("fewest-live flash: %+v", few)
	}
	// Write-through writes every block flash ever held, 1..7, once.
	// On reclaim: oldest wrote 1 2; fewest-live dropped nothing live.
	if old.ColdWritesThrough != 7 || old.ColdWritesReclaim != 2 || few.ColdWritesThrough != 7 || few.ColdWritesReclaim != 0 {
		t.Errorf("cold writes: oldest %d/%d, fewest-live %d/%d; want 7/2, 7/0",
			old.ColdWritesThrough, old.ColdWritesReclaim, few.ColdWritesThrough, few.ColdWritesReclaim)
	}
	// At the end flash holds 7 3 4 5 6 (oldest: [7], B [3 4], C [5 6];
	// fewest-live: C [5 6], [7 3], [4]), none in cold under
	// write-on-reclaim and none in DRAM (8 1 2).
	for _, r := range []FlashResult{old, few} {
		if r.FlashUnbacked != 5 || r.FlashOnly != 5 {
			t.Errorf("%s end: %d unbacked, %d flash-only; want 5, 5", r.Reclaim, r.FlashUnbacked, r.FlashOnly)
		}
	}
}

// TestFlashErrors: bad configurations are refused.
func TestFlashErrors(t *testing.T) {
	reqs := []Request{fullReq(1, 2, 3, 4), fullReq(1, 2, 5)}
	for _, c := range []struct {
		policy string
		cfg    FlashConfig
		msg    string
	}{
		{"lru", FlashConfig{DRAMFrac: 0, FlashFrac: 0.5, Reclaim: ReclaimOldest}, "DRAM capacity fraction 0"},
		{"lru", FlashConfig{DRAMFrac: 0.2, FlashFrac: math.NaN(), Reclaim: ReclaimOldest}, "flash capacity fraction NaN"},
		{"lru", FlashConfig{DRAMFrac: 0.2, FlashFrac: 0.5, SegmentBlocks: -1, Reclaim: ReclaimOldest}, "segment of -1 blocks"},
		{"lru", FlashConfig{DRAMFrac: 0.2, FlashFrac: 0.5, SegmentBlocks: 2, Reclaim: "newest"}, `unknown reclaim order "newest"`},
		{"lru", FlashConfig{DRAMFrac: 0.2, FlashFrac: 0.5, Reclaim: ReclaimOldest}, "holds no whole segment of 256 blocks"},
		{"bogus", FlashConfig{DRAMFrac: 0.2, FlashFrac: 0.5, SegmentBlocks: 1, Reclaim: ReclaimOldest}, "unknown policy"},
	} {
		if _, err := SimulateFlash(reqs, c.policy, c.cfg, nil); err == nil || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%s %+v: %v, want %q", c.policy, c.cfg, err, c.msg)
		}
	}
}

// TestFlashConversation checks, on the first 1,500 requests of the
// conversation trace, every policy and both reclaim orders, what holds
// whatever the trace: the bookkeeping; the total is the infinite cache's
// hits (every policy admits every block); flash only adds to DRAM-only
// Simulate's hits; write-on-reclaim writes no more than write-through; and
// a flash that never fills reclaims nothing, serves every block DRAM
// evicted, and writes nothing to cold on reclaim.
func TestFlashConversation(t *testing.T) {
	reqs := conversationPrefix(t, 1500)
	inf, err := Simulate(reqs, "lru", 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range Policies() {
		dramOnly, err := Simulate(reqs, p, 0.02, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, order := range ReclaimOrders() {
			for _, ff := range []float64{0.05, 0.2, 1} {
				r := simulateChecked(t, reqs, p, FlashConfig{DRAMFrac: 0.02, FlashFrac: ff, SegmentBlocks: 64, Reclaim: order})
				name := fmt.Sprintf("%s %s flash %g", p, order, ff)
				if r.Total.HitBlocks != inf.HitBlocks || math.Abs(r.Total.ComputeSaved-inf.ComputeSaved) > 1e-9 {
					t.Errorf("%s: total %+v, infinite cache %d hits, %.6f saved", name, r.Total, inf.HitBlocks, inf.ComputeSaved)
				}
				if r.Local.HitBlocks < dramOnly.HitBlocks || r.DRAM.HitBlocks < dramOnly.HitBlocks {
					t.Errorf("%s: local %d, DRAM %d hits below DRAM-only %d", name, r.Local.HitBlocks, r.DRAM.HitBlocks, dramOnly.HitBlocks)
				}
				if r.ColdWritesReclaim > r.ColdWritesThrough || r.ColdWritesThrough > r.FlashWrites {
					t.Errorf("%s: cold writes %d on reclaim, %d through, %d flash writes", name, r.ColdWritesReclaim, r.ColdWritesThrough, r.FlashWrites)
				}
				if ff == 1 && (r.FlashReclaims != 0 || r.Cold.HitBlocks != 0 || r.ColdWritesReclaim != 0 ||
					r.FlashWrites != r.ColdWritesThrough || r.FlashUnbacked != r.ColdWritesThrough || r.FlashOnly > r.FlashUnbacked) {
					t.Errorf("%s: a flash that never fills: %+v", name, r)
				}
			}
		}
	}
}
