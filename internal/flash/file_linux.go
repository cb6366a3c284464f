package flash

import (
	"golang.org/x/sys/unix"
)

// oDirect is the open flag of direct I/O.
const oDirect = unix.O_DIRECT

// writev is one pwritev(2).
func (o osFile) writev(bufs [][]byte, off int64) (int, error) {
	rc, err := o.f.SyscallConn()
	if err != nil {
		return 0, err
	}
	if len(bufs) > maxIOV {
		bufs = bufs[:maxIOV]
	}
	var n int
	var werr error
	if err := rc.Write(func(fd uintptr) bool {
		for {
			n, werr = unix.Pwritev(int(fd), bufs, off)
			if werr != unix.EINTR {
				return true
			}
		}
	}); err != nil {
		return 0, err
	}
	return n, werr
}

// Datasync is fdatasync(2).
func (o osFile) Datasync() error {
	rc, err := o.f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		for {
			serr = unix.Fdatasync(int(fd))
			if serr != unix.EINTR {
				return
			}
		}
	}); err != nil {
		return err
	}
	return serr
}
