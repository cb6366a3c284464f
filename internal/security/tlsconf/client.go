package tlsconf

import (
	"crypto/tls"
	"crypto/x509"
	"time"
)

// ClientFiles configures the client side. CAFile (required) is the PEM
// bundle of CAs that verify the server; there is deliberately no way to
// skip verification. CertFile and KeyFile are optional and give the client
// certificate for mTLS (both or neither). ServerName overrides the name
// used for SNI and for verifying the server certificate; when empty,
// tls.Dial derives it from the address.
type ClientFiles struct {
	CAFile, CertFile, KeyFile, ServerName string
}

// NewClient loads and validates f and returns a client *tls.Config:
// MinVersion TLS 1.2, RootCAs from CAFile, and, when CertFile/KeyFile are
// set, GetClientCertificate returning the certificate read now (the files
// are not re-read; build a new Config to pick up a renewed certificate).
// The certificate is offered whenever the server asks for one, even if the
// server's list of acceptable CAs does not name its issuer, so a CA
// mismatch shows up as the server's "unknown certificate authority" rather
// than as a missing certificate.
func NewClient(f ClientFiles) (*tls.Config, error) {
	if f.CAFile == "" {
		return nil, configError("client: ClientFiles.CAFile is empty; set it to the PEM bundle of the CA that issued the server certificate (skipping server verification is not supported)")
	}
	if (f.CertFile == "") != (f.KeyFile == "") {
		return nil, configError("client: ClientFiles.CertFile and ClientFiles.KeyFile must be set together (got CertFile=%q, KeyFile=%q)", f.CertFile, f.KeyFile)
	}
	now := time.Now()
	pool, _, err := loadCABundle("server CA bundle", f.CAFile, now)
	if err != nil {
		return nil, err
	}
	cfg := &tls.Config{
		MinVersion: tls.VersionTLS12,
		RootCAs:    pool,
		ServerName: f.ServerName,
	}
	if f.CertFile != "" {
		cert, err := loadKeyPair(keyPairSpec{side: "client", usage: x509.ExtKeyUsageClientAuth},
			f.CertFile, f.KeyFile, now)
		if err != nil {
			return nil, err
		}
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return cert, nil
		}
	}
	return cfg, nil
}
