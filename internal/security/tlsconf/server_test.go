package tlsconf_test

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"slices"
	"testing"

	"github.com/gpucache/gpucache/internal/security/tlsconf"
	"github.com/gpucache/gpucache/internal/security/tlsconf/tlstest"
)

var tlsVersions = []struct {
	name string
	max  uint16
}{{"TLS1.3", tls.VersionTLS13}, {"TLS1.2", tls.VersionTLS12}}

// withMax returns a copy of cfg limited to TLS version max.
func withMax(cfg *tls.Config, max uint16) *tls.Config {
	c := cfg.Clone()
	c.MaxVersion = max
	return c
}

func TestServerTLSOnly(t *testing.T) {
	p := newPKI(t)
	srv := mustServer(t, p.serverFiles(t, "srv", tlstest.Serial(7)))
	if srv.MTLS() {
		t.Fatal("MTLS() = true without ClientCAFile")
	}
	es := startEchoServer(t, srv.Config())
	cs, err := roundTrip(t, es.addr, p.client(t, nil, ""))
	if err != nil {
		t.Fatal(err)
	}
	if got := peerSerial(t, cs); got != 7 {
		t.Fatalf("server serial = %d, want 7", got)
	}
	h := es.next(t)
	if h.err != nil {
		t.Fatal(h.err)
	}
	if names := tlsconf.PeerNames(h.state); names != nil {
		t.Fatalf("PeerNames without client cert = %v", names)
	}
}

func TestConfigDefaults(t *testing.T) {
	p := newPKI(t)
	f := p.serverFiles(t, "srv")
	f.ClientCAFile = p.caFile
	srv := mustServer(t, f)
	cfg := srv.Config()
	if cfg.MinVersion != tls.VersionTLS12 || cfg.ClientAuth != tls.RequireAndVerifyClientCert ||
		cfg.GetConfigForClient == nil || cfg.GetCertificate == nil {
		t.Fatalf("server Config: min=%x auth=%v", cfg.MinVersion, cfg.ClientAuth)
	}
	cert, err := cfg.GetCertificate(&tls.ClientHelloInfo{})
	if err != nil || cert == nil || cert.Leaf == nil || cert.Leaf.Subject.CommonName != "gpucache-server" {
		t.Fatalf("GetCertificate = %v, %v", cert, err)
	}
	// Each call returns its own copy.
	if srv.Config() == cfg {
		t.Fatal("Config returned the same pointer twice")
	}
	cli := p.client(t, p.ca, "acme")
	if cli.MinVersion != tls.VersionTLS12 || cli.InsecureSkipVerify || cli.RootCAs == nil || cli.GetClientCertificate == nil {
		t.Fatal("client Config defaults")
	}
	if c := p.client(t, nil, ""); c.GetClientCertificate != nil {
		t.Fatal("client without cert files offers a certificate")
	}
}

func TestMTLSRoundTrip(t *testing.T) {
	for _, v := range tlsVersions {
		t.Run(v.name, func(t *testing.T) {
			p := newPKI(t)
			f := p.serverFiles(t, "srv")
			f.ClientCAFile = p.caFile
			srv := mustServer(t, f)
			if !srv.MTLS() {
				t.Fatal("MTLS() = false with ClientCAFile")
			}
			es := startEchoServer(t, srv.Config())
			cli := withMax(p.client(t, p.ca, "acme", tlstest.URI("spiffe://gpucache/tenant/acme")), v.max)
			cs, err := roundTrip(t, es.addr, cli)
			if err != nil {
				t.Fatal(err)
			}
			if cs.Version != v.max {
				t.Fatalf("negotiated %x, want %x", cs.Version, v.max)
			}
			h := es.next(t)
			if h.err != nil {
				t.Fatal(h.err)
			}
			names := tlsconf.PeerNames(h.state)
			want := []string{"acme", "spiffe://gpucache/tenant/acme"}
			if !slices.Equal(names, want) {
				t.Fatalf("PeerNames = %q, want %q", names, want)
			}
		})
	}
}

