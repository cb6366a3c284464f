package replay

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/gpucache/gpucache/internal/policy"
)

// The flash tier's reclaim orders: which whole segment a full flash tier
// drops to make room.
const (
	// ReclaimOldest drops the segment written longest ago (a FIFO log).
	ReclaimOldest = "oldest"
	// ReclaimFewestLive drops the segment with the fewest live blocks
	// (see SimulateFlash), the oldest among equals.
	ReclaimFewestLive = "fewest-live"
)

// ReclaimOrders lists the reclaim orders SimulateFlash accepts.
func ReclaimOrders() []string { return []string{ReclaimOldest, ReclaimFewestLive} }

// DefaultFlashSegment is the flash tier's default segment size, in blocks.
//
// A segment file holds a fixed number of bytes, so its size in blocks does
// not scale with the trace: 256 blocks of 512 tokens is 16 GiB of
// Llama-3-8B fp16 KV (64 MiB a block) and 1 GiB at 4 MiB a block (a
// 16-fold smaller model or quantized KV). Whole-segment reclaim is coarse
// only against the flash capacity: at 256 blocks the Mooncake
// conversation trace's flash holds 71 segments at 10% of its 182,790
// unique blocks and 357 at 50%, so one reclaim drops at most 1.4% of it.
// A segment of 1% of the unique blocks would give the 10% flash only 10
// segments, each reclaim a tenth of it.
const DefaultFlashSegment = 256

// FlashConfig is one two-tier simulation's cache: DRAM (the policy's
// cache) above a log-structured flash tier.
type FlashConfig struct {
	DRAMFrac      float64 // DRAM capacity, a fraction of the unique blocks
	FlashFrac     float64 // flash capacity, a fraction of the unique blocks
	SegmentBlocks int     // blocks per flash segment; 0 is DefaultFlashSegment
	Reclaim       string  // ReclaimOldest or ReclaimFewestLive
}

// TierHits is the part of a two-tier run's leading-run hits one tier
// served (or, for FlashResult.Local and Total, several).
type TierHits struct {
	HitBlocks    int64   `json:"hit_blocks"`
	HitRatio     float64 `json:"hit_ratio"` // HitBlocks / block accesses
	SavedTokens  int64   `json:"saved_tokens"`
	ComputeSaved float64 `json:"compute_saved"` // fraction of all prefill attention work
}

// FlashResult is one simulated (policy, DRAM, flash, reclaim order) run of
// SimulateFlash.
type FlashResult struct {
	Policy        string  `json:"policy"`
	DRAMFrac      float64 `json:"dram_frac"`
	DRAMCapacity  int     `json:"dram_blocks"` // floor(DRAMFrac × unique)
	FlashFrac     float64 `json:"flash_frac"`
	FlashCapacity int     `json:"flash_blocks"` // Segments × SegmentBlocks
	SegmentBlocks int     `json:"segment_blocks"`
	Segments      int     `json:"segments"` // floor(floor(FlashFrac × unique) / SegmentBlocks)
	Reclaim       string  `json:"reclaim"`  // the reclaim order
	Requests      int     `json:"requests"`
	Blocks        int64   `json:"blocks"` // block accesses
	PromptTokens  int64   `json:"prompt_tokens"`

	// The leading-run hits by the tier that served them, DRAM and flash
	// together (Local) and all three (Total).
	DRAM  TierHits `json:"dram"`
	Flash TierHits `json:"flash"`
	Cold  TierHits `json:"cold"`
	Local TierHits `json:"local"`
	Total TierHits `json:"total"`

	FlashWrites      int64 `json:"flash_writes"`       // blocks appended to flash
	FlashReclaims    int64 `json:"flash_reclaims"`     // segments reclaimed
	FlashDropped     int64 `json:"flash_dropped"`      // records the reclaims dropped
	FlashDroppedLive int64 `json:"flash_dropped_live"` // of which live (the block not in DRAM)

	// Blocks written to the cold tier, each block at most once: under
	// write-through, every block written to flash (at its first flash
	// write); under write-on-reclaim, every live block of a reclaimed
	// segment not written to cold before.
	ColdWritesThrough int64 `json:"cold_writes_through"`
	ColdWritesReclaim int64 `json:"cold_writes_on_reclaim"`
	// At the end, under write-on-reclaim: flash records of blocks not yet
	// written to cold (FlashUnbacked), and those of them whose block is not
	// in DRAM either (FlashOnly: what losing the disk would lose and
	// write-through would keep).
	FlashUnbacked int64 `json:"flash_unbacked_end"`
	FlashOnly     int64 `json:"flash_only_end"`

	Seconds float64 `json:"seconds"` // wall time of the run
}

