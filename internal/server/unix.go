package server

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"syscall"

	"github.com/gpucache/gpucache/api/wire"
)

// The Unix-domain listener (ADR 0026): the native protocol on a Unix
// socket, where the peer's credentials come from the kernel and the
// client may pass descriptors of shared memory (region.go).

// ServeUnix accepts connections on a Unix-domain stream listener until
// Shutdown, as Serve does. Each connection reads the peer's uid and pid
// from the kernel (SO_PEERCRED) and takes the descriptors a client sends
// with SCM_RIGHTS for REGISTER.
func (s *Server) ServeUnix(ln *net.UnixListener) error {
	return s.serve(unixListener{ln}, func(c *conn) {
		uc, ok := c.nc.(*fdConn)
		if !ok {
			c.nc.Close()
			return
		}
		c.peer = &uc.peer
		c.serve()
	})
}

// unixPeer is what the kernel says about a Unix-socket peer.
type unixPeer struct {
	uid, gid uint32
	pid      int32
}

// maxPendingFDs bounds the descriptors a connection holds that no REGISTER
// has claimed yet; more are closed on arrival and the next REGISTER fails.
const maxPendingFDs = wire.MaxRegions

// fdConn is a Unix-socket connection whose reads also collect the
// descriptors sent with SCM_RIGHTS, in order, for REGISTER to claim.
type fdConn struct {
	*net.UnixConn
	peer unixPeer
	oob  []byte

	mu   sync.Mutex
	fds  []int // received, not yet claimed; guarded by mu
	lost bool  // descriptors were dropped (truncated or over the bound); guarded by mu
}

// wrapUnix reads the peer's credentials and wraps uc.
func wrapUnix(uc *net.UnixConn) (*fdConn, error) {
	rc, err := uc.SyscallConn()
	if err != nil {
		return nil, err
	}
	var cred *syscall.Ucred
	var cerr error
	if err := rc.Control(func(fd uintptr) {
		cred, cerr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	}); err != nil {
		return nil, err
	}
	if cerr != nil {
		return nil, fmt.Errorf("SO_PEERCRED: %w", cerr)
	}
	return &fdConn{UnixConn: uc, peer: unixPeer{uid: cred.Uid, gid: cred.Gid, pid: cred.Pid},
		oob: make([]byte, syscall.CmsgSpace(4*4))}, nil
}

// Read reads like net.Conn's Read and keeps the descriptors that came
// with the bytes.
func (f *fdConn) Read(p []byte) (int, error) {
	n, oobn, flags, _, err := f.UnixConn.ReadMsgUnix(p, f.oob)
	if oobn > 0 {
		f.keep(f.oob[:oobn], flags&syscall.MSG_CTRUNC != 0)
	}
	return n, err
}

// keep parses control messages and queues their descriptors.
func (f *fdConn) keep(oob []byte, truncated bool) {
	msgs, err := syscall.ParseSocketControlMessage(oob)
	f.mu.Lock()
	defer f.mu.Unlock()
	if err != nil || truncated {
		f.lost = true
	}
	for _, m := range msgs {
		fds, err := syscall.ParseUnixRights(&m)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			if len(f.fds) >= maxPendingFDs {
				syscall.Close(fd)
				f.lost = true
				continue
			}
			f.fds = append(f.fds, fd)
		}
	}
}

// errNoFD is REGISTER without a descriptor.
var errNoFD = errors.New("gpucache/server: no descriptor came with REGISTER (send it as SCM_RIGHTS with the frame)")

// claim takes the oldest descriptor not yet claimed.
func (f *fdConn) claim() (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.fds) == 0 {
		if f.lost {
			f.lost = false
			return -1, errors.New("descriptors sent on this connection were dropped (more than 4 in one message, or too many unclaimed)")
		}
		return -1, errNoFD
	}
	fd := f.fds[0]
	f.fds = append(f.fds[:0], f.fds[1:]...)
	return fd, nil
}

// Close closes the connection and every descriptor no REGISTER claimed.
func (f *fdConn) Close() error {
	f.mu.Lock()
	for _, fd := range f.fds {
		syscall.Close(fd)
	}
	f.fds = nil
	f.mu.Unlock()
	return f.UnixConn.Close()
}

// unixListener wraps accepted Unix connections as fdConns.
type unixListener struct{ *net.UnixListener }

// Accept returns the next connection as an fdConn; one whose credentials
// cannot be read is closed and skipped.
func (l unixListener) Accept() (net.Conn, error) {
	for {
		uc, err := l.UnixListener.AcceptUnix()
		if err != nil {
			return nil, err
		}
		fc, err := wrapUnix(uc)
		if err != nil {
			uc.Close()
			continue
		}
		return fc, nil
	}
}
