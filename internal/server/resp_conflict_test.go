package server

import (
	"bufio"
	"strings"
	"testing"
	"time"

	"github.com/gpucache/gpucache/internal/security"
	"github.com/gpucache/gpucache/internal/security/antireplay"
	"github.com/gpucache/gpucache/internal/security/audit"
	"github.com/gpucache/gpucache/internal/security/tlsconf/tlstest"
)

// TestRESPAuthCredentialConflict: RESP AUTH over TLS whose client
// certificate names one tenant and whose password is another tenant's
// secret is refused (-WRONGPASS) and audited as credential_conflict, the
// rule HELLO follows (TestHelloCredentialConflict). The same tenant on
// both, or a certificate that maps to no tenant, still authenticates.
func TestRESPAuthCredentialConflict(t *testing.T) {
	ca := tlstest.NewCA(t, "resp-conflict-ca")
	serverTLS := optionalClientCertTLS(t, ca)

	tenants := testTenants()
	tenants[0].CertNames = []string{"acme-client"} // acme
	auditLog := &syncBuffer{}
	f := startRESP(t, bigStore(t, 64<<20), false, func(c *Config) {
		w, err := antireplay.New(antireplay.Config{Window: 5 * time.Minute, MaxNonces: 1024, TenantNonces: 256})
		if err != nil {
			t.Fatal(err)
		}
		g, err := security.NewGuard(testPolicy(t, tenants, nil), w, audit.New(auditLog), nil)
		if err != nil {
			t.Fatal(err)
		}
		c.Guard = g
	})
	// startRESP serves in plaintext; serve TLS on a second listener.
	dialTLS := serveTLSFor(t, ca, serverTLS, f.srv.ServeRESP)
	dial := func(cn string) *respClient {
		nc := dialTLS(cn)
		return &respClient{t: t, nc: nc, br: bufio.NewReaderSize(nc, 64<<10)}
	}

	// acme's certificate with beta's secret: refused, with or without a
	// user name, whichever tenant it names.
	for _, args := range [][]string{{"AUTH", string(secretB)}, {"AUTH", "beta", string(secretB)}, {"AUTH", "acme", string(secretB)}} {
		c := dial("acme-client")
		if got := c.do(args...); !strings.HasPrefix(got, "-WRONGPASS") {
			t.Fatalf("certificate acme + %s: %q, want -WRONGPASS", args[:len(args)-1], got)
		}
		if got := c.do("SET", "k", "v"); !strings.HasPrefix(got, "-NOAUTH") {
			t.Fatalf("after a refused AUTH: %q, want -NOAUTH", got)
		}
	}
	evs := auditLog.events(t, audit.EventAuthFailure)
	if len(evs) != 3 {
		t.Fatalf("%d auth_failure events, want 3", len(evs))
	}
	for i, ev := range evs {
		if ev["reason"] != "credential_conflict" {
			t.Errorf("event %d reason %v, want credential_conflict", i, ev["reason"])
		}
	}
	// The same tenant on both: accepted.
	if got := dial("acme-client").do("AUTH", string(secretA)); got != "+OK\r\n" {
		t.Fatalf("certificate acme + secret acme: %q", got)
	}
	// A certificate that names no tenant does not conflict.
	if got := dial("someone-else").do("AUTH", "beta", string(secretB)); got != "+OK\r\n" {
		t.Fatalf("unmapped certificate + secret beta: %q", got)
	}
	// No certificate: the secret alone.
	if got := dial("").do("AUTH", string(secretB)); got != "+OK\r\n" {
		t.Fatalf("no certificate + secret beta: %q", got)
	}
}
