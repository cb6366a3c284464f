// Package tlstest builds throw-away PKI material for tests: an in-memory
// ECDSA P-256 CA (optionally with intermediates) that issues server and
// client leaf certificates, and helpers that write PEM to files for
// tlsconf.Files and tlsconf.ClientFiles.
//
// A typical mTLS test:
//
//	ca := tlstest.NewCA(t, "gpucache-test-ca")
//	dir := t.TempDir()
//	srvCert, srvKey := ca.IssueFiles(t, dir, "server", "gpucache-server")
//	caFile := tlstest.WriteFile(t, filepath.Join(dir, "ca.pem"), ca.CertPEM())
//	cliCert, cliKey := ca.IssueFiles(t, dir, "acme", "acme",
//		tlstest.ClientAuth(), tlstest.URI("spiffe://gpucache/tenant/acme"))
//
//	srv, err := tlsconf.NewServer(tlsconf.Files{CertFile: srvCert, KeyFile: srvKey, ClientCAFile: caFile})
//	cli, err := tlsconf.NewClient(tlsconf.ClientFiles{CAFile: caFile, CertFile: cliCert, KeyFile: cliKey})
//
// Everything here is for tests only: keys are unencrypted and validity
// periods are short.
package tlstest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// CA is an in-memory certificate authority. Its fields are exported for
// tests that need to build something unusual by hand.
type CA struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey

	certPEM []byte
	// chainPEM is this CA's certificate followed by its parents' up to but
	// excluding the root; empty for a root. Issue appends it to leafs.
	chainPEM []byte
}

// NewCA returns a self-signed root CA with subject CN name, valid from an
// hour ago for a year unless NotBefore/NotAfter options say otherwise.
// Only the validity and Serial options apply to a CA.
func NewCA(t testing.TB, name string, opts ...Option) *CA {
	t.Helper()
	return newCA(t, nil, name, opts)
}

// Intermediate returns a CA with subject CN name issued by ca. Leafs it
// issues carry the intermediate chain after the leaf, so a peer that
// trusts only the root can verify them.
func (ca *CA) Intermediate(t testing.TB, name string, opts ...Option) *CA {
	t.Helper()
	return newCA(t, ca, name, opts)
}

