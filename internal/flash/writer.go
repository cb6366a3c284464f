package flash

// The writer: one goroutine appends queued records to the open segment in
// large gathering writes, rolls to the next segment when one is full, and
// degrades the tier when the disk refuses writes.

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/gpucache/gpucache/internal/degrade"
)

const (
	// maxIOV bounds the buffers of one pwritev (IOV_MAX is 1024).
	maxIOV = 1024
	// maxBatchBytes bounds the bytes one write gathers (a larger record is
	// written alone).
	maxBatchBytes = 8 << 20
	// maxWriteFails is how many write errors in a row degrade the tier
	// (a full disk degrades it at once).
	maxWriteFails = 3
)

// batch is the records of one write.
type batch struct {
	items []*item
	bytes int64
	last  uint64 // the last ticket taken off the queue (written or skipped)
	roll  bool   // the next record does not fit the open segment
}

func (t *Tier) writeLoop() {
	defer t.wg.Done()
	for {
		select {
		case <-t.stop:
			t.syncDirty()
			return
		case <-t.wake:
		}
		for t.writeStep() {
		}
	}
}

// stopped reports whether Close has stopped the goroutines.
func (t *Tier) stopped() bool {
	select {
	case <-t.stop:
		return true
	default:
		return false
	}
}

// writeStep does one step of the writer's work and reports whether there
// may be more.
func (t *Tier) writeStep() bool {
	if t.stopped() {
		return false
	}
	t.mu.Lock()
	if t.mu.degraded {
		retry := t.mu.retry
		t.mu.retry = false
		t.mu.Unlock()
		return retry && t.retryWrites()
	}
	// Blocks dropped while queued are skipped here, so they never start
	// a segment.
	for len(t.mu.queue) > 0 && t.mu.queue[0].rec != nil && t.mu.queue[0].rec.dropped {
		t.mu.written = max(t.mu.written, t.mu.queue[0].ticket)
		t.mu.queue[0] = nil
		t.mu.queue = t.mu.queue[1:]
	}
	idle := len(t.mu.queue) == 0
	if idle || (t.mu.flushWant > t.mu.durable && t.mu.flushWant <= t.mu.written) {
		t.mu.Unlock()
		t.settle()
		return !idle
	}
	seg := t.mu.open
	if seg == nil || seg.sealed || seg.gone {
		t.mu.Unlock()
		if err := t.roll(); err != nil {
			t.writeFailed(err)
		}
		return true
	}
	b := t.popLocked(seg)
	if len(b.items) == 0 {
		t.mu.written = max(t.mu.written, b.last)
		t.mu.Unlock()
		return true
	}
	t.mu.Unlock()
	t.writeBatch(seg, &b)
	return true
}

// popLocked takes the next records off the queue, as many as fit the
// open segment and one write, and places them.
func (t *Tier) popLocked(seg *segment) batch {
	var b batch
	pos := seg.size
	for len(t.mu.queue) > 0 && len(b.items) < maxIOV {
		it := t.mu.queue[0]
		if it.rec != nil && it.rec.dropped {
			t.mu.queue[0] = nil
			t.mu.queue = t.mu.queue[1:]
			b.last = it.ticket
			continue
		}
		sz := it.size()
		if pos+sz > t.cfg.SegmentBytes {
			if len(b.items) == 0 {
				seg.sealed = true
				b.roll = true
			}
			break
		}
		if b.bytes > 0 && b.bytes+sz > t.batchBytes {
			break
		}
		t.mu.queue[0] = nil
		t.mu.queue = t.mu.queue[1:]
		it.off = pos
		pos += sz
		b.bytes += sz
		b.last = it.ticket
		if it.rec != nil {
			it.rec.state = stWriting
			it.rec.wseq = seg.seq
		} else if it.victim != nil {
			it.target = it.victim.wseq
		}
		b.items = append(b.items, it)
	}
	return b
}