// SimulateFlash replays reqs through two tiers: a DRAM cache of
// floor(DRAMFrac × unique) blocks under the named policy, run exactly as
// Simulate runs it (flash changes nothing in DRAM), above a flash tier of
// log-structured segments, and below both a cold tier that holds every
// block ever evicted from DRAM.
//
// The flash tier has floor(floor(FlashFrac × unique) / SegmentBlocks)
// segments of SegmentBlocks blocks (all blocks count the same, whatever
// their tokens). A block DRAM evicts is appended to the open segment,
// unless flash holds it already; when the open segment is full, a new one
// opens, and when every segment is in use, one is first reclaimed whole:
// every record in it is dropped at once, the segment picked by cfg.Reclaim.
// A block missing from DRAM that flash holds is read back into DRAM (it is
// inserted into DRAM like any missing block) and its flash record stays:
// when DRAM evicts the block again it is not rewritten. Nothing else drops
// a record (a trace has no deletes).
//
// Live: a flash record is live while its block is not in DRAM. Dropping a
// record whose block DRAM holds loses nothing now (DRAM evicting the block
// later writes it to flash again); dropping a live record drops the
// block's last copy above the cold tier. ReclaimFewestLive picks the
// segment with the fewest live records. (Counting every record as live, a
// replay without deletes would leave every full segment with
// SegmentBlocks of them, and fewest-live would always fall back to its
// tie-break, the oldest.) Under write-on-reclaim, the live records a
// reclaim drops are what it writes to cold.
//
// The hits of a request are, as in Simulate, the leading run of its blocks
// found, now in any tier, each counted in the tier that serves it: DRAM,
// else flash, else cold (a block DRAM evicted once and neither DRAM nor
// flash holds). The run ends at the first block never cached. Tokens and
// compute saved are defined as in Simulate; each tier's ComputeSaved is
// its hits' share of all prefill attention work, and the tiers' shares add
// up to Total's.
//
// Both cold-write modes see the same hits: under write-on-reclaim a block
// evicted from DRAM is in flash until a reclaim drops its live record,
// which writes it to cold, so every block DRAM has evicted is in DRAM,
// flash or cold either way. One run counts the cold writes of both.
func SimulateFlash(reqs []Request, policyName string, cfg FlashConfig, progress func(done int)) (FlashResult, error) {
	res, _, err := simulateFlash(reqs, policyName, cfg, progress)
	return res, err
}