func newCA(t testing.TB, parent *CA, name string, opts []Option) *CA {
	t.Helper()
	o := options(t, opts)
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber:          o.serial,
		Subject:               pkix.Name{CommonName: name, Organization: []string{"gpucache tests"}},
		NotBefore:             o.notBefore,
		NotAfter:              o.notAfter,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	signer, signerKey := tmpl, key
	if parent != nil {
		signer, signerKey = parent.Cert, parent.Key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, signer, &key.PublicKey, signerKey)
	if err != nil {
		t.Fatalf("tlstest: create CA %q: %v", name, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatalf("tlstest: parse CA %q: %v", name, err)
	}
	ca := &CA{Cert: cert, Key: key, certPEM: pemCert(der)}
	if parent != nil {
		ca.chainPEM = slices.Concat(ca.certPEM, parent.chainPEM)
	}
	return ca
}

// CertPEM returns this CA's certificate in PEM, for a CA bundle file.
func (ca *CA) CertPEM() []byte { return slices.Clone(ca.certPEM) }

// Pool returns a pool holding only this CA's certificate.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// Issue returns a leaf certificate with subject CN cn, signed by ca, and its
// PKCS#8 private key, both in PEM. certPEM holds the leaf followed by any
// intermediates between ca and the root.
//
// By default the leaf is a server certificate (ExtKeyUsage serverAuth) with
// IP SAN 127.0.0.1 and DNS SAN "localhost"; ClientAuth() makes a client
// certificate instead (no default SANs), and ServerAuth() with
// ClientAuth() makes one that is both. Validity defaults to an hour ago
// until a day from now.
func (ca *CA) Issue(t testing.TB, cn string, opts ...Option) (certPEM, keyPEM []byte) {
	t.Helper()
	o := options(t, opts)
	usages := o.usages
	if len(usages) == 0 {
		usages = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	}
	tmpl := &x509.Certificate{
		SerialNumber:          o.serial,
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             o.notBefore,
		NotAfter:              o.notAfter,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           usages,
		BasicConstraintsValid: true,
		DNSNames:              o.dns,
		IPAddresses:           o.ips,
		URIs:                  o.uris,
	}
	if slices.Contains(usages, x509.ExtKeyUsageServerAuth) && !o.noDefaultSANs {
		tmpl.IPAddresses = append([]net.IP{net.IPv4(127, 0, 0, 1)}, tmpl.IPAddresses...)
		tmpl.DNSNames = append([]string{"localhost"}, tmpl.DNSNames...)
	}
	key := newKey(t)
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		t.Fatalf("tlstest: issue %q: %v", cn, err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatalf("tlstest: marshal key for %q: %v", cn, err)
	}
	certPEM = slices.Concat(pemCert(der), ca.chainPEM)
	keyPEM = pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
	return certPEM, keyPEM
}

// IssueFiles issues a leaf like Issue and writes it with WriteFiles to
// dir/name.crt and dir/name.key, returning the two paths.
func (ca *CA) IssueFiles(t testing.TB, dir, name, cn string, opts ...Option) (certFile, keyFile string) {
	t.Helper()
	certPEM, keyPEM := ca.Issue(t, cn, opts...)
	return WriteFiles(t, dir, name, certPEM, keyPEM)
}

// Option adjusts a certificate made by NewCA, Intermediate or Issue.
type Option func(*opts)

type opts struct {
	usages              []x509.ExtKeyUsage
	dns                 []string
	ips                 []net.IP
	uris                []*url.URL
	rawURIs             []string
	notBefore, notAfter time.Time
	serial              *big.Int
	noDefaultSANs       bool
}

// ServerAuth adds the serverAuth extended key usage (the default when no
// usage option is given) and with it the default SANs.
func ServerAuth() Option {
	return func(o *opts) { o.usages = append(o.usages, x509.ExtKeyUsageServerAuth) }
}

// ClientAuth adds the clientAuth extended key usage.
func ClientAuth() Option {
	return func(o *opts) { o.usages = append(o.usages, x509.ExtKeyUsageClientAuth) }
}

// DNS adds DNS SANs.
func DNS(names ...string) Option { return func(o *opts) { o.dns = append(o.dns, names...) } }

// IP adds IP SANs.
func IP(ips ...net.IP) Option { return func(o *opts) { o.ips = append(o.ips, ips...) } }

// URI adds URI SANs such as "spiffe://gpucache/tenant/acme"; an unparsable
// URI fails the test.
func URI(uris ...string) Option { return func(o *opts) { o.rawURIs = append(o.rawURIs, uris...) } }

// NoDefaultSANs leaves out the 127.0.0.1 and "localhost" SANs that server
// certificates get by default.
func NoDefaultSANs() Option { return func(o *opts) { o.noDefaultSANs = true } }

// NotBefore sets the start of the validity period.
func NotBefore(t time.Time) Option { return func(o *opts) { o.notBefore = t } }

// NotAfter sets the end of the validity period.
func NotAfter(t time.Time) Option { return func(o *opts) { o.notAfter = t } }

// Expired makes a certificate whose validity ended a day ago.
func Expired() Option {
	return func(o *opts) {
		now := time.Now()
		o.notBefore, o.notAfter = now.Add(-72*time.Hour), now.Add(-24*time.Hour)
	}
}

// Serial sets the serial number (default: random 127 bits).
func Serial(n int64) Option { return func(o *opts) { o.serial = big.NewInt(n) } }

func options(t testing.TB, list []Option) *opts {
	t.Helper()
	now := time.Now()
	o := &opts{notBefore: now.Add(-time.Hour), notAfter: now.Add(24 * time.Hour)}
	for _, f := range list {
		f(o)
	}
	for _, s := range o.rawURIs {
		u, err := url.Parse(s)
		if err != nil {
			t.Fatalf("tlstest: URI SAN %q: %v", s, err)
		}
		o.uris = append(o.uris, u)
	}
	if o.serial == nil {
		n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
		if err != nil {
			t.Fatalf("tlstest: serial: %v", err)
		}
		o.serial = n.Add(n, big.NewInt(1))
	}
	return o
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("tlstest: generate key: %v", err)
	}
	return k
}

func pemCert(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// ParseCert parses the first certificate in certPEM, failing the test if
// there is none.
func ParseCert(t testing.TB, certPEM []byte) *x509.Certificate {
	t.Helper()
	b, _ := pem.Decode(certPEM)
	if b == nil || b.Type != "CERTIFICATE" {
		t.Fatalf("tlstest: no CERTIFICATE PEM block")
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatalf("tlstest: parse certificate: %v", err)
	}
	return c
}

// WriteFiles writes certPEM to dir/name.crt and keyPEM to dir/name.key
// (mode 0600) and returns the two paths. Existing files are replaced
// atomically (temporary file, then rename), as an operator rotating
// certificates should, so it can also rewrite files a server is
// reloading.
func WriteFiles(t testing.TB, dir, name string, certPEM, keyPEM []byte) (certFile, keyFile string) {
	t.Helper()
	certFile = WriteFile(t, filepath.Join(dir, name+".crt"), certPEM)
	keyFile = WriteFile(t, filepath.Join(dir, name+".key"), keyPEM)
	return certFile, keyFile
}

// WriteFile atomically writes data to path with mode 0600 and returns
// path.
func WriteFile(t testing.TB, path string, data []byte) string {
	t.Helper()
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		t.Fatalf("tlstest: %v", err)
	}
	_, werr := tmp.Write(data)
	cerr := tmp.Close()
	if werr != nil || cerr != nil {
		os.Remove(tmp.Name())
		t.Fatalf("tlstest: write %s: %v %v", path, werr, cerr)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		os.Remove(tmp.Name())
		t.Fatalf("tlstest: %v", err)
	}
	return path
}