// writeBatch encodes the batch's headers and writes it with one gathering
// write (the payloads are written from the buffers Evicted filled).
func (t *Tier) writeBatch(seg *segment, b *batch) {
	iovs := make([][]byte, 0, len(b.items))
	for _, it := range b.items {
		if e := it.rec; e != nil {
			h := recHeader{kind: kindBlock, digest: e.id.d, key: e.id.key, parent: e.parent, tokens: e.tokens, length: e.n, tenant: e.tenant}
			h.sum = payloadSum(&h, e.payload())
			it.sum = h.sum
			h.encode(e.buf[:recHeaderSize])
			iovs = append(iovs, e.buf)
			continue
		}
		hb := alignedBuf(recHeaderSize)
		h := recHeader{kind: kindTombstone, digest: it.id.d, key: it.id.key, target: it.target, tenant: it.tenant}
		h.encode(hb)
		iovs = append(iovs, hb)
	}
	off := b.items[0].off
	if t.hooks.BeforeWrite != nil {
		t.hooks.BeforeWrite(seg.seq, off, int(b.bytes))
	}
	start := time.Now()
	var err error
	if _, ok := t.cfg.Faults.Check(degrade.FlashIOError); ok {
		err = degrade.ErrInjected
	} else {
		_, err = seg.writer().WriteVAt(iovs, off)
	}
	t.st.writeNs.Add(uint64(time.Since(start)))
	t.st.writes.Add(1)
	if t.hooks.Written != nil {
		t.hooks.Written(seg.seq, off, int(b.bytes), err)
	}
	if err != nil {
		t.batchFailed(seg, b, fmt.Errorf("writing %s at %d: %w", seg.path, off, err))
		return
	}
	t.st.writtenBytes.Add(uint64(b.bytes))
	t.w.fails = 0
	t.w.dirty = seg
	t.batchDone(seg, b)
}

// batchDone publishes a written batch: its records are read from the
// segment from now on.
func (t *Tier) batchDone(seg *segment, b *batch) {
	t.mu.Lock()
	defer t.mu.Unlock()
	last := b.items[len(b.items)-1]
	if end := last.off + last.size(); end > seg.size {
		if !seg.gone {
			t.mu.bytes += end - seg.size
		}
		seg.size = end
	}
	var blocks, tombs uint64
	for _, it := range b.items {
		e := it.rec
		if e == nil {
			tombs++
			if it.target != 0 && it.target != seg.seq {
				seg.tombs = append(seg.tombs, tombRef{id: it.id, tenant: it.tenant, target: it.target})
			}
			continue
		}
		blocks++
		t.mu.staged -= e.n
		if e.dropped {
			e.buf = nil // dead on flash; the tombstone that killed it follows
			continue
		}
		e.state, e.seg, e.off, e.sum, e.buf = stOnDisk, seg, it.off, it.sum, nil
		seg.link(e)
		if seg.gone {
			t.dropLocked(e, dropLost)
			t.st.lostBlocks.Add(1)
		}
	}
	t.mu.written = max(t.mu.written, b.last)
	t.st.blocksWritten.Add(blocks)
	t.st.tombstonesWritten.Add(tombs)
}

// batchFailed puts a batch that did not write back at the head of the
// queue (its blocks stay readable from memory), cuts the segment back to
// its last good record and seals it.
func (t *Tier) batchFailed(seg *segment, b *batch, err error) {
	if terr := seg.writer().Truncate(seg.size); terr != nil {
		t.log.Warn("flash: cannot cut a segment back after a failed write; a restart ignores its torn tail", "path", seg.path, "err", terr)
	}
	t.mu.Lock()
	seg.sealed = true
	again := make([]*item, 0, len(b.items)+len(t.mu.queue))
	for _, it := range b.items {
		if e := it.rec; e != nil {
			e.wseq = 0
			if e.dropped {
				t.mu.staged -= e.n
				e.buf = nil
				continue
			}
			e.state = stQueued
		}
		again = append(again, it)
	}
	t.mu.queue = append(again, t.mu.queue...)
	t.mu.Unlock()
	t.writeFailed(err)
}

// writeFailed counts a failed write or sync and degrades the tier on a
// full disk or too many failures in a row.
func (t *Tier) writeFailed(err error) {
	t.w.fails++
	t.st.writeErrors.Add(1)
	t.mu.Lock()
	t.mu.writeErrs++
	t.progressLocked()
	t.mu.Unlock()
	t.log.Warn("flash: write failed", "dir", t.cfg.Dir, "err", err, "in_a_row", t.w.fails)
	if isNoSpace(err) || t.w.fails >= maxWriteFails {
		t.degrade(err)
	}
}

// degrade stops the tier taking blocks until a write succeeds again;
// what it holds stays readable.
func (t *Tier) degrade(err error) {
	t.mu.Lock()
	if t.mu.degraded {
		t.mu.Unlock()
		return
	}
	t.mu.degraded, t.mu.why = true, err
	t.progressLocked()
	t.mu.Unlock()
	t.st.degradations.Add(1)
	t.log.Error("flash: tier degraded: evicted blocks go to the next tier until a write succeeds again",
		"dir", t.cfg.Dir, "err", err, "retry_after", t.cfg.RetryAfter)
	t.armRetry()
	if t.hooks.Degraded != nil {
		t.hooks.Degraded(err)
	}
}