// simulateFlash is SimulateFlash; it also returns the tiers' final state.
func simulateFlash(reqs []Request, policyName string, cfg FlashConfig, progress func(done int)) (FlashResult, *twoTier, error) {
	start := time.Now()
	positive := func(f float64) bool { return !math.IsNaN(f) && f > 0 && !math.IsInf(f, 0) }
	if !positive(cfg.DRAMFrac) {
		return FlashResult{}, nil, fmt.Errorf("replay: DRAM capacity fraction %v is not positive", cfg.DRAMFrac)
	}
	if !positive(cfg.FlashFrac) {
		return FlashResult{}, nil, fmt.Errorf("replay: flash capacity fraction %v is not positive", cfg.FlashFrac)
	}
	if cfg.SegmentBlocks == 0 {
		cfg.SegmentBlocks = DefaultFlashSegment
	}
	if cfg.SegmentBlocks < 0 {
		return FlashResult{}, nil, fmt.Errorf("replay: flash segment of %d blocks", cfg.SegmentBlocks)
	}
	if !slices.Contains(ReclaimOrders(), cfg.Reclaim) {
		return FlashResult{}, nil, fmt.Errorf("replay: unknown reclaim order %q (known: %v)", cfg.Reclaim, ReclaimOrders())
	}
	pol, opt, next, err := simPolicy(policyName, reqs, policy.DefaultCostModel)
	if err != nil {
		return FlashResult{}, nil, err
	}
	unique := UniqueBlocks(reqs)
	dramCap := int(cfg.DRAMFrac * float64(unique))
	flashCap := int(cfg.FlashFrac * float64(unique))
	segments := flashCap / cfg.SegmentBlocks
	if segments < 1 {
		return FlashResult{}, nil, fmt.Errorf("replay: flash capacity %d blocks (%g of %d unique) holds no whole segment of %d blocks",
			flashCap, cfg.FlashFrac, unique, cfg.SegmentBlocks)
	}
	res := FlashResult{
		Policy: policyName, DRAMFrac: cfg.DRAMFrac, DRAMCapacity: dramCap,
		FlashFrac: cfg.FlashFrac, FlashCapacity: segments * cfg.SegmentBlocks, SegmentBlocks: cfg.SegmentBlocks,
		Segments: segments, Reclaim: cfg.Reclaim, Requests: len(reqs),
	}
	t := newTwoTier(unique, segments, cfg.SegmentBlocks, cfg.Reclaim == ReclaimFewestLive)
	c := cache{
		index:    make(map[uint64]policy.ID, min(unique, dramCap+maxRequestBlocks(reqs))+1),
		pol:      pol,
		inserted: t.inserted,
		evicted:  t.evicted,
	}
	var (
		blocks []BlockInfo
		hits   tierTally
		access int
	)
	for i := range reqs {
		blocks = appendPromptBlocks(blocks[:0], &reqs[i])
		t.countHits(blocks, &hits)
		access = c.place(blocks, opt, next, access)
		if err := c.shrinkTo(dramCap, policyName); err != nil {
			return res, t, err
		}
		if progress != nil && ((i+1)%progressEvery == 0 || i+1 == len(reqs)) {
			progress(i + 1)
		}
	}
	hits.fill(&res)
	t.fill(&res)
	res.Seconds = time.Since(start).Seconds()
	return res, t, nil
}

// The tiers a hit is counted in.
const (
	tierDRAM = iota
	tierFlash
	tierCold
	tiers
)

// tierTally sums a two-tier run's accesses and hits.
type tierTally struct {
	blocks, tokens int64
	cost           float64 // of every block
	hits, saved    [tiers]int64
	savedCost      [tiers]float64
}

// fill sets res's access counts and TierHits.
func (a *tierTally) fill(res *FlashResult) {
	res.Blocks, res.PromptTokens = a.blocks, a.tokens
	th := func(ts ...int) TierHits {
		var h TierHits
		var cost float64
		for _, t := range ts {
			h.HitBlocks += a.hits[t]
			h.SavedTokens += a.saved[t]
			cost += a.savedCost[t]
		}
		if a.blocks > 0 {
			h.HitRatio = float64(h.HitBlocks) / float64(a.blocks)
		}
		if a.cost > 0 {
			h.ComputeSaved = cost / a.cost
		}
		return h
	}
	res.DRAM, res.Flash, res.Cold = th(tierDRAM), th(tierFlash), th(tierCold)
	res.Local, res.Total = th(tierDRAM, tierFlash), th(tierDRAM, tierFlash, tierCold)
}

