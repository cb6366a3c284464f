// Package secretfile reads the small files that hold secrets and keys:
// tenant secrets, seal keys, the etcd password, TLS keys and certificates.
//
// Such a file must be a regular file (a symbolic link to one is fine, as
// Kubernetes mounts secrets), and it is read up to a bound the caller
// gives. Anything else is refused at once with an error naming the file: a
// FIFO would block the open until some writer came, a device such as
// /dev/zero would never end, and either would hang startup (or a reload)
// past SIGTERM.
package secretfile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
)

// ErrNotRegular: the file is a FIFO, a device, a socket or a directory.
var ErrNotRegular = errors.New("gpucache/secretfile: not a regular file")

// ErrTooLarge: the file holds more bytes than the caller allows.
var ErrTooLarge = errors.New("gpucache/secretfile: file too large")

// Read returns the content of the regular file at path, at most max bytes.
// Its errors are *fs.PathError naming path; they wrap ErrNotRegular or
// ErrTooLarge, or the operating system's error.
func Read(path string, max int64) ([]byte, error) {
	// O_NONBLOCK: the open of a FIFO returns at once instead of waiting for
	// a writer; the mode check below then refuses it. A regular file
	// ignores the flag.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	// The mode of what was opened, not of what the path names now: a file
	// swapped after a check could not slip through.
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, &fs.PathError{Op: "read", Path: path, Err: fmt.Errorf("%w: it is %s", ErrNotRegular, kind(fi.Mode()))}
	}
	tooLarge := func(n int64) error {
		return &fs.PathError{Op: "read", Path: path, Err: fmt.Errorf("%w: more than %d bytes (%d)", ErrTooLarge, max, n)}
	}
	if fi.Size() > max {
		return nil, tooLarge(fi.Size())
	}
	// The file may grow between Stat and the read: read one byte past max
	// to tell.
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, &fs.PathError{Op: "read", Path: path, Err: err}
	}
	if int64(len(b)) > max {
		return nil, tooLarge(int64(len(b)))
	}
	return b, nil
}

// kind names a file mode that is not a regular file.
func kind(m fs.FileMode) string {
	switch {
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe (FIFO)"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a device"
	case m.IsDir():
		return "a directory"
	default:
		return "of mode " + m.String()
	}
}