// armRetry asks the reclaimer to call Retry after RetryAfter.
func (t *Tier) armRetry() {
	select {
	case t.degradedCh <- struct{}{}:
	default:
	}
}

// retryWrites is a degraded tier's try: a fresh segment (file, header,
// sync). Once it is there the tier takes blocks again.
func (t *Tier) retryWrites() bool {
	if err := t.roll(); err != nil {
		t.st.writeErrors.Add(1)
		t.log.Warn("flash: still cannot write", "dir", t.cfg.Dir, "err", err)
		t.armRetry()
		if t.hooks.Degraded != nil {
			t.hooks.Degraded(err)
		}
		return false
	}
	t.w.fails = 0
	t.mu.Lock()
	t.mu.degraded, t.mu.why = false, nil
	t.progressLocked()
	t.mu.Unlock()
	t.log.Info("flash: tier writes again", "dir", t.cfg.Dir)
	if t.hooks.Degraded != nil {
		t.hooks.Degraded(nil)
	}
	return true
}

// settle syncs what was written and marks it durable.
func (t *Tier) settle() {
	t.mu.Lock()
	target := t.mu.written
	t.mu.Unlock()
	t.syncDirty()
	t.mu.Lock()
	if target > t.mu.durable {
		t.mu.durable = target
		t.progressLocked()
	}
	t.mu.Unlock()
}

// syncDirty syncs the segment written since its last sync.
func (t *Tier) syncDirty() {
	s := t.w.dirty
	if s == nil {
		return
	}
	t.w.dirty = nil
	t.st.syncs.Add(1)
	if err := s.writer().Datasync(); err != nil {
		t.mu.Lock()
		s.sealed = true // a file whose sync failed takes no more records
		t.mu.Unlock()
		t.writeFailed(fmt.Errorf("syncing %s: %w", s.path, err))
	}
}

// roll seals the open segment and starts the next one, reclaiming
// segments first while the files would pass Capacity.
func (t *Tier) roll() error {
	t.mu.Lock()
	old := t.mu.open
	t.mu.open = nil
	if old != nil {
		old.sealed = true
	}
	t.mu.Unlock()
	t.syncDirty()
	if old != nil && old.gone {
		old.closeFiles() // lost while open: the writer held its files
	}
	for {
		t.mu.Lock()
		need := t.mu.bytes+t.cfg.SegmentBytes > t.cfg.Capacity
		t.mu.Unlock()
		if !need {
			break
		}
		if err := t.askReclaim(); err != nil {
			return fmt.Errorf("making room for a segment: %w", err)
		}
	}
	s, err := t.createSegment()
	if err != nil {
		return err
	}
	t.mu.Lock()
	t.mu.segs[s.seq] = s
	t.mu.bytes += s.size
	t.mu.open = s
	t.mu.Unlock()
	return nil
}

// createSegment creates the next segment file and makes its header and
// its name durable.
func (t *Tier) createSegment() (*segment, error) {
	for range 8 {
		t.mu.Lock()
		seq := t.mu.nextSeq
		t.mu.nextSeq++
		t.mu.Unlock()
		s, err := openSegmentFiles(t.cfg.fs, t.cfg.Dir, seq, t.direct, true)
		if errors.Is(err, os.ErrExist) {
			continue // a file of that name appeared: skip the number
		}
		if err != nil {
			return nil, fmt.Errorf("creating segment %d in %s: %w", seq, t.cfg.Dir, err)
		}
		hb := alignedBuf(segHeaderSize)
		encodeSegHeader(hb, seq, t.cfg.SegmentBytes)
		if _, ok := t.cfg.Faults.Check(degrade.FlashIOError); ok {
			err = degrade.ErrInjected
		} else if _, err = s.writer().WriteVAt([][]byte{hb}, 0); err == nil {
			if err = s.writer().Datasync(); err == nil {
				err = syncDir(t.cfg.Dir)
			}
		}
		if err != nil {
			s.closeFiles()
			os.Remove(s.path)
			return nil, fmt.Errorf("starting %s: %w", s.path, err)
		}
		s.size = segHeaderSize
		return s, nil
	}
	return nil, fmt.Errorf("creating a segment in %s: the next names are taken", t.cfg.Dir)
}

// askReclaim asks the reclaimer for room and waits for it.
func (t *Tier) askReclaim() error {
	reply := make(chan error, 1)
	select {
	case t.reclaimReq <- reply:
	case <-t.stop:
		return ErrClosed
	}
	return <-reply
}
