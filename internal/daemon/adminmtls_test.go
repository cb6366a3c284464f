package daemon

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/gpucache/gpucache/internal/config"
	"github.com/gpucache/gpucache/internal/security/tlsconf/tlstest"
)

// TestAdminListenerUnderMTLS: with tls_client_ca set, the data listener
// demands a client certificate, but the admin listener only checks one
// when given: /healthz and /readyz answer a load balancer that has none,
// and an admin's bearer secret reloads without a certificate (the README's
// curl). admin_tls_client_ca gives the admin listener a CA of its own: a
// certificate from it authenticates an admin there, and one from the data
// CA is refused at the handshake.
func TestAdminListenerUnderMTLS(t *testing.T) {
	dir := t.TempDir()
	dataCA := tlstest.NewCA(t, "data-ca")
	adminCA := tlstest.NewCA(t, "admin-ca")
	srvCert, srvKey := dataCA.IssueFiles(t, dir, "server", "server", tlstest.ServerAuth(), tlstest.IP(net.IPv4(127, 0, 0, 1)))
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	opsSecret := "ops-secret-0123456789abcdef"
	cfg := testConfig()
	cfg.AuditLog = "off"
	cfg.TLSCert, cfg.TLSKey = srvCert, srvKey
	cfg.TLSClientCA = write("data-ca.pem", dataCA.CertPEM())
	cfg.AdminTLSClientCA = write("admin-ca.pem", adminCA.CertPEM())
	cfg.Tenants = []config.TenantConfig{
		{Name: "ops", Secrets: []config.SecretConfig{{ID: "ops-1", File: write("ops.secret", []byte(opsSecret))}},
			CertNames: []string{"ops-client"}, Rights: []string{"*=a"}},
	}

	a := mustStart(t, cfg, Options{}).Addrs()

	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(dataCA.CertPEM())
	client := func(ca *tlstest.CA, cn string) *http.Client {
		tc := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
		if ca != nil {
			c, k := ca.Issue(t, cn, tlstest.ClientAuth())
			p, err := tls.X509KeyPair(c, k)
			if err != nil {
				t.Fatal(err)
			}
			// Sent whatever CAs the server names, so a wrong CA is tested.
			tc.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &p, nil }
		}
		tr := &http.Transport{TLSClientConfig: tc, DisableKeepAlives: true}
		t.Cleanup(tr.CloseIdleConnections)
		return &http.Client{Transport: tr}
	}
	do := func(hc *http.Client, method, path, bearer string) (int, string, error) {
		req, err := http.NewRequest(method, "https://"+a.Admin+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if bearer != "" {
			req.Header.Set("Authorization", "Bearer "+bearer)
		}
		resp, err := hc.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), nil
	}

	plain := client(nil, "")
	for _, p := range []string{"/healthz", "/readyz"} {
		if code, body, err := do(plain, "GET", p, ""); err != nil || code != http.StatusOK {
			t.Fatalf("%s without a client certificate: %d %q %v", p, code, body, err)
		}
	}
	// A protected endpoint (pprof, like /admin/*) needs an admin.
	const protected = "/debug/pprof/cmdline"
	if code, body, err := do(plain, "GET", protected, ""); err != nil || code != http.StatusUnauthorized {
		t.Fatalf("protected endpoint with no credential: %d %q %v, want 401", code, body, err)
	}
	if code, body, err := do(plain, "GET", protected, opsSecret); err != nil || code != http.StatusOK {
		t.Fatalf("protected endpoint with the admin's bearer secret, no certificate: %d %q %v", code, body, err)
	}
	// The certificate's expiry is a metric, per TLS listener (the alert
	// GpucacheCertificateNearExpiry reads it).
	pemBytes, err := os.ReadFile(srvCert)
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(pemBytes)
	leaf, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	_, metrics, err := do(plain, "GET", "/metrics", opsSecret)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range []string{"data", "admin"} {
		want := fmt.Sprintf(`gpucache_tls_cert_expiry_timestamp_seconds{listener=%q} %s`, l,
			strconv.FormatFloat(float64(leaf.NotAfter.Unix()), 'g', -1, 64))
		if !strings.Contains(metrics, want+"\n") {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if code, body, err := do(client(adminCA, "ops-client"), "GET", protected, ""); err != nil || code != http.StatusOK {
		t.Fatalf("protected endpoint with an admin-CA certificate: %d %q %v", code, body, err)
	}
	if _, _, err := do(client(dataCA, "ops-client"), "GET", "/healthz", ""); err == nil {
		t.Fatal("a data-CA certificate was accepted by the admin listener, which has its own CA")
	}
	// The data listener still demands a certificate from the data CA.
	nc, err := tls.Dial("tcp", a.Data, &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12})
	if err == nil {
		_, err = nc.Read(make([]byte, 1)) // TLS 1.3: the refusal arrives after the handshake
		nc.Close()
	}
	if err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("data listener without a client certificate: %v", err)
	}
}