func TestMTLSRejections(t *testing.T) {
	for _, v := range tlsVersions {
		t.Run(v.name, func(t *testing.T) {
			p := newPKI(t)
			f := p.serverFiles(t, "srv")
			f.ClientCAFile = p.caFile
			srv := mustServer(t, f)
			es := startEchoServer(t, srv.Config())

			t.Run("client cert from another CA", func(t *testing.T) {
				cli := withMax(p.client(t, p.other, "mallory"), v.max)
				if _, err := roundTrip(t, es.addr, cli); err == nil {
					t.Fatal("client with a certificate from another CA got through")
				}
				h := es.next(t)
				var cve *tls.CertificateVerificationError
				if !errors.As(h.err, &cve) {
					t.Fatalf("server error = %v, want a certificate verification error", h.err)
				}
				var uae x509.UnknownAuthorityError
				if !errors.As(h.err, &uae) {
					t.Fatalf("server error = %v, want unknown authority", h.err)
				}
				if n := tlsconf.PeerNames(h.state); n != nil {
					t.Fatalf("PeerNames of a failed handshake = %v", n)
				}
			})
			t.Run("no client cert", func(t *testing.T) {
				cli := withMax(p.client(t, nil, ""), v.max)
				if _, err := roundTrip(t, es.addr, cli); err == nil {
					t.Fatal("client without a certificate got through")
				}
				if h := es.next(t); h.err == nil {
					t.Fatal("server accepted a client without a certificate")
				}
			})
			t.Run("client trusts wrong CA for the server", func(t *testing.T) {
				wrongCA := tlstest.WriteFile(t, p.dir+"/other-ca.pem", p.other.CertPEM())
				cert, key := p.ca.IssueFiles(t, p.dir, "client-ok", "acme", tlstest.ClientAuth())
				cli, err := tlsconf.NewClient(tlsconf.ClientFiles{CAFile: wrongCA, CertFile: cert, KeyFile: key, ServerName: "localhost"})
				if err != nil {
					t.Fatal(err)
				}
				_, err = roundTrip(t, es.addr, withMax(cli, v.max))
				var uae x509.UnknownAuthorityError
				if !errors.As(err, &uae) {
					t.Fatalf("client error = %v, want unknown authority", err)
				}
				if h := es.next(t); h.err == nil {
					t.Fatal("server-side handshake succeeded although the client rejected the server")
				}
			})
			t.Run("wrong server name", func(t *testing.T) {
				cli := withMax(p.client(t, p.ca, "acme"), v.max)
				cli.ServerName = "not-the-server.example"
				_, err := roundTrip(t, es.addr, cli)
				var hne x509.HostnameError
				if !errors.As(err, &hne) {
					t.Fatalf("client error = %v, want a hostname error", err)
				}
				es.next(t)
			})
			t.Run("still accepts a good client", func(t *testing.T) {
				if _, err := roundTrip(t, es.addr, withMax(p.client(t, p.ca, "acme"), v.max)); err != nil {
					t.Fatal(err)
				}
				if h := es.next(t); h.err != nil {
					t.Fatal(h.err)
				}
			})
		})
	}
}

func TestIntermediateChain(t *testing.T) {
	p := newPKI(t)
	inter := p.ca.Intermediate(t, "gpucache-intermediate")
	cert, key := inter.IssueFiles(t, p.dir, "srv", "gpucache-server")
	cliCert, cliKey := inter.IssueFiles(t, p.dir, "cli", "acme", tlstest.ClientAuth())
	srv := mustServer(t, tlsconf.Files{CertFile: cert, KeyFile: key, ClientCAFile: p.caFile})
	es := startEchoServer(t, srv.Config())
	cli, err := tlsconf.NewClient(tlsconf.ClientFiles{CAFile: p.caFile, CertFile: cliCert, KeyFile: cliKey, ServerName: "localhost"})
	if err != nil {
		t.Fatal(err)
	}
	cs, err := roundTrip(t, es.addr, cli)
	if err != nil {
		t.Fatal(err)
	}
	if len(cs.PeerCertificates) != 2 {
		t.Fatalf("server sent %d certificates, want leaf + intermediate", len(cs.PeerCertificates))
	}
	h := es.next(t)
	if h.err != nil || !slices.Equal(tlsconf.PeerNames(h.state), []string{"acme"}) {
		t.Fatalf("server side: %v %v", h.err, tlsconf.PeerNames(h.state))
	}
}

func TestPeerNamesUnverified(t *testing.T) {
	p := newPKI(t)
	certPEM, _ := p.ca.Issue(t, "acme", tlstest.ClientAuth(), tlstest.DNS("acme"), tlstest.URI("spiffe://gpucache/tenant/acme"))
	leaf := tlstest.ParseCert(t, certPEM)
	// Presented but unverified certificates give no names.
	if n := tlsconf.PeerNames(tls.ConnectionState{HandshakeComplete: true, PeerCertificates: []*x509.Certificate{leaf}}); n != nil {
		t.Fatalf("unverified PeerNames = %v", n)
	}
	if n := tlsconf.PeerNames(tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{leaf}}}); n != nil {
		t.Fatalf("incomplete handshake PeerNames = %v", n)
	}
	// The CN and an identical DNS SAN appear once.
	n := tlsconf.PeerNames(tls.ConnectionState{HandshakeComplete: true, VerifiedChains: [][]*x509.Certificate{{leaf}}})
	if want := []string{"acme", "spiffe://gpucache/tenant/acme"}; !slices.Equal(n, want) {
		t.Fatalf("PeerNames = %q, want %q", n, want)
	}
}
