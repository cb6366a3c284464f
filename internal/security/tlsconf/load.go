package tlsconf

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"time"

	"github.com/gpucache/gpucache/internal/security/secretfile"
)

// keyPairSpec says what a certificate/key pair is for.
type keyPairSpec struct {
	side       string           // "server" or "client"
	usage      x509.ExtKeyUsage // required extended key usage of the leaf
	requireSAN bool             // leaf must carry DNS or IP SANs (server side)
}

// maxPEMFile bounds a certificate, key or CA bundle file (a system CA
// bundle is a few hundred KiB).
const maxPEMFile = 4 << 20

// readFile reads path, a regular file of at most maxPEMFile bytes
// (secretfile.Read: a FIFO or a device is refused, not waited on), turning
// the error into one that does not repeat the path (FileError carries it)
// and says what to check.
func readFile(path string) ([]byte, error) {
	data, err := secretfile.Read(path, maxPEMFile)
	if err == nil {
		return data, nil
	}
	cause := err
	var pe *fs.PathError
	if errors.As(err, &pe) {
		cause = pe.Err
	}
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("cannot read it: %w; check the path", cause)
	case errors.Is(err, fs.ErrPermission):
		return nil, fmt.Errorf("cannot read it: %w; check that the gpucache user may read the file", cause)
	default:
		return nil, fmt.Errorf("cannot read it: %w", cause)
	}
}

// pemBlocks decodes every PEM block in data.
func pemBlocks(data []byte) []*pem.Block {
	var blocks []*pem.Block
	for {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			return blocks
		}
		blocks = append(blocks, b)
	}
}

func blockTypes(blocks []*pem.Block) string {
	var types []string
	for _, b := range blocks {
		if !slices.Contains(types, b.Type) {
			types = append(types, b.Type)
		}
	}
	return strings.Join(types, ", ")
}

func isKeyBlock(b *pem.Block) bool { return strings.HasSuffix(b.Type, "PRIVATE KEY") }

// noPEM explains why data holds no block of type want.
func noPEM(data []byte, blocks []*pem.Block, want, swapHint string) error {
	switch {
	case len(bytes.TrimSpace(data)) == 0:
		return newProblem(ErrNoPEM, "the file is empty; expected a PEM %s block", want)
	case len(blocks) == 0:
		return newProblem(ErrNoPEM, "no PEM data found (expected a \"-----BEGIN %s-----\" block); the file may be DER-encoded, truncated or not a %s", want, strings.ToLower(want))
	default:
		msg := fmt.Sprintf("the file has no %s block (found: %s)", want, blockTypes(blocks))
		if swapHint != "" {
			msg += "; " + swapHint
		}
		return newProblem(ErrNoPEM, "%s", msg)
	}
}

// parseCertificates parses every CERTIFICATE block in data, in order.
// Blocks of other types are returned in others.
func parseCertificates(data []byte) (certs []*x509.Certificate, others []*pem.Block, err error) {
	blocks := pemBlocks(data)
	for _, b := range blocks {
		if b.Type != "CERTIFICATE" {
			others = append(others, b)
			continue
		}
		c, perr := x509.ParseCertificate(b.Bytes)
		if perr != nil {
			return nil, nil, newProblem(ErrMalformed, "certificate #%d in the file does not parse: %v", len(certs)+1, perr)
		}
		certs = append(certs, c)
	}
	if len(certs) == 0 {
		return nil, nil, noPEM(data, blocks, "CERTIFICATE", "did you swap the certificate and key files?")
	}
	return certs, others, nil
}

// describeCert names a certificate for an operator, without anything secret.
func describeCert(c *x509.Certificate) string {
	return fmt.Sprintf("CN=%q serial=%s", c.Subject.CommonName, c.SerialNumber.String())
}

