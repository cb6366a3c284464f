package tlsconf_test

import (
	"crypto/ecdsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"io/fs"
	"math/big"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpucache/gpucache/internal/security/secretfile"
	"github.com/gpucache/gpucache/internal/security/tlsconf"
	"github.com/gpucache/gpucache/internal/security/tlsconf/tlstest"
)

func TestNewServerErrors(t *testing.T) {
	type setup struct {
		p *pki
		f tlsconf.Files
	}
	cases := []struct {
		name string
		// prepare returns the Files to use and the path the error must name
		// ("" for a configuration error that names no file).
		prepare func(t *testing.T, s setup) (tlsconf.Files, string)
		kind    error
		// words the message must contain, to tell the operator what to do.
		words []string
	}{
		{"empty CertFile", func(t *testing.T, s setup) (tlsconf.Files, string) {
			s.f.CertFile = ""
			return s.f, ""
		}, tlsconf.ErrConfig, []string{"CertFile"}},
		{"empty KeyFile", func(t *testing.T, s setup) (tlsconf.Files, string) {
			s.f.KeyFile = ""
			return s.f, ""
		}, tlsconf.ErrConfig, []string{"KeyFile"}},
		{"missing certificate file", func(t *testing.T, s setup) (tlsconf.Files, string) {
			s.f.CertFile = filepath.Join(s.p.dir, "nope.crt")
			return s.f, s.f.CertFile
		}, fs.ErrNotExist, []string{"server certificate", "no such file", "check the path"}},
		{"missing key file", func(t *testing.T, s setup) (tlsconf.Files, string) {
			s.f.KeyFile = filepath.Join(s.p.dir, "nope.key")
			return s.f, s.f.KeyFile
		}, fs.ErrNotExist, []string{"server key"}},
		{"missing client CA file", func(t *testing.T, s setup) (tlsconf.Files, string) {
			s.f.ClientCAFile = filepath.Join(s.p.dir, "nope.pem")
			return s.f, s.f.ClientCAFile
		}, fs.ErrNotExist, []string{"client CA bundle"}},
		{"key file is a FIFO", func(t *testing.T, s setup) (tlsconf.Files, string) {
			// Its open used to wait for a writer forever.
			s.f.KeyFile = filepath.Join(s.p.dir, "fifo.key")
			if err := syscall.Mkfifo(s.f.KeyFile, 0o600); err != nil {
				t.Fatal(err)
			}
			return s.f, s.f.KeyFile
		}, secretfile.ErrNotRegular, []string{"server key", "named pipe"}},
		{"client CA file is a device", func(t *testing.T, s setup) (tlsconf.Files, string) {
			s.f.ClientCAFile = "/dev/zero" // would be read without end
			return s.f, s.f.ClientCAFile
		}, secretfile.ErrNotRegular, []string{"client CA bundle", "device"}},
		{"mismatched key", func(t *testing.T, s setup) (tlsconf.Files, string) {
			_, otherKey := s.p.ca.IssueFiles(t, s.p.dir, "other", "other")
			s.f.KeyFile = otherKey
			return s.f, otherKey
		}, tlsconf.ErrKeyMismatch, []string{"does not belong to the certificate", "srv.crt"}},
		{"expired certificate", func(t *testing.T, s setup) (tlsconf.Files, string) {
			f := s.p.serverFiles(t, "expired", tlstest.Expired())
			f.ClientCAFile = s.f.ClientCAFile
			return f, f.CertFile
		}, tlsconf.ErrExpired, []string{"expired at", "renewed certificate"}},
		{"not yet valid certificate", func(t *testing.T, s setup) (tlsconf.Files, string) {
			now := time.Now()
			f := s.p.serverFiles(t, "future", tlstest.NotBefore(now.Add(time.Hour)), tlstest.NotAfter(now.Add(2*time.Hour)))
			return f, f.CertFile
		}, tlsconf.ErrNotYetValid, []string{"not valid until", "clock"}},
		{"swapped certificate and key", func(t *testing.T, s setup) (tlsconf.Files, string) {
			s.f.CertFile, s.f.KeyFile = s.f.KeyFile, s.f.CertFile
			return s.f, s.f.CertFile
		}, tlsconf.ErrNoPEM, []string{"PRIVATE KEY", "swap"}},
		{"empty certificate file", func(t *testing.T, s setup) (tlsconf.Files, string) {
			s.f.CertFile = tlstest.WriteFile(t, filepath.Join(s.p.dir, "empty.crt"), nil)
			return s.f, s.f.CertFile
		}, tlsconf.ErrNoPEM, []string{"empty"}},
		{"DER certificate", func(t *testing.T, s setup) (tlsconf.Files, string) {
			certPEM, _ := s.p.ca.Issue(t, "x")
			b, _ := pem.Decode(certPEM)
			s.f.CertFile = tlstest.WriteFile(t, filepath.Join(s.p.dir, "der.crt"), b.Bytes)
			return s.f, s.f.CertFile
		}, tlsconf.ErrNoPEM, []string{"DER"}},
		{"corrupt certificate block", func(t *testing.T, s setup) (tlsconf.Files, string) {
			bad := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte("not DER")})
			s.f.CertFile = tlstest.WriteFile(t, filepath.Join(s.p.dir, "bad.crt"), bad)
			return s.f, s.f.CertFile
		}, tlsconf.ErrMalformed, []string{"certificate #1"}},
		{"client-only certificate as server", func(t *testing.T, s setup) (tlsconf.Files, string) {
			f := s.p.serverFiles(t, "cli", tlstest.ClientAuth())
			return f, f.CertFile
		}, tlsconf.ErrUnsuitable, []string{"server authentication"}},
		{"server certificate without SANs", func(t *testing.T, s setup) (tlsconf.Files, string) {
			f := s.p.serverFiles(t, "nosan", tlstest.NoDefaultSANs())
			return f, f.CertFile
		}, tlsconf.ErrUnsuitable, []string{"subject alternative names"}},
		{"misordered chain", func(t *testing.T, s setup) (tlsconf.Files, string) {
			inter := s.p.ca.Intermediate(t, "inter")
			leafPEM, leafKey := inter.Issue(t, "gpucache-server")
			// leaf, root, intermediate: the leaf is not issued by #2.
			chain := slices.Concat(firstCert(leafPEM), s.p.ca.CertPEM(), inter.CertPEM())
			cf, kf := tlstest.WriteFiles(t, s.p.dir, "misordered", chain, leafKey)
			return tlsconf.Files{CertFile: cf, KeyFile: kf}, cf
		}, tlsconf.ErrUnsuitable, []string{"is not issued by certificate #2", "in order"}},
		{"expired intermediate", func(t *testing.T, s setup) (tlsconf.Files, string) {
			inter := s.p.ca.Intermediate(t, "inter", tlstest.Expired())
			cf, kf := inter.IssueFiles(t, s.p.dir, "viaexpired", "gpucache-server")
			return tlsconf.Files{CertFile: cf, KeyFile: kf}, cf
		}, tlsconf.ErrExpired, []string{"intermediate certificate #2"}},
		{"encrypted key", func(t *testing.T, s setup) (tlsconf.Files, string) {
			enc := pem.EncodeToMemory(&pem.Block{Type: "ENCRYPTED PRIVATE KEY", Bytes: []byte{1, 2, 3}})
			s.f.KeyFile = tlstest.WriteFile(t, filepath.Join(s.p.dir, "enc.key"), enc)
			return s.f, s.f.KeyFile
		}, tlsconf.ErrUnsuitable, []string{"encrypted"}},
		{"leaf certificate as client CA", func(t *testing.T, s setup) (tlsconf.Files, string) {
			certPEM, _ := s.p.ca.Issue(t, "some-leaf")
			s.f.ClientCAFile = tlstest.WriteFile(t, filepath.Join(s.p.dir, "leaf-as-ca.pem"), certPEM)
			return s.f, s.f.ClientCAFile
		}, tlsconf.ErrUnsuitable, []string{"not a CA certificate"}},
		{"private key in client CA bundle", func(t *testing.T, s setup) (tlsconf.Files, string) {
			key := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: []byte{1}})
			s.f.ClientCAFile = tlstest.WriteFile(t, filepath.Join(s.p.dir, "ca-with-key.pem"), slices.Concat(s.p.ca.CertPEM(), key))
			return s.f, s.f.ClientCAFile
		}, tlsconf.ErrUnsuitable, []string{"private key"}},
		{"only expired client CAs", func(t *testing.T, s setup) (tlsconf.Files, string) {
			old := tlstest.NewCA(t, "old-ca", tlstest.Expired())
			s.f.ClientCAFile = tlstest.WriteFile(t, filepath.Join(s.p.dir, "old-ca.pem"), old.CertPEM())
			return s.f, s.f.ClientCAFile
		}, tlsconf.ErrExpired, []string{"no CA certificate in the bundle is currently valid"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := newPKI(t)
			f := p.serverFiles(t, "srv")
			f.ClientCAFile = p.caFile
			files, path := tc.prepare(t, setup{p: p, f: f})
			srv, err := tlsconf.NewServer(files)
			if srv != nil {
				t.Fatal("NewServer returned a server with an error")
			}
			if path == "" {
				if !errors.Is(err, tc.kind) {
					t.Fatalf("error = %v, want %v", err, tc.kind)
				}
			} else {
				fileError(t, err, path, tc.kind)
			}
			for _, w := range tc.words {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not say %q: %v", w, err)
				}
			}
			t.Logf("%v", err)
		})
	}
}

