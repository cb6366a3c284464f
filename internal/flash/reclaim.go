package flash

// The reclaimer: one goroutine makes room for the writer by deleting
// whole segments (offering their live blocks to OnReclaim first), checks
// that the segment files are still there, and times a degraded tier's
// retries.

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"time"
)

// errNoVictim: no segment may be reclaimed now.
var errNoVictim = errors.New("gpucache/flash: no segment can be reclaimed")

func (t *Tier) background() {
	defer t.wg.Done()
	t.trim()
	check := time.NewTicker(t.cfg.CheckEvery)
	defer check.Stop()
	retry := time.NewTimer(t.cfg.RetryAfter)
	retry.Stop()
	defer retry.Stop()
	for {
		select {
		case <-t.stop:
			return
		case reply := <-t.reclaimReq:
			reply <- t.reclaimOne()
		case <-check.C:
			t.CheckSegments()
		case <-t.degradedCh:
			retry.Reset(t.cfg.RetryAfter)
		case <-retry.C:
			t.Retry()
		}
	}
}

// trim reclaims segments while the files pass Capacity (a smaller
// Capacity than the files a restart found).
func (t *Tier) trim() {
	for {
		t.mu.Lock()
		over := t.mu.bytes > t.cfg.Capacity
		t.mu.Unlock()
		if !over {
			return
		}
		if err := t.reclaimOne(); err != nil {
			t.log.Error("flash: segments pass Capacity and none can be reclaimed", "dir", t.cfg.Dir, "err", err)
			return
		}
	}
}

// victimLocked picks the segment to reclaim: sealed, not the open one,
// free to go (mayGoLocked), and the oldest or the one with the fewest
// live bytes (the oldest of those).
func (t *Tier) victimLocked() *segment {
	var best *segment
	for _, s := range t.mu.segs {
		if !s.sealed || s == t.mu.open || !t.mayGoLocked(s) {
			continue
		}
		switch {
		case best == nil:
			best = s
		case t.cfg.Reclaim == ReclaimFewestLive && s.live != best.live:
			if s.live < best.live {
				best = s
			}
		case s.seq < best.seq:
			best = s
		}
	}
	return best
}

// mayGoLocked reports whether s may be deleted: none of its tombstones
// kills a record in a segment that still exists (deleting the tombstone
// first would bring that record back at a restart). The oldest segment
// may always go. It forgets tombstones whose target is gone.
func (t *Tier) mayGoLocked(s *segment) bool {
	s.tombs = slices.DeleteFunc(s.tombs, func(r tombRef) bool { return t.mu.segs[r.target] == nil })
	return len(s.tombs) == 0
}

// offer is a live block of a segment being reclaimed.
type offer struct {
	e   *entry
	h   recHeader
	off int64
}

// reclaimOne deletes one segment: its live blocks are offered to
// OnReclaim, then leave the index, then the file goes.
func (t *Tier) reclaimOne() error {
	t.mu.Lock()
	v := t.victimLocked()
	if v == nil {
		t.mu.Unlock()
		return errNoVictim
	}
	var offers []offer
	if t.cfg.OnReclaim != nil {
		for e := v.head; e != nil; e = e.snext {
			offers = append(offers, offer{e: e, h: e.header(), off: e.off})
		}
	}
	t.mu.Unlock()
	t.offerAll(v, offers)

	t.mu.Lock()
	if v.gone { // lost meanwhile: segmentLost did the rest
		t.mu.Unlock()
		return nil
	}
	blocks := 0
	for v.head != nil {
		t.dropLocked(v.head, dropReclaim)
		blocks++
	}
	v.gone = true
	delete(t.mu.segs, v.seq)
	t.mu.bytes -= v.size
	t.mu.Unlock()

	v.closeFiles()
	err := os.Remove(v.path)
	if err == nil {
		err = syncDir(t.cfg.Dir)
	}
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.log.Error("flash: a reclaimed segment's file may remain", "path", v.path, "err", err)
	}
	t.st.reclaims.Add(1)
	t.st.reclaimedBlocks.Add(uint64(blocks))
	t.log.Debug("flash: reclaimed a segment", "path", v.path, "blocks", blocks, "order", t.cfg.Reclaim)
	if t.hooks.Reclaimed != nil {
		t.hooks.Reclaimed(v.seq, blocks)
	}
	return nil
}