// twoTier is the simulated flash tier below the DRAM cache, and the
// blocks' presence in every tier. Blocks are named by dense indices in
// the order DRAM first caches them.
type twoTier struct {
	dense map[uint64]int32 // hash id → dense index

	// By dense index.
	seg           []int32 // the segment slot holding its flash record; -1: none
	inDRAM        []bool
	inCold        []bool // evicted from DRAM at least once (the cold tier holds it)
	flashed       []bool // written to flash at least once (write-through wrote it to cold)
	coldOnReclaim []bool // written to cold by a reclaim (write-on-reclaim)

	segs      []segment // by slot
	free      []int32   // slots not in use
	active    int32     // the open segment's slot; -1: none
	seq       uint64    // segments opened so far
	segBlocks int
	order     segOrder // the slots in use, the next victim first

	writes, reclaims, dropped, droppedLive, coldThrough, coldReclaim int64
}

// segment is one slot of the flash tier: the records written to it since
// it was opened, all still valid (a block has at most one record, and only
// a reclaim drops records).
type segment struct {
	seq    uint64  // when it was opened (1 = first)
	blocks []int32 // its records' blocks, in write order
	live   int     // records whose block is not in DRAM
}

func newTwoTier(unique, segments, segBlocks int, fewestLive bool) *twoTier {
	t := &twoTier{
		dense:     make(map[uint64]int32, unique),
		segs:      make([]segment, segments),
		free:      make([]int32, segments),
		active:    -1,
		segBlocks: segBlocks,
	}
	for i := range t.free {
		t.free[i] = int32(segments - 1 - i) // slot 0 is used first
	}
	t.order = segOrder{pos: slices.Repeat([]int32{-1}, segments)}
	if fewestLive {
		t.order.less = func(a, b int32) bool {
			sa, sb := &t.segs[a], &t.segs[b]
			return sa.live < sb.live || (sa.live == sb.live && sa.seq < sb.seq)
		}
	} else {
		t.order.less = func(a, b int32) bool { return t.segs[a].seq < t.segs[b].seq }
	}
	return t
}

// countHits tallies a request's blocks and its leading run of blocks
// found in any tier, each in the tier that serves it.
func (t *twoTier) countHits(blocks []BlockInfo, a *tierTally) {
	hit := true
	for _, b := range blocks {
		cost := blockCost(b.Position, b.Tokens)
		a.cost += cost
		a.blocks++
		a.tokens += int64(b.Tokens)
		if !hit {
			continue
		}
		tier := t.tier(b.Hash)
		if tier < 0 {
			hit = false
			continue
		}
		a.hits[tier]++
		a.saved[tier] += int64(b.Tokens)
		a.savedCost[tier] += cost
	}
}

// tier is the tier that serves h, or -1 when none holds it.
func (t *twoTier) tier(h uint64) int {
	d, ok := t.dense[h]
	switch {
	case !ok:
		return -1
	case t.inDRAM[d]:
		return tierDRAM
	case t.seg[d] >= 0:
		return tierFlash
	case t.inCold[d]:
		return tierCold
	}
	return -1
}

// inserted is told that DRAM caches h: its flash record, if any, is no
// longer live.
func (t *twoTier) inserted(h uint64) {
	d, ok := t.dense[h]
	if !ok {
		d = int32(len(t.seg))
		t.dense[h] = d
		t.seg = append(t.seg, -1)
		t.inDRAM = append(t.inDRAM, false)
		t.inCold = append(t.inCold, false)
		t.flashed = append(t.flashed, false)
		t.coldOnReclaim = append(t.coldOnReclaim, false)
	}
	t.inDRAM[d] = true
	if s := t.seg[d]; s >= 0 {
		t.segs[s].live--
		t.order.fix(s)
	}
}

// evicted is told that DRAM evicted h: its flash record is live again, or
// it is written to flash.
func (t *twoTier) evicted(h uint64) {
	d := t.dense[h]
	t.inDRAM[d] = false
	t.inCold[d] = true
	if s := t.seg[d]; s >= 0 {
		t.segs[s].live++
		t.order.fix(s)
		return
	}
	t.write(d)
}