func firstCert(certPEM []byte) []byte {
	b, _ := pem.Decode(certPEM)
	return pem.EncodeToMemory(b)
}

func TestNewServerAcceptsKeyFormats(t *testing.T) {
	p := newPKI(t)
	certPEM, keyPEM := p.ca.Issue(t, "gpucache-server")
	b, _ := pem.Decode(keyPEM)
	k, err := x509.ParsePKCS8PrivateKey(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	sec1, err := x509.MarshalECPrivateKey(k.(*ecdsa.PrivateKey))
	if err != nil {
		t.Fatal(err)
	}
	ecPEM := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: sec1})
	cf, kf := tlstest.WriteFiles(t, p.dir, "sec1", certPEM, ecPEM)
	if _, err := tlsconf.NewServer(tlsconf.Files{CertFile: cf, KeyFile: kf}); err != nil {
		t.Fatalf("SEC 1 EC key: %v", err)
	}
	// An expired CA next to a valid one is tolerated.
	old := tlstest.NewCA(t, "old-ca", tlstest.Expired())
	bundle := tlstest.WriteFile(t, filepath.Join(p.dir, "bundle.pem"), slices.Concat(old.CertPEM(), p.ca.CertPEM()))
	srv, err := tlsconf.NewServer(tlsconf.Files{CertFile: cf, KeyFile: kf, ClientCAFile: bundle})
	if err != nil {
		t.Fatal(err)
	}
	if d := srv.Describe(); !strings.Contains(d, `client_cas=["old-ca" "gpucache-test-ca"]`) {
		t.Fatalf("Describe = %s", d)
	}
}

