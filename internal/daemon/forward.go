package daemon

import (
	"crypto/tls"
	"fmt"
	"log/slog"

	"github.com/gpucache/gpucache/internal/config"
	"github.com/gpucache/gpucache/internal/forward"
	"github.com/gpucache/gpucache/internal/security/tlsconf"
)

// newForwarder builds the cluster forwarder of RESP operations: a key another member owns is sent to its owner over the
// native protocol as the RESP caller's tenant. The bounds are the
// forward package's defaults: 64 pooled clients (one per owner, tenant
// and credential), closed after 1 minute idle, 2 connections each, 256
// MiB of forwarded GET payloads in memory at once, 1 s to dial an owner,
// and the RESP caller's deadline (2 s when it has none).
//
// With TLS on the data listener the forwarder dials owners with TLS,
// trusting tls_client_ca (the fleet's CA, which also issued the nodes'
// certificates) and presenting this node's certificate when it may serve
// as a client certificate (mTLS). Without tls_client_ca it cannot verify
// its peers: it refuses to start rather than dial unverified.
func newForwarder(cfg config.Config, node *clusterNode, log *slog.Logger) (*forward.Forwarder, error) {
	var tc *tls.Config
	if cfg.TLSCert != "" {
		if cfg.TLSClientCA == "" {
			return nil, fmt.Errorf("cluster forwarding over TLS needs tls_client_ca to verify the other nodes")
		}
		files := tlsconf.ClientFiles{CAFile: cfg.TLSClientCA, CertFile: cfg.TLSCert, KeyFile: cfg.TLSKey}
		var err error
		if tc, err = tlsconf.NewClient(files); err != nil {
			// The node's certificate may not allow client use: dial
			// without one (the owner then authenticates the bearer
			// secret only).
			log.Warn("forwarder: this node's certificate cannot be a client certificate; dialing without one", "err", err)
			files.CertFile, files.KeyFile = "", ""
			if tc, err = tlsconf.NewClient(files); err != nil {
				return nil, fmt.Errorf("forwarder TLS: %w", err)
			}
		}
	}
	return forward.New(forward.Config{Cluster: node.cluster, TLS: tc, Logger: log.With("component", "forward")})
}
