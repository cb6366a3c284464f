package flash

import (
	"context"
	"errors"
	"os"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gpucache/gpucache/internal/degrade"
	"github.com/gpucache/gpucache/internal/lower/lowertest"
)

// gate holds the writer in BeforeWrite while it is shut.
type gate struct {
	shut    atomic.Bool
	entered chan struct{}
	release chan struct{}
}

func newGate() *gate {
	return &gate{entered: make(chan struct{}, 64), release: make(chan struct{})}
}

func (g *gate) beforeWrite(uint64, int64, int) {
	if g.shut.Load() {
		g.entered <- struct{}{}
		<-g.release
	}
}

func (g *gate) open() {
	g.shut.Store(false)
	close(g.release)
}

// TestFullDiskDegradesAndRecovers: ENOSPC degrades the tier at once
// (counted, logged once, flash_degraded 1): Evicted declines, what it
// holds is still served, a delete is applied and says its tombstone
// waits; a retry on a disk still full fails, one after space came back
// recovers and writes what waited.
func TestFullDiskDegradesAndRecovers(t *testing.T) {
	ctx := context.Background()
	fs := &testFS{}
	logs := &logCounter{}
	events := make(chan error, 8)
	g := newGate()
	cfg := testConfig(t)
	cfg.fs, cfg.Logger = fs, slogNew(logs)
	cfg.Hooks = &Hooks{Degraded: func(err error) { events <- err }, BeforeWrite: g.beforeWrite}
	tr := openTier(t, cfg)
	bs := blocks(t, "acme", "m1", 6, 30_000)
	put(t, tr, bs[:3]...)
	flush(t, tr)

	fs.noSpace.Store(true)
	g.shut.Store(true)
	put(t, tr, bs[3])
	<-g.entered // bs[4] is queued while the writer tries bs[3]
	put(t, tr, bs[4])
	g.open()
	if err := tr.Flush(ctx); !errors.Is(err, ErrDegraded) {
		t.Fatalf("flush on a full disk: %v", err)
	}
	if err := <-events; !isNoSpace(err) {
		t.Fatalf("degraded for %v", err)
	}
	if stat(t, tr, "flash_degraded") != 1 || stat(t, tr, "flash_degradations") != 1 || stat(t, tr, "flash_write_errors") != 1 {
		t.Fatalf("degraded %d, degradations %d, write errors %d", stat(t, tr, "flash_degraded"),
			stat(t, tr, "flash_degradations"), stat(t, tr, "flash_write_errors"))
	}
	if lowertest.Put(tr, bs[5]) || stat(t, tr, "flash_declined_degraded") != 1 {
		t.Fatal("a degraded tier took a block")
	}
	mustRead(t, tr, bs[:5]...) // three from flash, two from the buffer
	if known, err := tr.Delete(ctx, bs[0].ID.Namespace, bs[0].Digest, bs[0].Key); !known || !errors.Is(err, ErrDegraded) {
		t.Fatalf("delete while degraded: %v %v", known, err)
	}

	tr.Retry()
	if err := <-events; !isNoSpace(err) {
		t.Fatalf("a retry on a full disk: %v", err)
	}
	fs.noSpace.Store(false)
	tr.Retry()
	if err := <-events; err != nil {
		t.Fatalf("a retry with space: %v", err)
	}
	flush(t, tr)
	put(t, tr, bs[5])
	flush(t, tr)
	if stat(t, tr, "flash_degraded") != 0 || logs.count("degraded") != 1 {
		t.Fatalf("degraded %d; degraded logged %d times", stat(t, tr, "flash_degraded"), logs.count("degraded"))
	}
	closeTier(t, tr)
	tr = openTier(t, cfg)
	mustMiss(t, tr, bs[0])
	mustRead(t, tr, bs[1:]...)
}

// TestInjectedReadErrorIsAMiss: flash_io_error on a read is a miss,
// counted, and the tier goes on serving the other blocks.
func TestInjectedReadErrorIsAMiss(t *testing.T) {
	reg := &degrade.Registry{}
	g := newGate()
	cfg := testConfig(t)
	cfg.Faults, cfg.Hooks = reg, &Hooks{BeforeWrite: g.beforeWrite}
	tr := openTier(t, cfg)
	bs := blocks(t, "acme", "m1", 4, 10_000)
	put(t, tr, bs...)
	flush(t, tr)
	g.shut.Store(true) // the tombstone of the dropped block waits until the fault is gone
	disarm := reg.Arm(degrade.FlashIOError, degrade.Fail)
	mustMiss(t, tr, bs[1])
	disarm()
	g.open()
	if stat(t, tr, "flash_read_errors") != 1 || reg.Hits(degrade.FlashIOError) != 1 {
		t.Fatalf("read errors %d, fault hits %d", stat(t, tr, "flash_read_errors"), reg.Hits(degrade.FlashIOError))
	}
	mustRead(t, tr, bs[0], bs[2], bs[3])
	mustMiss(t, tr, bs[1]) // dropped: not read again
	flush(t, tr)
	if stat(t, tr, "flash_degraded") != 0 {
		t.Fatal("a read error degraded the tier")
	}
}