func TestNewClientErrors(t *testing.T) {
	p := newPKI(t)
	cliCert, cliKey := p.ca.IssueFiles(t, p.dir, "cli", "acme", tlstest.ClientAuth())
	srvCert, srvKey := p.ca.IssueFiles(t, p.dir, "srvonly", "srv")
	_, otherKey := p.ca.IssueFiles(t, p.dir, "cli2", "acme2", tlstest.ClientAuth())
	expCert, expKey := p.ca.IssueFiles(t, p.dir, "cliexp", "acme", tlstest.ClientAuth(), tlstest.Expired())

	cases := []struct {
		name  string
		f     tlsconf.ClientFiles
		path  string
		kind  error
		words []string
	}{
		{"no CA file", tlsconf.ClientFiles{CertFile: cliCert, KeyFile: cliKey}, "", tlsconf.ErrConfig, []string{"CAFile"}},
		{"cert without key", tlsconf.ClientFiles{CAFile: p.caFile, CertFile: cliCert}, "", tlsconf.ErrConfig, []string{"together"}},
		{"key without cert", tlsconf.ClientFiles{CAFile: p.caFile, KeyFile: cliKey}, "", tlsconf.ErrConfig, []string{"together"}},
		{"missing CA file", tlsconf.ClientFiles{CAFile: filepath.Join(p.dir, "nope.pem")}, filepath.Join(p.dir, "nope.pem"), fs.ErrNotExist, []string{"server CA bundle"}},
		{"mismatched key", tlsconf.ClientFiles{CAFile: p.caFile, CertFile: cliCert, KeyFile: otherKey}, otherKey, tlsconf.ErrKeyMismatch, []string{"client key"}},
		{"server-only certificate", tlsconf.ClientFiles{CAFile: p.caFile, CertFile: srvCert, KeyFile: srvKey}, srvCert, tlsconf.ErrUnsuitable, []string{"client authentication"}},
		{"expired certificate", tlsconf.ClientFiles{CAFile: p.caFile, CertFile: expCert, KeyFile: expKey}, expCert, tlsconf.ErrExpired, []string{"expired at"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := tlsconf.NewClient(tc.f)
			if cfg != nil {
				t.Fatal("NewClient returned a config with an error")
			}
			if tc.path == "" {
				if !errors.Is(err, tc.kind) {
					t.Fatalf("error = %v, want %v", err, tc.kind)
				}
			} else {
				fileError(t, err, tc.path, tc.kind)
			}
			for _, w := range tc.words {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not say %q: %v", w, err)
				}
			}
			t.Logf("%v", err)
		})
	}
}

