package tlstest

import (
	"crypto/x509"
	"encoding/pem"
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

func chain(t *testing.T, certPEM []byte) []*x509.Certificate {
	t.Helper()
	var out []*x509.Certificate
	for {
		var b *pem.Block
		b, certPEM = pem.Decode(certPEM)
		if b == nil {
			return out
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, c)
	}
}

func TestServerLeafDefaults(t *testing.T) {
	ca := NewCA(t, "root")
	certPEM, keyPEM := ca.Issue(t, "srv", Serial(42))
	c := ParseCert(t, certPEM)
	if c.Subject.CommonName != "srv" || c.SerialNumber.Int64() != 42 {
		t.Fatalf("subject/serial = %q/%v", c.Subject.CommonName, c.SerialNumber)
	}
	if !slices.Equal(c.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}) {
		t.Fatalf("EKU = %v", c.ExtKeyUsage)
	}
	if !slices.Contains(c.DNSNames, "localhost") || len(c.IPAddresses) != 1 || !c.IPAddresses[0].Equal(net.IPv4(127, 0, 0, 1)) {
		t.Fatalf("SANs = %v %v", c.DNSNames, c.IPAddresses)
	}
	if _, err := c.Verify(x509.VerifyOptions{Roots: ca.Pool(), DNSName: "localhost"}); err != nil {
		t.Fatal(err)
	}
	if b, _ := pem.Decode(keyPEM); b == nil || b.Type != "PRIVATE KEY" {
		t.Fatal("key is not a PKCS#8 PEM block")
	}
	if !ca.Cert.IsCA || ca.Cert.Subject.CommonName != "root" || !ParseCert(t, ca.CertPEM()).Equal(ca.Cert) {
		t.Fatal("CA certificate")
	}
}

func TestClientLeafAndOptions(t *testing.T) {
	ca := NewCA(t, "root")
	until := time.Now().Add(2 * time.Hour).Truncate(time.Second)
	certPEM, _ := ca.Issue(t, "acme", ClientAuth(), URI("spiffe://gpucache/tenant/acme"), DNS("acme.example"), NotAfter(until))
	c := ParseCert(t, certPEM)
	if !slices.Equal(c.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}) {
		t.Fatalf("EKU = %v", c.ExtKeyUsage)
	}
	if len(c.IPAddresses) != 0 || !slices.Equal(c.DNSNames, []string{"acme.example"}) {
		t.Fatalf("client leaf SANs = %v %v", c.DNSNames, c.IPAddresses)
	}
	if len(c.URIs) != 1 || c.URIs[0].String() != "spiffe://gpucache/tenant/acme" {
		t.Fatalf("URIs = %v", c.URIs)
	}
	if !c.NotAfter.Equal(until) {
		t.Fatalf("NotAfter = %v, want %v", c.NotAfter, until)
	}
	both, _ := ca.Issue(t, "both", ServerAuth(), ClientAuth())
	if c := ParseCert(t, both); len(c.ExtKeyUsage) != 2 || len(c.IPAddresses) != 1 {
		t.Fatalf("server+client leaf: EKU %v IPs %v", c.ExtKeyUsage, c.IPAddresses)
	}
	bare, _ := ca.Issue(t, "bare", NoDefaultSANs())
	if c := ParseCert(t, bare); len(c.DNSNames)+len(c.IPAddresses) != 0 {
		t.Fatalf("NoDefaultSANs leaf has SANs %v %v", c.DNSNames, c.IPAddresses)
	}
	old, _ := ca.Issue(t, "old", Expired())
	if c := ParseCert(t, old); !time.Now().After(c.NotAfter) {
		t.Fatalf("Expired leaf NotAfter = %v", c.NotAfter)
	}
}

func TestIntermediateChain(t *testing.T) {
	root := NewCA(t, "root")
	inter := root.Intermediate(t, "inter")
	certPEM, _ := inter.Issue(t, "srv")
	certs := chain(t, certPEM)
	if len(certs) != 2 || certs[1].Subject.CommonName != "inter" {
		t.Fatalf("chain = %d certs", len(certs))
	}
	inters := x509.NewCertPool()
	inters.AddCert(certs[1])
	if _, err := certs[0].Verify(x509.VerifyOptions{Roots: root.Pool(), Intermediates: inters, DNSName: "localhost"}); err != nil {
		t.Fatal(err)
	}
	if len(chain(t, inter.CertPEM())) != 1 {
		t.Fatal("CertPEM of an intermediate must hold only its own certificate")
	}
}

func TestWriteFiles(t *testing.T) {
	dir := t.TempDir()
	ca := NewCA(t, "root")
	certFile, keyFile := ca.IssueFiles(t, dir, "srv", "srv")
	if certFile != filepath.Join(dir, "srv.crt") || keyFile != filepath.Join(dir, "srv.key") {
		t.Fatalf("paths %s %s", certFile, keyFile)
	}
	st, err := os.Stat(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("key mode %v", st.Mode().Perm())
	}
	// Rewriting replaces the content and leaves no temporary files.
	WriteFile(t, certFile, []byte("x"))
	if b, _ := os.ReadFile(certFile); string(b) != "x" {
		t.Fatalf("rewrite: %q", b)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 2 {
		t.Fatalf("dir has %d entries, want 2", len(ents))
	}
}