// TestInjectedWriteErrorDegrades: flash_io_error on writes degrades the
// tier after three failures in a row; the block waits in memory (and is
// served from there), and is written once the fault is gone and a retry
// succeeds.
func TestInjectedWriteErrorDegrades(t *testing.T) {
	reg := &degrade.Registry{}
	events := make(chan error, 8)
	cfg := testConfig(t)
	cfg.Faults, cfg.Hooks = reg, &Hooks{Degraded: func(err error) { events <- err }}
	tr := openTier(t, cfg)
	bs := blocks(t, "acme", "m1", 2, 10_000)
	disarm := reg.Arm(degrade.FlashIOError, degrade.Fail)
	put(t, tr, bs[0])
	if err := tr.Flush(context.Background()); !errors.Is(err, ErrDegraded) {
		t.Fatalf("flush under write faults: %v", err)
	}
	if err := <-events; !errors.Is(err, degrade.ErrInjected) {
		t.Fatalf("degraded for %v", err)
	}
	if stat(t, tr, "flash_write_errors") != maxWriteFails || stat(t, tr, "flash_degraded") != 1 {
		t.Fatalf("write errors %d, degraded %d", stat(t, tr, "flash_write_errors"), stat(t, tr, "flash_degraded"))
	}
	mustRead(t, tr, bs[0])
	if lowertest.Put(tr, bs[1]) {
		t.Fatal("a degraded tier took a block")
	}
	disarm()
	tr.Retry()
	if err := <-events; err != nil {
		t.Fatal(err)
	}
	flush(t, tr)
	closeTier(t, tr)
	tr = openTier(t, cfg)
	mustRead(t, tr, bs[0])
}

// TestSegmentDeletedByHand: a segment file removed under the tier is
// found by its link count; its blocks leave the index (never served
// again), the others stay. The open segment removed makes the writer
// start another.
func TestSegmentDeletedByHand(t *testing.T) {
	cfg, _ := reclaimConfig(t, ReclaimOldest)
	cfg.Capacity = 16 * mib
	tr := openTier(t, cfg)
	bs := blocks(t, "acme", "m1", 20, fifth)
	put(t, tr, bs[:15]...)
	flush(t, tr)
	s1, _ := location(t, tr, bs[0])
	s3, _ := location(t, tr, bs[14])
	if err := os.Remove(s1.path); err != nil {
		t.Fatal(err)
	}
	if n := tr.CheckSegments(); n != 1 {
		t.Fatalf("%d segments lost, want 1", n)
	}
	mustMiss(t, tr, bs[:5]...)
	mustRead(t, tr, bs[5:15]...)
	if stat(t, tr, "flash_segments_lost") != 1 || stat(t, tr, "flash_lost_blocks") != 5 || stat(t, tr, "flash_segments") != 2 {
		t.Fatalf("lost %d, lost blocks %d, segments %d", stat(t, tr, "flash_segments_lost"),
			stat(t, tr, "flash_lost_blocks"), stat(t, tr, "flash_segments"))
	}

	if err := os.Remove(s3.path); err != nil { // the open segment
		t.Fatal(err)
	}
	if n := tr.CheckSegments(); n != 1 {
		t.Fatalf("%d segments lost, want 1", n)
	}
	put(t, tr, bs[15:]...)
	flush(t, tr)
	if s, _ := location(t, tr, bs[15]); s.seq <= s3.seq {
		t.Fatalf("wrote into segment %d after %d was lost", s.seq, s3.seq)
	}
	mustRead(t, tr, bs[5:10]...)
	mustRead(t, tr, bs[15:]...)
	mustMiss(t, tr, bs[10:15]...)
	closeTier(t, tr)

	tr = openTier(t, cfg)
	mustMiss(t, tr, bs[:5]...)
	mustMiss(t, tr, bs[10:15]...)
	mustRead(t, tr, bs[5:10]...)
	mustRead(t, tr, bs[15:]...)
}

// TestLostSegmentFoundByAFailedRead: a read that fails checks its
// segment; a file that is gone drops all its blocks at once.
func TestLostSegmentFoundByAFailedRead(t *testing.T) {
	reg := &degrade.Registry{}
	g := newGate()
	cfg, _ := reclaimConfig(t, ReclaimOldest)
	cfg.Capacity = 16 * mib
	cfg.Faults, cfg.Hooks = reg, &Hooks{BeforeWrite: g.beforeWrite}
	tr := openTier(t, cfg)
	bs := blocks(t, "acme", "m1", 15, fifth)
	put(t, tr, bs...)
	flush(t, tr)
	s2, _ := location(t, tr, bs[5])
	if err := os.Remove(s2.path); err != nil {
		t.Fatal(err)
	}
	g.shut.Store(true)
	disarm := reg.Arm(degrade.FlashIOError, degrade.Fail)
	mustMiss(t, tr, bs[5])
	disarm()
	g.open()
	if stat(t, tr, "flash_segments_lost") != 1 || stat(t, tr, "flash_read_errors") != 1 {
		t.Fatalf("lost %d, read errors %d", stat(t, tr, "flash_segments_lost"), stat(t, tr, "flash_read_errors"))
	}
	mustMiss(t, tr, bs[6:10]...)
	mustRead(t, tr, bs[:5]...)
	mustRead(t, tr, bs[10:]...)
}

