package daemon

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"

	"github.com/gpucache/gpucache/internal/config"
	"github.com/gpucache/gpucache/internal/server"
)

// startUnix opens unix_listen, when configured, and serves the native
// protocol on it (ADR 0026). A socket file left by a previous run is
// replaced; any other file at the path is an error, never removed. It
// records the path in addrs and returns a function that waits, after
// srv.Shutdown, for the listener's goroutine (which removes the socket
// file).
func startUnix(cfg config.Config, srv *server.Server, addrs *Addrs, log *slog.Logger) (wait func(), err error) {
	if !cfg.UnixEnabled() {
		return func() {}, nil
	}
	path := cfg.UnixListen
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode().Type() != fs.ModeSocket {
			return nil, fmt.Errorf("unix_listen %s: the path exists and is not a socket; remove it or choose another path", path)
		}
		// A stale socket of a previous run (a live daemon would answer).
		if c, err := net.Dial("unix", path); err == nil {
			c.Close()
			return nil, fmt.Errorf("unix_listen %s: another process is listening there", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("unix_listen %s: remove the stale socket: %w", path, err)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("unix_listen %s: %w", path, err)
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("unix_listen %s: %w", path, err)
	}
	if err := os.Chmod(path, fs.FileMode(cfg.UnixMode())); err != nil {
		ln.Close()
		return nil, fmt.Errorf("unix_listen %s: chmod %s: %w", path, cfg.UnixListenMode, err)
	}
	addrs.Unix = path
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.ServeUnix(ln); err != nil && !errors.Is(err, net.ErrClosed) {
			log.Error("Unix listener stopped", "err", err)
		}
	}()
	log.Info("Unix-socket endpoint listening (registered regions on)", "unix_listen", path, "mode", cfg.UnixListenMode,
		"region_bytes", cfg.RegionBytes.String(), "tenant_region_bytes", cfg.TenantRegionBytes.String())
	return func() { <-done }, nil
}
