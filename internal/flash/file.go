package flash

// The files the tier reads and writes, behind a small interface so tests
// can inject a full disk or an I/O error where no failpoint reaches.

import (
	"errors"
	"io"
	"os"
	"syscall"
	"unsafe"
)

// file is an open segment file.
type file interface {
	// ReadAt reads len(p) bytes at off (io.ReaderAt).
	ReadAt(p []byte, off int64) (int, error)
	// WriteVAt writes bufs, in order, at off (one gathering write where
	// the platform has it) and returns the bytes written.
	WriteVAt(bufs [][]byte, off int64) (int, error)
	// Datasync makes what was written durable (fdatasync).
	Datasync() error
	// Nlink is the file's link count: 0 once its name is gone.
	Nlink() (uint64, error)
	// Size is the file's length.
	Size() (int64, error)
	// Truncate cuts the file to size.
	Truncate(size int64) error
	Close() error
}

// fsys opens files; the tier's is osFS, tests wrap it.
type fsys interface {
	OpenFile(name string, flag int, perm os.FileMode) (file, error)
}

// osFS opens real files.
type osFS struct{}

func (osFS) OpenFile(name string, flag int, perm os.FileMode) (file, error) {
	f, err := os.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return osFile{f}, nil
}

// osFile is a file of osFS. Its methods reach the descriptor only through
// *os.File (ReadAt, SyscallConn), which holds a reference while a call is
// in flight: a Close racing a read never lets the read land on a reused
// descriptor.
type osFile struct{ f *os.File }

func (o osFile) ReadAt(p []byte, off int64) (int, error) { return o.f.ReadAt(p, off) }
func (o osFile) Truncate(size int64) error               { return o.f.Truncate(size) }
func (o osFile) Close() error                            { return o.f.Close() }

func (o osFile) Size() (int64, error) {
	st, err := o.f.Stat()
	if err != nil {
		return 0, err
	}
	return st.Size(), nil
}

func (o osFile) Nlink() (uint64, error) {
	st, err := o.f.Stat()
	if err != nil {
		return 0, err
	}
	s, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return 1, nil
	}
	return uint64(s.Nlink), nil
}

func (o osFile) WriteVAt(bufs [][]byte, off int64) (int, error) {
	bufs = append([][]byte(nil), bufs...) // advance trims the caller's slices otherwise
	total := 0
	for len(bufs) > 0 {
		n, err := o.writev(bufs, off)
		total += n
		if err != nil {
			return total, err
		}
		if n == 0 {
			return total, io.ErrShortWrite
		}
		off += int64(n)
		bufs = advance(bufs, n)
	}
	return total, nil
}

// advance drops the first n bytes of bufs.
func advance(bufs [][]byte, n int) [][]byte {
	for n > 0 && len(bufs) > 0 {
		if n < len(bufs[0]) {
			bufs[0] = bufs[0][n:]
			return bufs
		}
		n -= len(bufs[0])
		bufs = bufs[1:]
	}
	for len(bufs) > 0 && len(bufs[0]) == 0 {
		bufs = bufs[1:]
	}
	return bufs
}

// isNoSpace reports a full disk (or quota).
func isNoSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

// alignedBuf returns n zero bytes whose start is aligned to align, as
// O_DIRECT needs.
func alignedBuf(n int) []byte {
	b := make([]byte, n+align)
	off := 0
	if r := int(uintptr(unsafe.Pointer(unsafe.SliceData(b))) & (align - 1)); r != 0 {
		off = align - r
	}
	return b[off : off+n : off+n]
}

// isAligned reports whether b starts at an align boundary and its length
// is a multiple of align: an O_DIRECT read can land in it.
func isAligned(b []byte) bool {
	return len(b)%align == 0 && uintptr(unsafe.Pointer(unsafe.SliceData(b)))&(align-1) == 0
}

// syncDir makes a directory's entries (a created or removed segment)
// durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
