package daemon

import (
	"crypto/tls"
	"log/slog"

	"github.com/gpucache/gpucache/internal/config"
	"github.com/gpucache/gpucache/internal/server"
)

// respProfiles converts the configured RESP profiles for the server.
func respProfiles(cfg config.Config) map[string]server.RESPProfile {
	ps := cfg.RESPProfiles()
	if len(ps) == 0 {
		return nil
	}
	out := make(map[string]server.RESPProfile, len(ps))
	for tenant, p := range ps {
		out[tenant] = server.RESPProfile{
			Namespace:      p.Namespace(tenant),
			ChunkBytes:     int(p.ChunkBytes),
			VariableLength: p.VariableLength,
			AnyKey:         p.KeyFormat == "any",
		}
	}
	return out
}

// startRESP opens resp_listen (behind the daemon's TLS settings, so
// rediss:// works) and serves RESP on it, when configured. It records the
// address in addrs and returns a function that waits, after
// srv.Shutdown, for the listener's goroutine; nil when RESP is off.
func startRESP(cfg config.Config, srv *server.Server, tc *tls.Config, addrs *Addrs, log *slog.Logger) (wait func(), err error) {
	if !cfg.RESPEnabled() {
		return func() {}, nil
	}
	ln, err := listen("resp_listen", cfg.RESPListen)
	if err != nil {
		return nil, err
	}
	addrs.RESP = ln.Addr().String()
	if tc != nil {
		ln = tls.NewListener(ln, tc)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.ServeRESP(ln); err != nil {
			log.Error("RESP listener stopped", "err", err)
		}
	}()
	log.Info("RESP2 endpoint listening", "resp_listen", addrs.RESP, "tenants_with_profiles", len(cfg.RESPProfiles()))
	return func() { <-done }, nil
}