// TestFlippedByteOnDiskIsAMiss: a payload byte changed on disk under a
// running tier is a miss (flash_corrupt), never the changed bytes.
func TestFlippedByteOnDiskIsAMiss(t *testing.T) {
	for _, mode := range []string{DirectAuto, DirectOff} {
		t.Run(mode, func(t *testing.T) {
			cfg := testConfig(t)
			cfg.Direct = mode
			tr := openTier(t, cfg)
			bs := blocks(t, "acme", "m1", 5, 64*kib, 10_000)
			put(t, tr, bs...)
			flush(t, tr)
			s, off := location(t, tr, bs[2])
			f, err := os.OpenFile(s.path, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			var b [1]byte
			at := off + recHeaderSize + 777
			if _, err := f.ReadAt(b[:], at); err != nil {
				t.Fatal(err)
			}
			b[0] ^= 0x40
			if _, err := f.WriteAt(b[:], at); err != nil {
				t.Fatal(err)
			}
			f.Close()
			mustMiss(t, tr, bs[2])
			if stat(t, tr, "flash_corrupt") != 1 {
				t.Fatalf("flash_corrupt = %d", stat(t, tr, "flash_corrupt"))
			}
			mustRead(t, tr, bs[0], bs[1], bs[3], bs[4])
		})
	}
}

// TestEvictedNeverBlocksWhenTheWriterIsStuck: with the writer held in a
// write, Evicted fills the write buffer and then declines (counted),
// queued blocks are served from memory and can be deleted, and all of it
// lands once the writer moves.
func TestEvictedNeverBlocksWhenTheWriterIsStuck(t *testing.T) {
	g := newGate()
	cfg := testConfig(t)
	cfg.WriteBuffer = 1 * mib
	cfg.Hooks = &Hooks{BeforeWrite: g.beforeWrite}
	tr := openTier(t, cfg)
	bs := blocks(t, "acme", "m1", 8, 256*kib)
	g.shut.Store(true)
	put(t, tr, bs[0])
	<-g.entered // the writer is in the write of bs[0]
	taken := 1
	for _, b := range bs[1:] {
		if lowertest.Put(tr, b) {
			taken++
		}
	}
	if taken != 4 || stat(t, tr, "flash_declined_full") != 4 || stat(t, tr, "flash_write_buffer_bytes") != mib {
		t.Fatalf("taken %d, declined %d, buffer %d", taken, stat(t, tr, "flash_declined_full"), stat(t, tr, "flash_write_buffer_bytes"))
	}
	mustRead(t, tr, bs[:4]...)
	deleteBlocks(t, tr, bs[2], bs[0])
	g.open()
	flush(t, tr)
	mustRead(t, tr, bs[1], bs[3])
	mustMiss(t, tr, bs[0], bs[2])
	mustMiss(t, tr, bs[4:]...)
	if stat(t, tr, "flash_write_buffer_bytes") != 0 {
		t.Fatalf("buffer %d after the flush", stat(t, tr, "flash_write_buffer_bytes"))
	}
	closeTier(t, tr)
	tr = openTier(t, cfg)
	mustRead(t, tr, bs[1], bs[3])
	mustMiss(t, tr, bs[0], bs[2])
}

// TestDegradedTierRetriesAfterBackoff: the reclaimer's timer retries a
// degraded tier after RetryAfter (fake time).
func TestDegradedTierRetriesAfterBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fs := &testFS{}
		cfg := testConfig(t)
		cfg.fs, cfg.RetryAfter = fs, time.Minute
		tr, err := Open(cfg)
		if err != nil {
			t.Fatal(err)
		}
		bs := blocks(t, "acme", "m1", 2, 10_000)
		fs.noSpace.Store(true)
		put(t, tr, bs[0])
		if err := tr.Flush(context.Background()); !errors.Is(err, ErrDegraded) {
			t.Fatalf("flush on a full disk: %v", err)
		}
		fs.noSpace.Store(false)
		time.Sleep(time.Minute - time.Second)
		synctest.Wait()
		if d, _ := tr.Degraded(); !d {
			t.Fatal("recovered before RetryAfter")
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if d, why := tr.Degraded(); d {
			t.Fatalf("still degraded after RetryAfter: %v", why)
		}
		put(t, tr, bs[1])
		flush(t, tr)
		mustRead(t, tr, bs...)
		closeTier(t, tr)
	})
}
