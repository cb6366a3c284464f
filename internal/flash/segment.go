package flash

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// segment is one segment file. Fields after the files are guarded by
// Tier.mu.
type segment struct {
	seq  uint64
	path string
	// dio is the O_DIRECT descriptor (the open segment's writes, and
	// aligned reads); nil in buffered mode. bio is buffered: unaligned
	// reads, scans and the buffered mode's writes.
	dio file
	bio file

	size   int64 // bytes of the file the tier accounts (written records)
	live   int64 // payload bytes of its live records
	blocks int   // its live records
	head   *entry
	tail   *entry
	// tombs are its tombstones that kill a record in an older segment:
	// while that segment exists this one must not be reclaimed (and if
	// this file is lost, they are written again).
	tombs  []tombRef
	sealed bool // no more appends (every segment but the open one)
	gone   bool // reclaimed or lost: out of Tier.mu.segs
}

// tombRef is a tombstone a segment holds, and the segment it protects.
type tombRef struct {
	id     blockID
	tenant string
	target uint64
}

// writer is the descriptor writes go to.
func (s *segment) writer() file {
	if s.dio != nil {
		return s.dio
	}
	return s.bio
}

// link adds a written entry to the segment.
func (s *segment) link(e *entry) {
	e.sprev, e.snext = s.tail, nil
	if s.tail != nil {
		s.tail.snext = e
	} else {
		s.head = e
	}
	s.tail = e
	s.live += e.n
	s.blocks++
}

// unlink removes e from the segment.
func (s *segment) unlink(e *entry) {
	if e.sprev != nil {
		e.sprev.snext = e.snext
	} else {
		s.head = e.snext
	}
	if e.snext != nil {
		e.snext.sprev = e.sprev
	} else {
		s.tail = e.sprev
	}
	e.sprev, e.snext = nil, nil
	s.live -= e.n
	s.blocks--
}

// closeFiles closes the segment's descriptors.
func (s *segment) closeFiles() error {
	var errs []error
	if s.dio != nil {
		errs = append(errs, s.dio.Close())
	}
	if s.bio != nil {
		errs = append(errs, s.bio.Close())
	}
	return errors.Join(errs...)
}

// segName is the file name of segment seq.
func segName(seq uint64) string { return fmt.Sprintf("seg-%016x.flash", seq) }

// parseSegName returns the sequence number of a segment file name.
func parseSegName(name string) (uint64, bool) {
	hex, ok := strings.CutPrefix(name, "seg-")
	if !ok {
		return 0, false
	}
	hex, ok = strings.CutSuffix(hex, ".flash")
	if !ok || len(hex) != 16 {
		return 0, false
	}
	seq, err := strconv.ParseUint(hex, 16, 64)
	if err != nil || seq == 0 || strings.ToLower(hex) != hex {
		return 0, false
	}
	return seq, true
}

// openSegmentFiles opens a segment's descriptors: the buffered one, and
// the direct one when direct (write is the open segment, created here
// with O_EXCL).
func openSegmentFiles(fs fsys, dir string, seq uint64, direct, create bool) (*segment, error) {
	s := &segment{seq: seq, path: filepath.Join(dir, segName(seq))}
	rw := os.O_RDONLY
	if create {
		rw = os.O_RDWR | os.O_CREATE | os.O_EXCL
	}
	var err error
	if direct {
		if s.dio, err = fs.OpenFile(s.path, rw|oDirect, 0o600); err != nil {
			return nil, err
		}
		rw = os.O_RDONLY
	}
	if s.bio, err = fs.OpenFile(s.path, rw, 0o600); err != nil {
		s.closeFiles()
		if create {
			os.Remove(s.path)
		}
		return nil, err
	}
	return s, nil
}