// offerAll reads back each block still live in v, verifies it and hands
// it to OnReclaim, under no lock.
func (t *Tier) offerAll(v *segment, offers []offer) {
	var buf []byte
	for _, o := range offers {
		t.mu.Lock()
		live := t.mu.index[o.e.id] == o.e
		t.mu.Unlock()
		if !live {
			continue
		}
		n := o.h.length
		if int64(cap(buf)) < roundUp(n) {
			buf = alignedBuf(int(roundUp(n)))
		}
		f, b := v.bio, buf[:n]
		if v.dio != nil {
			f, b = v.dio, buf[:roundUp(n)]
		}
		var err error
		if len(b) > 0 {
			_, err = f.ReadAt(b, o.off+recHeaderSize)
		}
		t.st.reads.Add(1)
		p := buf[:n]
		if err == nil && payloadSum(&o.h, p) != o.h.sum {
			err = &CorruptError{Path: v.path, Off: o.off, Reason: "payload checksum mismatch"}
		}
		if err != nil {
			if errors.Is(err, ErrCorrupt) {
				t.st.corrupt.Add(1)
			} else {
				t.st.readErrors.Add(1)
			}
			t.log.Warn("flash: a reclaimed block did not read back; not offered", "err", err)
			continue
		}
		t.st.reclaimOffered.Add(1)
		if t.cfg.OnReclaim(o.h.digest, o.h.key, o.h.parent, o.h.tokens, p) {
			t.st.reclaimTaken.Add(1)
		}
	}
}

// CheckSegments checks that every segment file still has its name (a
// file deleted by hand has a link count of 0 while the tier holds it
// open) and drops the blocks of each one that is gone
// (flash_segments_lost). The reclaimer calls it every CheckEvery, and a
// failed read checks its segment. It returns how many were lost.
func (t *Tier) CheckSegments() int {
	t.mu.Lock()
	segs := slices.Collect(maps.Values(t.mu.segs))
	t.mu.Unlock()
	lost := 0
	for _, s := range segs {
		if t.checkSegment(s) {
			lost++
		}
	}
	return lost
}

// checkSegment reports whether s's file is gone, and if so drops it.
func (t *Tier) checkSegment(s *segment) bool {
	n, err := s.bio.Nlink()
	if err != nil || n > 0 {
		return false
	}
	t.segmentLost(s)
	return true
}

// segmentLost drops a segment whose file is gone: its blocks leave the
// index, and its tombstones that still protect against an older record
// are queued again.
func (t *Tier) segmentLost(s *segment) {
	t.mu.Lock()
	if s.gone {
		t.mu.Unlock()
		return
	}
	s.gone, s.sealed = true, true
	delete(t.mu.segs, s.seq)
	t.mu.bytes -= s.size
	blocks := 0
	for s.head != nil {
		t.dropLocked(s.head, dropLost)
		blocks++
	}
	again := 0
	for _, r := range s.tombs {
		if t.mu.segs[r.target] != nil {
			t.enqueueLocked(&item{id: r.id, tenant: r.tenant, target: r.target})
			again++
		}
	}
	open := s == t.mu.open
	t.mu.Unlock()
	if !open {
		s.closeFiles() // the writer closes the open one when it rolls
	}
	t.st.segmentsLost.Add(1)
	t.st.lostBlocks.Add(uint64(blocks))
	t.log.Error("flash: a segment file is gone; its blocks are dropped", "path", s.path, "blocks", blocks,
		"tombstones_rewritten", again, "err", fmt.Errorf("%s: link count 0", s.path))
	if again > 0 {
		t.kick()
	}
}