// checkValidity reports whether c is inside its validity window at now.
// label names the certificate within its file ("the certificate",
// "certificate #2").
func checkValidity(c *x509.Certificate, label string, now time.Time) error {
	if now.After(c.NotAfter) {
		return newProblem(ErrExpired, "%s (%s) expired at %s (%s ago); peers will refuse it: install a renewed certificate",
			label, describeCert(c), c.NotAfter.UTC().Format(time.RFC3339), now.Sub(c.NotAfter).Round(time.Second))
	}
	if now.Before(c.NotBefore) {
		return newProblem(ErrNotYetValid, "%s (%s) is not valid until %s (in %s); check the system clock or wait until then",
			label, describeCert(c), c.NotBefore.UTC().Format(time.RFC3339), c.NotBefore.Sub(now).Round(time.Second))
	}
	return nil
}

func hasUsage(c *x509.Certificate, want x509.ExtKeyUsage) bool {
	if len(c.ExtKeyUsage) == 0 && len(c.UnknownExtKeyUsage) == 0 {
		return true // no EKU extension: any usage
	}
	return slices.Contains(c.ExtKeyUsage, want) || slices.Contains(c.ExtKeyUsage, x509.ExtKeyUsageAny)
}

func usageName(u x509.ExtKeyUsage) string {
	switch u {
	case x509.ExtKeyUsageServerAuth:
		return "server authentication (serverAuth)"
	case x509.ExtKeyUsageClientAuth:
		return "client authentication (clientAuth)"
	default:
		return fmt.Sprintf("extended key usage %d", u)
	}
}

// checkChain validates a certificate chain as found in a certificate file:
// leaf first, each following certificate the issuer of the one before,
// every certificate currently valid, the leaf fit for spec.
func checkChain(certs []*x509.Certificate, spec keyPairSpec, now time.Time) error {
	leaf := certs[0]
	if err := checkValidity(leaf, "the certificate", now); err != nil {
		return err
	}
	if !hasUsage(leaf, spec.usage) {
		return newProblem(ErrUnsuitable, "the certificate (%s) is not valid for %s; its extended key usage must include it: issue a %s certificate",
			describeCert(leaf), usageName(spec.usage), spec.side)
	}
	if spec.requireSAN && len(leaf.DNSNames) == 0 && len(leaf.IPAddresses) == 0 {
		return newProblem(ErrUnsuitable, "the certificate (%s) has no DNS or IP subject alternative names; clients verify the server by SAN and ignore the CommonName: reissue it with the server's DNS names and/or IP addresses",
			describeCert(leaf))
	}
	for i := 1; i < len(certs); i++ {
		child, parent := certs[i-1], certs[i]
		if err := child.CheckSignatureFrom(parent); err != nil {
			return newProblem(ErrUnsuitable, "certificate #%d (%s) is not issued by certificate #%d (%s): the file must hold the leaf certificate first, then each intermediate CA in order (%v)",
				i, describeCert(child), i+1, describeCert(parent), err)
		}
		if err := checkValidity(parent, fmt.Sprintf("intermediate certificate #%d", i+1), now); err != nil {
			return err
		}
	}
	return nil
}

// parsePrivateKey finds and parses the private key in data.
func parsePrivateKey(data []byte) (crypto.Signer, error) {
	blocks := pemBlocks(data)
	var block *pem.Block
	for _, b := range blocks {
		if isKeyBlock(b) {
			block = b
			break
		}
	}
	if block == nil {
		return nil, noPEM(data, blocks, "PRIVATE KEY", "did you swap the certificate and key files?")
	}
	if block.Type == "ENCRYPTED PRIVATE KEY" || strings.Contains(block.Headers["Proc-Type"], "ENCRYPTED") {
		return nil, newProblem(ErrUnsuitable, "the private key is encrypted; gpucache needs an unencrypted key (protect it with file permissions instead)")
	}
	var (
		key any
		err error
	)
	switch block.Type {
	case "RSA PRIVATE KEY":
		key, err = x509.ParsePKCS1PrivateKey(block.Bytes)
	case "EC PRIVATE KEY":
		key, err = x509.ParseECPrivateKey(block.Bytes)
	case "PRIVATE KEY":
		key, err = x509.ParsePKCS8PrivateKey(block.Bytes)
	default:
		return nil, newProblem(ErrUnsuitable, "unsupported private key block type %q; use PKCS#8 (\"PRIVATE KEY\"), \"EC PRIVATE KEY\" or \"RSA PRIVATE KEY\"", block.Type)
	}
	if err != nil {
		// x509 parse errors describe the structure, never the key bytes.
		return nil, newProblem(ErrMalformed, "the %s block does not parse: %v", block.Type, err)
	}
	switch k := key.(type) {
	case *ecdsa.PrivateKey:
		return k, nil
	case *rsa.PrivateKey:
		return k, nil
	case ed25519.PrivateKey:
		return k, nil
	default:
		return nil, newProblem(ErrUnsuitable, "unsupported private key algorithm %T; use ECDSA, RSA or Ed25519", key)
	}
}