// write appends block d, which flash does not hold and DRAM just evicted,
// to the open segment.
func (t *twoTier) write(d int32) {
	if t.active < 0 || len(t.segs[t.active].blocks) == t.segBlocks {
		t.open()
	}
	s := &t.segs[t.active]
	s.blocks = append(s.blocks, d)
	s.live++
	t.order.fix(t.active)
	t.seg[d] = t.active
	t.writes++
	if !t.flashed[d] {
		t.flashed[d] = true
		t.coldThrough++
	}
}

// open opens a new segment, first reclaiming the reclaim order's victim
// when every slot is in use.
func (t *twoTier) open() {
	if len(t.free) == 0 {
		t.reclaim(t.order.slots[0])
	}
	k := len(t.free) - 1
	slot := t.free[k]
	t.free = t.free[:k]
	t.seq++
	t.segs[slot] = segment{seq: t.seq, blocks: t.segs[slot].blocks[:0]}
	t.order.push(slot)
	t.active = slot
}

// reclaim drops every record of the segment in slot; under
// write-on-reclaim, its live blocks not yet in cold are written there.
func (t *twoTier) reclaim(slot int32) {
	s := &t.segs[slot]
	for _, d := range s.blocks {
		t.seg[d] = -1
		t.dropped++
		if t.inDRAM[d] {
			continue
		}
		t.droppedLive++
		if !t.coldOnReclaim[d] {
			t.coldOnReclaim[d] = true
			t.coldReclaim++
		}
	}
	s.blocks, s.live = s.blocks[:0], 0
	t.reclaims++
	t.order.remove(slot)
	t.free = append(t.free, slot)
	if t.active == slot {
		t.active = -1
	}
}

// fill sets res's flash and cold counts.
func (t *twoTier) fill(res *FlashResult) {
	res.FlashWrites, res.FlashReclaims = t.writes, t.reclaims
	res.FlashDropped, res.FlashDroppedLive = t.dropped, t.droppedLive
	res.ColdWritesThrough, res.ColdWritesReclaim = t.coldThrough, t.coldReclaim
	for d, s := range t.seg {
		if s < 0 || t.coldOnReclaim[d] {
			continue
		}
		res.FlashUnbacked++
		if !t.inDRAM[d] {
			res.FlashOnly++
		}
	}
}

// segOrder is an indexed binary heap of the segment slots in use, by the
// reclaim order's less.
type segOrder struct {
	slots []int32
	pos   []int32 // by slot: index in slots, -1 when absent
	less  func(a, b int32) bool
}

func (o *segOrder) push(slot int32) {
	o.pos[slot] = int32(len(o.slots))
	o.slots = append(o.slots, slot)
	o.up(len(o.slots) - 1)
}

func (o *segOrder) remove(slot int32) {
	i, last := int(o.pos[slot]), len(o.slots)-1
	if i != last {
		o.swap(i, last)
	}
	o.slots = o.slots[:last]
	o.pos[slot] = -1
	if i != last {
		o.fixAt(i)
	}
}

// fix restores the order after slot's key changed.
func (o *segOrder) fix(slot int32) {
	if i := o.pos[slot]; i >= 0 {
		o.fixAt(int(i))
	}
}

func (o *segOrder) fixAt(i int) {
	if !o.down(i) {
		o.up(i)
	}
}

func (o *segOrder) swap(i, j int) {
	s := o.slots
	s[i], s[j] = s[j], s[i]
	o.pos[s[i]] = int32(i)
	o.pos[s[j]] = int32(j)
}

func (o *segOrder) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !o.less(o.slots[i], o.slots[p]) {
			return
		}
		o.swap(i, p)
		i = p
	}
}

// down sifts i down and reports whether it moved.
func (o *segOrder) down(i int) bool {
	i0, n := i, len(o.slots)
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		c := l
		if r := l + 1; r < n && o.less(o.slots[r], o.slots[l]) {
			c = r
		}
		if !o.less(o.slots[c], o.slots[i]) {
			break
		}
		o.swap(i, c)
		i = c
	}
	return i != i0
}
