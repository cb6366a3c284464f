package audit

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
)

// File is an audit log file with a size bound. It appends to path until
// the next record would take it past maxBytes, then rotates as a daemon's
// log does: path.(maxFiles-1) becomes path.maxFiles (the oldest is
// dropped), ..., path becomes path.1, and a new path is started. With
// maxFiles 0 no rotated file is kept: path starts again empty. So the
// files take at most maxBytes × (maxFiles + 1) on disk.
//
// A write never blocks on anything but the file itself and never fails
// loudly: a failed write (a full disk), a failed rotation or a record
// longer than maxBytes loses that record, is counted (Errors) and
// reported to the caller, and the next write tries again. A partly
// written record is cut off the file, so every line stays whole.
type File struct {
	path     string
	maxBytes int64
	maxFiles int

	mu     sync.Mutex
	f      *os.File // guarded by mu; nil after a failed reopen or Close
	size   int64    // guarded by mu; bytes in f
	closed bool     // guarded by mu

	rotations atomic.Uint64
	errors    atomic.Uint64
	bytes     atomic.Int64 // size, for Stats
}

// ErrRecordTooLarge is a record longer than the file's size bound.
var ErrRecordTooLarge = errors.New("gpucache/audit: record larger than audit_max_bytes")

// errClosed is a write after Close.
var errClosed = errors.New("gpucache/audit: audit file closed")

// OpenFile opens (creating, mode 0600) the audit file at path for
// appending, rotating at maxBytes (at least 1) and keeping maxFiles
// rotated files (at least 0).
func OpenFile(path string, maxBytes int64, maxFiles int) (*File, error) {
	if maxBytes < 1 || maxFiles < 0 {
		return nil, fmt.Errorf("gpucache/audit: audit file %s: max bytes %d and max files %d must be at least 1 and 0", path, maxBytes, maxFiles)
	}
	f := &File{path: path, maxBytes: maxBytes, maxFiles: maxFiles}
	if err := f.open(os.O_APPEND); err != nil {
		return nil, err
	}
	return f, nil
}

// open opens f.path with flag added (O_APPEND or O_TRUNC). f.mu is held
// or f is not shared yet.
func (f *File) open(flag int) error {
	fh, err := os.OpenFile(f.path, os.O_CREATE|os.O_WRONLY|os.O_APPEND|flag, 0o600)
	if err != nil {
		return err
	}
	st, err := fh.Stat()
	if err != nil {
		fh.Close()
		return err
	}
	f.f, f.size = fh, st.Size()
	f.bytes.Store(f.size)
	return nil
}

// Write appends p, one record, rotating first if p would take the file
// past its bound.
func (f *File) Write(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n, err := f.write(p)
	if err != nil {
		f.errors.Add(1)
	}
	return n, err
}

// write is Write under f.mu.
func (f *File) write(p []byte) (int, error) {
	switch {
	case f.closed:
		return 0, errClosed
	case int64(len(p)) > f.maxBytes:
		return 0, ErrRecordTooLarge
	case f.f == nil: // a reopen after a failed rotation failed too: try again
		if err := f.open(os.O_APPEND); err != nil {
			return 0, err
		}
	}
	if f.size > 0 && f.size+int64(len(p)) > f.maxBytes {
		if err := f.rotate(); err != nil {
			return 0, err
		}
	}
	n, err := f.f.Write(p)
	if err != nil {
		if n > 0 {
			f.f.Truncate(f.size) // keep lines whole; if this fails too, the next record starts mid-line
		}
		return 0, err
	}
	f.size += int64(n)
	f.bytes.Store(f.size)
	return n, nil
}

// rotate shifts the rotated files up by one and starts path again. On an
// error path is reopened as it is (or left closed, f.f nil, to be
// reopened by the next write), so the failed record is never written past
// the bound. f.mu is held.
func (f *File) rotate() error {
	if err := f.f.Close(); err != nil {
		f.f = nil
		return f.reopenAfter(err)
	}
	f.f = nil
	for i := f.maxFiles - 1; i >= 1; i-- {
		if err := os.Rename(f.rotated(i), f.rotated(i+1)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return f.reopenAfter(err)
		}
	}
	flag := os.O_TRUNC
	if f.maxFiles > 0 {
		if err := os.Rename(f.path, f.rotated(1)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return f.reopenAfter(err)
		}
		flag = os.O_EXCL
	}
	if err := f.open(flag); err != nil {
		if flag != os.O_EXCL || !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("gpucache/audit: rotating %s: %w", f.path, err)
		}
		if err := f.open(os.O_TRUNC); err != nil { // someone recreated path between the rename and the open
			return fmt.Errorf("gpucache/audit: rotating %s: %w", f.path, err)
		}
	}
	f.rotations.Add(1)
	return nil
}

// reopenAfter reopens path after a failed rotation step, so later records
// go on being tried, and returns the step's error. The reopened file is
// still full: the next write tries to rotate again.
func (f *File) reopenAfter(err error) error {
	if f.open(os.O_APPEND) != nil {
		f.f = nil
	}
	return fmt.Errorf("gpucache/audit: rotating %s: %w", f.path, err)
}

// rotated is the name of the i-th rotated file.
func (f *File) rotated(i int) string { return f.path + "." + strconv.Itoa(i) }

// Close closes the file; later writes fail (and are counted).
func (f *File) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	if f.f == nil {
		return nil
	}
	err := f.f.Close()
	f.f = nil
	return err
}

// Rotations is how many times the file rotated.
func (f *File) Rotations() uint64 { return f.rotations.Load() }

// Errors is how many records the file lost: failed writes and rotations,
// records too large, writes after Close.
func (f *File) Errors() uint64 { return f.errors.Load() }

// Size is the current file's size in bytes.
func (f *File) Size() int64 { return f.bytes.Load() }