// loadKeyPair reads and validates a certificate chain and its key.
func loadKeyPair(spec keyPairSpec, certPath, keyPath string, now time.Time) (*tls.Certificate, error) {
	certRole, keyRole := spec.side+" certificate", spec.side+" key"
	certPEM, err := readFile(certPath)
	if err != nil {
		return nil, &FileError{Role: certRole, Path: certPath, Err: err}
	}
	certs, _, err := parseCertificates(certPEM)
	if err != nil {
		return nil, &FileError{Role: certRole, Path: certPath, Err: err}
	}
	if err := checkChain(certs, spec, now); err != nil {
		return nil, &FileError{Role: certRole, Path: certPath, Err: err}
	}
	keyPEM, err := readFile(keyPath)
	if err != nil {
		return nil, &FileError{Role: keyRole, Path: keyPath, Err: err}
	}
	key, err := parsePrivateKey(keyPEM)
	if err != nil {
		return nil, &FileError{Role: keyRole, Path: keyPath, Err: err}
	}
	pub, ok := key.Public().(interface{ Equal(crypto.PublicKey) bool })
	if !ok || !pub.Equal(certs[0].PublicKey) {
		return nil, &FileError{Role: keyRole, Path: keyPath, Err: newProblem(ErrKeyMismatch,
			"the private key does not belong to the certificate in %q (%s); install the key that was issued together with that certificate, or update both files",
			certPath, describeCert(certs[0]))}
	}
	chain := make([][]byte, len(certs))
	for i, c := range certs {
		chain[i] = c.Raw
	}
	return &tls.Certificate{Certificate: chain, PrivateKey: key, Leaf: certs[0]}, nil
}

// loadCABundle reads a PEM bundle of CA certificates. At least one of them
// must be currently valid; all of them go into the pool (x509 verification
// checks validity periods itself).
func loadCABundle(role, path string, now time.Time) (*x509.CertPool, []*x509.Certificate, error) {
	fail := func(err error) (*x509.CertPool, []*x509.Certificate, error) {
		return nil, nil, &FileError{Role: role, Path: path, Err: err}
	}
	data, err := readFile(path)
	if err != nil {
		return fail(err)
	}
	certs, others, err := parseCertificates(data)
	if err != nil {
		return fail(err)
	}
	for _, b := range others {
		if isKeyBlock(b) {
			return fail(newProblem(ErrUnsuitable, "the bundle contains a private key (%s block); a CA bundle must hold only certificates: remove the key from this file and keep it out of gpucache's reach", b.Type))
		}
	}
	pool := x509.NewCertPool()
	var firstErr error
	usable := 0
	for i, c := range certs {
		if !c.BasicConstraintsValid || !c.IsCA {
			return fail(newProblem(ErrUnsuitable, "certificate #%d (%s) is not a CA certificate; the bundle must hold the certificates of the issuing CAs, not leaf certificates",
				i+1, describeCert(c)))
		}
		if err := checkValidity(c, fmt.Sprintf("CA certificate #%d", i+1), now); err != nil {
			if firstErr == nil {
				firstErr = err
			}
		} else {
			usable++
		}
		pool.AddCert(c)
	}
	if usable == 0 {
		return fail(fmt.Errorf("no CA certificate in the bundle is currently valid: %w", firstErr))
	}
	return pool, certs, nil
}
