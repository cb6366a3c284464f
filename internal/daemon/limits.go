package daemon

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gpucache/gpucache/internal/config"
)

// ErrFDLimit reports a file descriptor limit that cannot hold the
// connections the configuration allows.
var ErrFDLimit = errors.New("gpucache/daemon: file descriptor limit too low")

// fdReserve is config.FDReserve: descriptors kept for all but client
// connections.
const fdReserve = config.FDReserve

// raiseFDLimit raises the soft RLIMIT_NOFILE to the hard limit and returns
// both.
func raiseFDLimit() (soft, hard uint64, err error) {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
		return 0, 0, err
	}
	if r.Cur < r.Max {
		raised := r
		raised.Cur = r.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &raised); err == nil {
			r = raised
		}
	}
	return uint64(r.Cur), uint64(r.Max), nil
}

// fdsNeeded is how many file descriptors cfg may use at most
// (config.Config.FDsNeeded, which `gpucache doctor` checks too).
func fdsNeeded(cfg config.Config) uint64 { return cfg.FDsNeeded() }

// checkFDLimit refuses a configuration whose connections the soft limit
// soft (hard limit hard) cannot hold: a node that runs out of descriptors
// cannot accept, open cold-tier files or reach etcd.
func checkFDLimit(cfg config.Config, soft, hard uint64) error {
	need := fdsNeeded(cfg)
	if need <= soft {
		return nil
	}
	admin := "admin off"
	if cfg.AdminListen != "off" {
		admin = fmt.Sprintf("admin_max_conns %d", cfg.AdminMaxConns)
	}
	return fmt.Errorf("%w: max_conns %d + %s + %d reserved (cold tier, etcd, files) need %d file descriptors, but RLIMIT_NOFILE is %d (hard limit %d): lower max_conns (and admin_max_conns) or raise the limit (ulimit -n, systemd LimitNOFILE=)",
		ErrFDLimit, cfg.MaxConns, admin, fdReserve, need, soft, hard)
}

// newAdminServer returns the admin HTTP server: bounded header and request
// reads, and idle keep-alive connections closed after admin_idle_timeout.
// Its listener is capped by capListener. There is no write timeout, so
// that /debug/pprof/profile can stream for its requested duration.
func newAdminServer(h http.Handler, cfg config.Config) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		IdleTimeout:       cfg.AdminIdleTimeout,
		MaxHeaderBytes:    64 << 10,
	}
}

// capListener closes connections accepted while max are open, so that a
// flood of connections (keep-alive /healthz probes, say) cannot take every
// file descriptor. Accept errors pass through: http.Server backs off on
// temporary ones (EMFILE) itself.
type capListener struct {
	net.Listener
	slots    chan struct{} // one per open connection
	rejected atomic.Uint64
}

func newCapListener(ln net.Listener, max int) *capListener {
	return &capListener{Listener: ln, slots: make(chan struct{}, max)}
}

func (l *capListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		select {
		case l.slots <- struct{}{}:
			return &capConn{Conn: c, l: l}, nil
		default:
			l.rejected.Add(1)
			c.Close()
		}
	}
}

// capConn gives its slot back when it is closed, once.
type capConn struct {
	net.Conn
	l    *capListener
	once sync.Once
}

func (c *capConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { <-c.l.slots })
	return err
}
