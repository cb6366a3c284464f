// Package tlsconf builds the TLS and mutual-TLS configuration of gpucache's
// network endpoints from PEM files, validates those files up front with
// errors an operator can act on, and swaps in renewed certificates and CA
// bundles without a restart.
//
// # Server side
//
//	srv, err := tlsconf.NewServer(tlsconf.Files{
//		CertFile:     "/etc/gpucache/tls/server.crt", // leaf first, then intermediates
//		KeyFile:      "/etc/gpucache/tls/server.key",
//		ClientCAFile: "/etc/gpucache/tls/client-ca.pem", // optional: turns on mTLS
//	})
//	ln := tls.NewListener(tcpListener, srv.Config())
//	// on SIGHUP, or on a timer:
//	if err := srv.Reload(); err != nil { log(err) } // old material keeps serving
//	log(srv.Describe())
//
// With ClientCAFile set, every client must present a certificate that
// verifies against that bundle for client authentication
// (tls.RequireAndVerifyClientCert); there is no "optional client
// certificate" mode. MinVersion is TLS 1.2; cipher suites and curves are
// crypto/tls's defaults.
//
// # Reload
//
// Each successful load produces an immutable generation (certificate, key,
// client CA pool, and a *tls.Config built from them) held in an
// atomic.Pointer. The *tls.Config returned by Config has a
// GetConfigForClient that returns the generation current when a
// ClientHello arrives, so listeners never need rebuilding. Reload reads and
// validates every file before swapping; on any error it returns the error
// and the previous generation keeps serving. Established connections are
// never touched: they keep the certificate and client verification of the
// handshake that opened them (rotating the client CA bundle does not cut
// off connected clients; close those connections yourself if that is
// required).
//
// Session tickets are sealed with keys that belong to the generation, so
// tickets issued before a Reload do not resume after it: the first
// connection of each client after a Reload is a full handshake that sees
// the new certificate and is verified against the new CA bundle.
//
// Replace files atomically (write to a temporary file in the same
// directory, then rename). A Reload that observes a half-done rotation, for
// instance a new certificate with the old key, fails with ErrKeyMismatch
// and changes nothing, so retrying later is always safe. The package does
// not watch files; the caller decides when to Reload.
//
// # Validation
//
// NewServer, Reload and NewClient reject, with a *FileError naming the file
// and the fix:
//   - unreadable or missing files (wrapping the fs error, e.g.
//     fs.ErrNotExist);
//   - files without the expected PEM blocks: empty, DER, garbage, or the
//     certificate and key files swapped (ErrNoPEM); blocks that do not
//     parse (ErrMalformed);
//   - a key that does not belong to the leaf certificate (ErrKeyMismatch);
//   - an expired or not-yet-valid leaf or intermediate (ErrExpired,
//     ErrNotYetValid): an already-expired certificate is an error, not a
//     warning, because every peer would refuse it;
//   - a leaf without the serverAuth (server) or clientAuth (client)
//     extended key usage, a server leaf without DNS or IP SANs (clients
//     ignore the CommonName), a chain not in leaf-then-issuer order,
//     encrypted or unsupported keys, CA bundles holding leaf certificates or
//     private keys (ErrUnsuitable);
//   - a CA bundle none of whose certificates is currently valid
//     (ErrExpired). Expired CAs next to valid ones are kept (they simply
//     verify nothing), so a bundle in the middle of a CA rotation loads.
//
// An empty required path is ErrConfig. Error messages carry paths, subject
// CNs, serials and dates, never key material.
//
// # Client side
//
// NewClient returns a *tls.Config that verifies the server against CAFile
// (required: there is deliberately no InsecureSkipVerify) and, with
// CertFile and KeyFile, presents a client certificate through
// GetClientCertificate. The client certificate is read once, by NewClient.
//
// # Peer identity
//
// PeerNames returns the CommonName, DNS SANs and URI SANs of the verified
// client certificate of a completed handshake (nil when there is none).
// Mapping those names to a tenant (e.g. CN "acme" or URI SAN
// "spiffe://gpucache/tenant/acme") is the caller's policy; PeerNames only
// ever reports names from a certificate that chained to the client CA
// bundle.
//
// # Audit
//
// Describe summarises the current generation for logs: leaf CN, serial
// (decimal), NotAfter, issuer CN, chain length, mTLS on/off and the client
// CAs' CNs. It contains no key material, PEM, or fingerprints. NotAfter
// exposes the leaf expiry for monitoring.
//
// The subpackage tlstest generates in-memory CAs, leaf certificates and PEM
// files for tests of this package and of its users.
package tlsconf
