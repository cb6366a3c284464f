package tlsconf

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Files names PEM files. CertFile and KeyFile are this side's certificate
// chain (leaf first, then intermediates) and its private key. ClientCAFile
// (server side), when set, turns on mTLS: clients must present a
// certificate that verifies against this CA bundle
// (tls.RequireAndVerifyClientCert). With ClientCertOptional a client may
// also present none; one it presents must still verify
// (tls.VerifyClientCertIfGiven): the admin listener's mode, so health
// probes and bearer-token requests need no certificate.
type Files struct {
	CertFile, KeyFile, ClientCAFile string
	ClientCertOptional              bool
}

// Server holds a reloadable server-side TLS setup. It is safe for
// concurrent use.
type Server struct {
	files  Files
	mode   tls.ClientAuthType
	base   *tls.Config
	reload sync.Mutex // serialises Reload so an older read never wins
	cur    atomic.Pointer[material]
}

// material is one immutable generation of loaded files.
type material struct {
	cert *tls.Certificate
	leaf *x509.Certificate
	cas  []*x509.Certificate // client CAs; nil without mTLS
	cfg  *tls.Config         // handshake config for this generation
}

// NewServer loads and validates f now. The error names the file at fault
// and says what is wrong with it.
func NewServer(f Files) (*Server, error) {
	if f.CertFile == "" {
		return nil, configError("server: Files.CertFile is empty; set it to the PEM file holding the server certificate chain")
	}
	if f.KeyFile == "" {
		return nil, configError("server: Files.KeyFile is empty; set it to the PEM file holding the server private key")
	}
	s := &Server{files: f, mode: tls.NoClientCert}
	if f.ClientCAFile != "" {
		s.mode = tls.RequireAndVerifyClientCert
		if f.ClientCertOptional {
			s.mode = tls.VerifyClientCertIfGiven
		}
	}
	m, err := s.load()
	if err != nil {
		return nil, err
	}
	s.cur.Store(m)
	s.base = &tls.Config{
		MinVersion: tls.VersionTLS12,
		ClientAuth: s.mode,
		// Every handshake takes its parameters from the generation that
		// is current when the ClientHello arrives.
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return s.cur.Load().cfg, nil
		},
		// Not consulted while GetConfigForClient returns a config; set so
		// the Config is complete on its own.
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return s.cur.Load().cert, nil
		},
	}
	return s, nil
}

// load reads and validates all files into a new generation.
func (s *Server) load() (*material, error) {
	now := time.Now()
	cert, err := loadKeyPair(keyPairSpec{side: "server", usage: x509.ExtKeyUsageServerAuth, requireSAN: true},
		s.files.CertFile, s.files.KeyFile, now)
	if err != nil {
		return nil, err
	}
	m := &material{cert: cert, leaf: cert.Leaf}
	cfg := &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{*cert},
		ClientAuth:   s.mode,
	}
	if s.files.ClientCAFile != "" {
		pool, cas, err := loadCABundle("client CA bundle", s.files.ClientCAFile, now)
		if err != nil {
			return nil, err
		}
		cfg.ClientCAs, m.cas = pool, cas
	}
	// Session tickets are sealed with keys that belong to this generation
	// (auto-rotated by crypto/tls on cfg itself), so a Reload invalidates
	// every ticket issued before it: after a Reload each new connection
	// does a full handshake against the new certificate and CA bundle.
	cfg.WrapSession = func(cs tls.ConnectionState, ss *tls.SessionState) ([]byte, error) {
		return cfg.EncryptTicket(cs, ss)
	}
	cfg.UnwrapSession = func(identity []byte, cs tls.ConnectionState) (*tls.SessionState, error) {
		return cfg.DecryptTicket(identity, cs)
	}
	m.cfg = cfg
	return m, nil
}

// Reload re-reads the files. On any error it keeps the current material and
// returns the error; otherwise it swaps in the new material atomically. New
// handshakes use the new certificate and CA bundle; established
// connections are untouched. Safe to call concurrently with handshakes and
// with itself.
//
// Replace files atomically (write a temporary file, then rename): a Reload
// that observes a new certificate with an old key fails with
// ErrKeyMismatch and leaves the old material serving, so the worst case
// of a torn update is a Reload to retry.
func (s *Server) Reload() error {
	s.reload.Lock()
	defer s.reload.Unlock()
	m, err := s.load()
	if err != nil {
		return err
	}
	s.cur.Store(m)
	return nil
}

// Config returns a *tls.Config for tls.NewListener / tls.Server whose
// GetConfigForClient reads the current material, so it never needs
// replacing after Reload. Each call returns a new copy; the handshake
// parameters (certificate, client CAs, versions) come from
// GetConfigForClient, so changing other fields on the returned value has
// no effect on handshakes.
func (s *Server) Config() *tls.Config { return s.base.Clone() }

// MTLS reports whether clients must present a certificate that verifies
// against the client CA bundle.
func (s *Server) MTLS() bool { return s.mode == tls.RequireAndVerifyClientCert }

// NotAfter returns the expiry of the current leaf certificate, for expiry
// monitoring.
func (s *Server) NotAfter() time.Time { return s.cur.Load().leaf.NotAfter }

// Describe returns a non-secret one-line summary of the current material
// for logs and audit: the leaf's subject CN, serial (decimal), NotAfter and
// issuer CN, the chain length, and with mTLS the client CAs' CNs. It never
// contains key material, PEM or fingerprints.
func (s *Server) Describe() string {
	m := s.cur.Load()
	var b strings.Builder
	fmt.Fprintf(&b, "cn=%q serial=%s not_after=%s issuer_cn=%q chain_len=%d mtls=%t",
		m.leaf.Subject.CommonName, m.leaf.SerialNumber.String(),
		m.leaf.NotAfter.UTC().Format(time.RFC3339), m.leaf.Issuer.CommonName,
		len(m.cert.Certificate), s.MTLS())
	if s.MTLS() {
		names := make([]string, len(m.cas))
		for i, c := range m.cas {
			names[i] = fmt.Sprintf("%q", c.Subject.CommonName)
		}
		fmt.Fprintf(&b, " client_cas=[%s]", strings.Join(names, " "))
	}
	return b.String()
}
