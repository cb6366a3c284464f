package server

import (
	"crypto/tls"
	"net"
	"testing"
	"time"

	"github.com/gpucache/gpucache/api/wire"
	"github.com/gpucache/gpucache/internal/security"
	"github.com/gpucache/gpucache/internal/security/antireplay"
	"github.com/gpucache/gpucache/internal/security/audit"
	"github.com/gpucache/gpucache/internal/security/tlsconf/tlstest"
	"github.com/gpucache/gpucache/internal/testfix"
)

// TestHelloCredentialConflict: a HELLO whose verified client certificate
// names one tenant and whose bearer secret names another is refused and
// audited as credential_conflict; neither credential silently wins. A
// certificate and a secret of the same tenant, or a certificate that names
// no tenant, still authenticate.
func TestHelloCredentialConflict(t *testing.T) {
	ca := tlstest.NewCA(t, "conflict-ca")
	serverTLS := optionalClientCertTLS(t, ca)

	tenants := testTenants()
	tenants[0].CertNames = []string{"acme-client"} // acme
	clock := testfix.NewClock(time.Unix(1_800_000_000, 0))
	w, err := antireplay.New(antireplay.Config{Window: 5 * time.Minute, MaxNonces: 1024, TenantNonces: 256, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	log := &syncBuffer{}
	guard, err := security.NewGuard(testPolicy(t, tenants, nil), w, audit.New(log), clock.Now)
	if err != nil {
		t.Fatal(err)
	}
	ts := startServer(t, func(c *Config) { c.Guard = guard })
	// startServer listens in plaintext; serve TLS on a second listener.
	dialTLS := serveTLSFor(t, ca, serverTLS, ts.srv.Serve)
	dial := func(cn string) *authConn {
		return &authConn{rawConn: &rawConn{t: t, nc: dialTLS(cn)}, now: clock.Now}
	}

	// acme's certificate with beta's secret: refused, whichever tenant the
	// HELLO names.
	for _, claim := range []string{"", "beta", "acme"} {
		if resp, e := dial("acme-client").hello(claim, secretB); e == nil || e.Code != wire.CodeUnauthenticated {
			t.Fatalf("certificate acme + secret beta (claim %q): %+v %v, want UNAUTHENTICATED", claim, resp, e)
		}
	}
	evs := log.events(t, audit.EventAuthFailure)
	if len(evs) != 3 {
		t.Fatalf("%d auth_failure events, want 3", len(evs))
	}
	for i, ev := range evs {
		if ev["reason"] != "credential_conflict" {
			t.Errorf("event %d reason %v, want credential_conflict", i, ev["reason"])
		}
	}
	// The same tenant on both: accepted, as a bearer session of acme.
	if resp, e := dial("acme-client").hello("", secretA); e != nil || resp.Tenant != "acme" {
		t.Fatalf("certificate acme + secret acme: %+v %v", resp, e)
	}
	// The certificate alone: acme.
	if resp, e := dial("acme-client").hello("", nil); e != nil || resp.Tenant != "acme" {
		t.Fatalf("certificate acme alone: %+v %v", resp, e)
	}
	// A certificate that names no tenant does not conflict: the secret
	// authenticates.
	if resp, e := dial("someone-else").hello("", secretB); e != nil || resp.Tenant != "beta" {
		t.Fatalf("unmapped certificate + secret beta: %+v %v", resp, e)
	}
}

// optionalClientCertTLS is a loopback server's TLS config with a
// certificate from ca that verifies a client certificate only when one is
// given (the admin listener's and the credential-conflict tests' mode).
func optionalClientCertTLS(t *testing.T, ca *tlstest.CA) *tls.Config {
	t.Helper()
	srvCert, srvKey := ca.Issue(t, "server", tlstest.ServerAuth(), tlstest.IP(net.IPv4(127, 0, 0, 1)))
	pair, err := tls.X509KeyPair(srvCert, srvKey)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Config{Certificates: []tls.Certificate{pair}, ClientCAs: ca.Pool(),
		ClientAuth: tls.VerifyClientCertIfGiven, MinVersion: tls.VersionTLS13}
}

// serveTLSFor serves serve on a loopback TLS listener with serverTLS until
// the test ends, and returns a dialer whose connections present a client
// certificate for cn from ca ("" presents none).
func serveTLSFor(t *testing.T, ca *tlstest.CA, serverTLS *tls.Config, serve func(net.Listener) error) func(cn string) net.Conn {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- serve(tls.NewListener(ln, serverTLS)) }()
	t.Cleanup(func() { <-served }) // the server's own cleanup (registered first, run last) would block: close here
	t.Cleanup(func() { ln.Close() })
	return func(cn string) net.Conn {
		cfg := &tls.Config{RootCAs: ca.Pool(), ServerName: "127.0.0.1", MinVersion: tls.VersionTLS13}
		if cn != "" {
			c, k := ca.Issue(t, cn, tlstest.ClientAuth())
			p, err := tls.X509KeyPair(c, k)
			if err != nil {
				t.Fatal(err)
			}
			cfg.Certificates = []tls.Certificate{p}
		}
		nc, err := tls.Dial("tcp", ln.Addr().String(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { nc.Close() })
		nc.SetDeadline(time.Now().Add(20 * time.Second))
		return nc
	}
}
