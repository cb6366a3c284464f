package flash

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"time"

	"github.com/gpucache/gpucache/api/identity"
	"github.com/gpucache/gpucache/internal/degrade"
	"github.com/gpucache/gpucache/internal/lower"
)

// Refill implements lower.Tier: it finds (d, key) in the index, reserves
// the slot with one alloc, and reads the payload into it with one pread
// (O_DIRECT when the slot and the length are aligned), then verifies its
// checksum under the identity the index holds. A block still queued is
// copied from memory. Anything that does not verify is a miss: the record
// leaves the index and is counted (flash_corrupt, flash_read_errors).
func (t *Tier) Refill(ctx context.Context, ns identity.Namespace, d identity.NamespaceDigest, key identity.BlockKey, alloc lower.Alloc) (int, bool) {
	if ctx.Err() != nil {
		t.st.misses.Add(1)
		return 0, false
	}
	t.mu.Lock()
	t.learnLocked(d, ns.Tenant)
	e := t.mu.index[blockID{d, key}]
	if e == nil || t.mu.closed {
		t.mu.Unlock()
		t.st.misses.Add(1)
		return 0, false
	}
	n := e.n
	if e.buf != nil {
		// Queued or being written: the payload bytes are immutable, so
		// they are copied outside the lock.
		src := e.payload()
		t.mu.Unlock()
		buf, ok := alloc(int(n))
		if !ok || int64(len(buf)) != n {
			t.st.misses.Add(1)
			return 0, false
		}
		copy(buf, src)
		t.st.hits.Add(1)
		t.st.bufferHits.Add(1)
		return int(n), true
	}
	h, seg, off := e.header(), e.seg, e.off
	t.mu.Unlock()

	buf, ok := alloc(int(n))
	if !ok || int64(len(buf)) != n {
		t.st.misses.Add(1)
		return 0, false
	}
	sum, err := t.readSummed(ctx, seg, off+recHeaderSize, buf, identitySum(&h))
	if err == nil && sum != h.sum {
		err = &CorruptError{Path: seg.path, Off: off, Reason: fmt.Sprintf("payload checksum mismatch for %s/%s", d, key)}
	}
	if err != nil {
		t.readFailed(e, seg, err)
		t.st.misses.Add(1)
		return 0, false
	}
	t.st.hits.Add(1)
	return int(n), true
}

// readPayload reads buf at off of seg: O_DIRECT when buf and its length
// are aligned, buffered otherwise.
func (t *Tier) readPayload(ctx context.Context, seg *segment, off int64, buf []byte) error {
	if m, ok := t.cfg.Faults.Check(degrade.FlashIOError); ok {
		if m == degrade.Hang {
			<-ctx.Done()
		}
		return fmt.Errorf("reading %s: %w", seg.path, degrade.ErrInjected)
	}
	if len(buf) == 0 {
		return nil
	}
	f := seg.bio
	if seg.dio != nil && isAligned(buf) {
		f = seg.dio
	}
	start := time.Now()
	_, err := f.ReadAt(buf, off)
	t.st.readNs.Add(uint64(time.Since(start)))
	t.st.reads.Add(1)
	if err != nil {
		return fmt.Errorf("reading %s at %d: %w", seg.path, off, err)
	}
	t.st.readBytes.Add(uint64(len(buf)))
	return nil
}

// pipeChunk is the piece a large payload is read in (readSummed);
// payloads up to twice it are read in one call.
const pipeChunk = 4 << 20

// readSummed reads buf at off of seg and returns the CRC-32C of its bytes
// continuing crc. A payload larger than two chunks is read as chunks, all
// in flight at once (as deep a queue as one large read gives the disk),
// and each chunk is checksummed, in order, as soon as it has arrived, so
// the checksum costs almost no time after the last byte: one read call
// and then the whole checksum made a 32 MiB refill about a tenth slower
// than the disk's sequential read.
func (t *Tier) readSummed(ctx context.Context, seg *segment, off int64, buf []byte, crc uint32) (uint32, error) {
	if len(buf) <= 2*pipeChunk {
		if err := t.readPayload(ctx, seg, off, buf); err != nil {
			return 0, err
		}
		return crc32.Update(crc, castagnoli, buf), nil
	}
	n := (len(buf) + pipeChunk - 1) / pipeChunk
	errs := make([]chan error, n)
	for i := range n {
		errs[i] = make(chan error, 1)
		chunk := buf[i*pipeChunk : min((i+1)*pipeChunk, len(buf))]
		go func() { errs[i] <- t.readPayload(ctx, seg, off+int64(i*pipeChunk), chunk) }()
	}
	var first error
	for i := range n {
		if err := <-errs[i]; err != nil && first == nil {
			first = err
		}
		if first == nil {
			crc = crc32.Update(crc, castagnoli, buf[i*pipeChunk:min((i+1)*pipeChunk, len(buf))])
		}
	}
	return crc, first
}

// readFailed drops e after a read of it failed (when it is still the
// index's entry: a record reclaimed under the read is just a miss), and
// checks whether its segment file is gone.
func (t *Tier) readFailed(e *entry, seg *segment, err error) {
	t.mu.Lock()
	if t.mu.index[e.id] != e || t.mu.closed {
		t.mu.Unlock()
		return
	}
	why := dropReadError
	if errors.Is(err, ErrCorrupt) {
		why = dropCorrupt
		t.st.corrupt.Add(1)
	} else {
		t.st.readErrors.Add(1)
	}
	tomb := t.dropLocked(e, why)
	t.mu.Unlock()
	t.log.Warn("flash: dropped a block that did not read back", "err", err)
	if tomb {
		t.kick()
	}
	if why == dropReadError {
		t.checkSegment(seg)
	}
}