func TestDescribe(t *testing.T) {
	p := newPKI(t)
	certPEM, keyPEM := p.ca.Issue(t, "gpucache-server", tlstest.Serial(123456789))
	cf, kf := tlstest.WriteFiles(t, p.dir, "srv", certPEM, keyPEM)
	srv := mustServer(t, tlsconf.Files{CertFile: cf, KeyFile: kf, ClientCAFile: p.caFile})
	d := srv.Describe()
	t.Logf("Describe: %s", d)
	leaf := tlstest.ParseCert(t, certPEM)
	for _, want := range []string{
		`cn="gpucache-server"`, "serial=123456789",
		"not_after=" + leaf.NotAfter.UTC().Format(time.RFC3339),
		`issuer_cn="gpucache-test-ca"`, "mtls=true", `client_cas=["gpucache-test-ca"]`,
	} {
		if !strings.Contains(d, want) {
			t.Errorf("Describe lacks %q: %s", want, d)
		}
	}
	if !srv.NotAfter().Equal(leaf.NotAfter) {
		t.Errorf("NotAfter = %v, want %v", srv.NotAfter(), leaf.NotAfter)
	}

	// Nothing secret or bulky: no PEM, no key in any common encoding, no
	// certificate bytes or fingerprints.
	kb, _ := pem.Decode(keyPEM)
	key, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	ec := key.(*ecdsa.PrivateKey)
	priv, err := ec.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(leaf.Raw)
	lower := strings.ToLower(d)
	for _, bad := range []string{
		"-----", "private", "begin",
		string(keyPEM), base64.StdEncoding.EncodeToString(kb.Bytes),
		hex.EncodeToString(priv), base64.StdEncoding.EncodeToString(priv),
		new(big.Int).SetBytes(priv).String(),
		base64.StdEncoding.EncodeToString(leaf.Raw)[:32],
		hex.EncodeToString(sum[:])[:16],
	} {
		if strings.Contains(lower, strings.ToLower(bad)) {
			t.Errorf("Describe contains %q: %s", bad, d)
		}
	}

	// Without mTLS there is no CA list.
	plain := mustServer(t, tlsconf.Files{CertFile: cf, KeyFile: kf})
	if d := plain.Describe(); !strings.Contains(d, "mtls=false") || strings.Contains(d, "client_cas") {
		t.Errorf("Describe without mTLS: %s", d)
	}
}
